#!/usr/bin/env python3
"""A large absolute MAU at a restarted node (issue 33, point 5): the longest loop turn while it is applied.

Two nodes: A holds ``--addresses`` receivers on unique addresses (raw connections of 1,000 links), C is
joined to A and routes them all. C is killed (kill -9) and started again without its connector, under
benchmarks/harness/turns.py (every event-loop callback of 1 ms or more is recorded with its start time);
a canary RPC stream (echo server and caller both on C, in a process of their own, ``--canary-rate``
calls/s) starts; then the connector is added (SIGHUP, a reload). C asks A for its addresses (MAR) and
gets all of them in one absolute MAU. Measured in C, from the reload until C's address table holds every
address (management's ``addrCount``, polled every 0.1 s; checked once afterwards through the ``address``
table: every one has a remote destination) plus one second: the longest callbacks by CPU time (name, ms; and
the longest by wall-clock time, which on a shared machine includes other processes' slices), how many took
over 5 and 20 ms of CPU, and the canary's p50 / p99 / max; and A's longest callback (CPU) in that window (A,
run under the same probe, encodes the absolute MAU in the turn that answers the MAR).

``--base REV`` runs the same with the nodes of git revision REV first (extracted with git archive), so the
two trees are measured in one window on one machine.

    .venv/bin/python benchmarks/mau_bench.py
    .venv/bin/python benchmarks/mau_bench.py --base main --runs 3

Prints a Markdown table and writes benchmarks/results/<timestamp>-mau.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO / "benchmarks", REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import yaml  # noqa: E402
from harness.canary import CanaryProcess  # noqa: E402
from harness.paths import HOST, BenchError, python_exe  # noqa: E402
from harness.procs import free_ports, spawn, stop_process, wait_for_lines  # noqa: E402
from harness.report import machine, markdown_table, save_result  # noqa: E402
from harness.trees import extract  # noqa: E402

from tests.support.bulk import attach_receivers  # noqa: E402
from tests.support.state import StateUnavailable, reading  # noqa: E402
from tests.support.waiting import close_all  # noqa: E402

PREFIX = "balanced/resync/"
ECHO = "openstack.org/om/rpc/anycast/resync/echo"
TURNS = REPO / "benchmarks" / "harness" / "turns.py"
READY = [r"listening: role=normal url=(\S+)", r"ready: node=(\S+) pid=(\d+)"]
TIMERS = {"hello_interval": 0.2, "hello_max_age": 0.6, "ra_interval_flux": 1.0}


class Proc:
    """A node process of the benchmark (what tests.support.state.reading needs: url, node_id)."""

    def __init__(self, node_id: str, cmd: list[str], tree: Path, logs: Path, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.node_id = node_id
        self.proc, out, err = spawn(cmd, logs, name, env=env, cwd=tree)
        listening, _ = wait_for_lines(f"node {name}", self.proc, out, err, READY, 60)
        self.url = listening.group(1)


def _config(path: Path, node_id: str, listeners: list[dict], connect: int | None) -> Path:
    data = {"node": {"id": node_id, "idle_timeout": 0},     # the raw receivers send no heartbeats
            "listeners": listeners, "router": dict(TIMERS),
            "connectors": [] if connect is None else [{"host": HOST, "port": connect, "cost": 1}]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _count(node: Proc, attribute: str = "addrCount") -> int:
    with reading(node) as m:
        return m.query_dicts("node", [attribute])[0][attribute]


def _wait(what: str, done: Any, timeout: float, every: float = 0.1) -> float:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise BenchError(f"mau_bench: {what} not within {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic()


def run_once(tree: Path, n: int, rate: float, logs: Path, tag: str) -> dict[str, Any]:
    """One measurement with the nodes of `tree`."""
    a_client, a_inter, c_client = free_ports(3)
    a_listeners = [{"host": HOST, "port": a_client, "role": "normal"},
                   {"host": HOST, "port": a_inter, "role": "inter-router"}]
    a_cfg = _config(logs / f"A-{tag}.yaml", "A", a_listeners, None)
    c_listeners = [{"host": HOST, "port": c_client, "role": "normal"}]
    c_cfg = _config(logs / f"C-{tag}.yaml", "C", c_listeners, a_inter)
    a_turns = logs / f"A-{tag}-turns.json"        # A answers the MAR: it encodes the absolute MAU
    a = Proc("A", [python_exe(), str(TURNS), str(a_turns), "1", "--", "run", str(a_cfg)], tree, logs,
             f"A-{tag}")
    c = Proc("C", [python_exe(), "-m", "router", "run", str(c_cfg)], tree, logs, f"C-{tag}-0")
    canary = None
    try:
        attach_receivers(a.url, [f"{PREFIX}{i}" for i in range(n)])
        _wait("C routing A's addresses (diff MAUs)", lambda: _count(c) >= n, 120, 0.5)
        os.kill(c.proc.pid, signal.SIGKILL)
        c.proc.wait(10)
        _config(c_cfg, "C", c_listeners, None)             # no connector: its clients are up first
        turns_out = logs / f"C-{tag}-turns.json"
        c = Proc("C", [python_exe(), str(TURNS), str(turns_out), "1", "--", "run", str(c_cfg)], tree, logs,
                 f"C-{tag}-1")
        canary = CanaryProcess(c.url, c.url, ECHO, rate, f"canary-{tag}")
        time.sleep(1.0)
        _config(c_cfg, "C", c_listeners, a_inter)
        joined = time.monotonic()
        os.kill(c.proc.pid, signal.SIGHUP)
        routed = _wait("C routing A's addresses (absolute MAU)", lambda: _count(c) >= n, 120)
        time.sleep(1.0)
        end = time.monotonic()
        window = canary.window(joined, end)
        canary.stop()
        canary = None
        with reading(c) as m:
            rows = m.query_dicts("address", ["identity", "remoteCount"])
        try:
            steps = _count(c, "addressSteps")
        except StateUnavailable:            # a tree before the counter
            steps = None
        remote = sum(1 for r in rows if r["identity"].startswith(PREFIX) and r["remoteCount"])
        if remote != n:
            raise BenchError(f"mau_bench: C routes {remote} of {n} addresses")
        stop_process(c.proc)
        turns = [t for t in json.loads(turns_out.read_text()) if joined <= t[0] <= end]
    finally:
        if canary is not None:
            canary.stop()
        close_all()
        for node in (c, a):
            stop_process(node.proc)
    a_longest = max((t[2] for t in json.loads(a_turns.read_text()) if joined <= t[0] <= end), default=0.0)
    turns.sort(key=lambda t: -t[2])
    return {"routed_s": routed - joined, "address_steps": steps, "a_longest_cpu_ms": 1000 * a_longest,
            "longest_cpu_ms": 1000 * turns[0][2] if turns else 0.0,
            "longest_wall_ms": 1000 * max((t[1] for t in turns), default=0.0),
            "longest": [(round(1000 * c, 1), name) for _, _, c, name in turns[:5]],
            "over_5ms": sum(1 for t in turns if t[2] > 0.005),
            "over_20ms": sum(1 for t in turns if t[2] > 0.02),
            "canary": {k: v for k, v in window.items() if k != "slow_calls"}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addresses", type=int, default=20_000)
    ap.add_argument("--canary-rate", type=float, default=100.0, help="canary calls per second")
    ap.add_argument("--runs", type=int, default=1, help="measurements per tree (alternating)")
    ap.add_argument("--base", help="git revision whose nodes are measured too (before / after)")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="mau-bench-") as tmp:
        logs = Path(tmp)
        trees = {"working tree": REPO}
        if args.base:
            base = logs / "base"
            base.mkdir()
            trees = {f"base {args.base}": extract(args.base, base), **trees}
        for run in range(args.runs):
            for label, tree in trees.items():
                r = run_once(tree, args.addresses, args.canary_rate, logs, f"{len(results)}-{run}")
                results.setdefault(label, []).append(r)
                print(f"{label}, run {run + 1}: longest turn {r['longest_cpu_ms']:.1f} ms CPU, routed after "
                      f"{r['routed_s']:.2f} s; longest: {r['longest']}", flush=True)
    rows = [[label, i + 1, f"{r['routed_s']:.2f}", f"{r['longest_cpu_ms']:.1f}",
             f"{r['longest_wall_ms']:.1f}", r["over_5ms"], r["over_20ms"],
             r["address_steps"] if r["address_steps"] is not None else "-",
             f"{r['canary'].get('p50_ms', 0):.1f}", f"{r['canary'].get('p99_ms', 0):.1f}",
             f"{r['canary'].get('max_ms', 0):.1f}", r["longest"][0][1] if r["longest"] else "-",
             f"{r['a_longest_cpu_ms']:.1f}"]
            for label, runs in results.items() for i, r in enumerate(runs)]
    print(f"\nC takes {args.addresses} addresses of A in one absolute MAU ({machine()})\n")
    print(markdown_table(["nodes", "run", "routed after (s)", "longest turn: CPU (ms)", "wall (ms)",
                          "turns > 5 ms CPU", "> 20 ms",
                          "address steps", "canary p50 (ms)", "p99", "max", "longest callback",
                          "A's longest turn (ms)"], rows))
    path = save_result("mau", {"addresses": args.addresses, "canary_rate": args.canary_rate, "runs": results},
                       args.label)
    print(f"\nresults: {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BenchError as exc:
        raise SystemExit(str(exc)) from None
