"""Run a message mix (tests/support/mix_client.py or tests/interop/js/mix.js) through real nodes.

A mix is a list of messages of given body kinds and sizes, sent by one client on one node to receivers
on other nodes (see either client's doc for the SPEC). :func:`run_mix` starts the client as a process,
waits for its receivers to attach and for the sender's node to know them (the mesh's address table),
lets it send, and returns its report; :func:`assert_delivered` checks that report, and
:func:`wait_nothing_in_flight` that every node is back to 0 deliveries in flight and 0 streams.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from tests.support.js import js_client_dir
from tests.support.meshes import wait_address
from tests.support.nodes import REPO_ROOT
from tests.support.state import node_state
from tests.support.waiting import wait_until

KINDS = ("data", "binary", "string", "map", "sequence")
SMALL = {"kind": "small"}
MB = 1024 * 1024


def client_command(client: str, spec: dict) -> tuple[list[str], str]:
    """The command line and working directory that run the mix `spec` with `client` (proton | rhea)."""
    text = json.dumps(spec)
    if client == "rhea":
        return ["node", "mix.js", text], str(js_client_dir())
    if client == "proton":
        return [sys.executable, "-m", "tests.support.mix_client", text], str(REPO_ROOT)
    raise ValueError(f"unknown client {client!r}")


def run_mix(client: str, spec: dict, nodes: Sequence[Any], holders: Iterable[str],
            timeout: float = 120.0) -> dict:
    """Run the mix and return its report. `holders`: the nodes of `spec["recv"]`, which every node in
    `nodes` must know as serving the address before the client sends."""
    spec = {"timeout_s": timeout - 10, **spec}
    cmd, cwd = client_command(client, spec)
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: "READY\n" in lines or proc.poll() is not None, 30,
                   lambda: f"{client} mix: receivers attached ({_stderr(proc)})")
        assert proc.poll() is None, f"{client} mix client exited: {_stderr(proc)}"
        wait_address(nodes, spec["address"], holders)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    reports = [ln for ln in lines if ln.startswith("{")]
    assert reports, f"{client} mix printed no report: {''.join(lines)[-500:]} {_stderr(proc)}"
    return json.loads(reports[-1])


def _stderr(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        return "still running"
    return (proc.stderr.read() or "")[-1500:]


def assert_delivered(report: dict, presettled: bool) -> None:
    """Every message arrived once, intact, at every receiver; unsettled ones were all ACCEPTED."""
    n = report["sent"]
    assert report["status"] == "OK", f"mix did not complete: {report}"
    for r in report["receivers"]:
        assert r["got"] == n and not r["duplicates"] and not r["missing"], f"lost or duplicated: {report}"
        assert not r["bad"], f"messages changed on the way: {report}"
    if not presettled:
        assert report["outcomes"]["accepted"] == n, f"not every message was accepted: {report}"


def wait_nothing_in_flight(nodes: Iterable[Any], timeout: float = 10.0) -> None:
    """Every node holds 0 unsettled deliveries and streams nothing (as management shows them)."""
    nodes = list(nodes)

    def idle() -> bool:
        return all(s.in_flight == 0 and s.streams == 0 for s in map(node_state, nodes))

    def what() -> str:
        return "nothing in flight: " + ", ".join(
            f"{n.node_id} in_flight={s.in_flight} streams={s.streams}" for n, s in
            ((n, node_state(n)) for n in nodes))

    wait_until(idle, timeout, what)
