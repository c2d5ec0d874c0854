"""One four-node mesh with known traffic, shared by the tests of this directory.

The mesh is a square with one expensive side, so that traffic from C to A crosses B::

    A --1-- B
    |       |
    5       1
    |       |
    D --1-- C

Shortest paths: C->A via B (2), D->A via C and B (3, not the direct 5), D->B via C (2).

The traffic: a consumer on A (address ``closest/stat/work``) and a producer on C send 12 unsettled and
3 pre-settled messages; the consumer accepts 6, rejects 2, releases 1, modifies 1 (after 1.2 s) and
keeps 2 unsettled. A second producer on C (``closest/stat/idle``) never gets credit.

Every ``meshrouter stat``/``mesh graph`` run happens inside the fixture while the clients are pumped
(the autouse fixture of tests/conftest.py closes every client after the first test), and the tests
check the recorded output. Counters of the node entity include the management traffic of the stat runs
themselves (as in qdrouterd), so each node is read directly (never through the mesh) and the expected
values add the cost of one ``stat -g`` run, measured by two runs without traffic in between.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DEFAULT_RULES, REPO_ROOT, _start_node, _stop
from tests.integration import helpers
from tests.integration.helpers import Client, pump, pump_for, wait_for
from tests.system.meshkit import build, receiver, wait_address

NAMES = ["A", "B", "C", "D"]
EDGES = [("B", "A", 1), ("C", "B", 1), ("D", "C", 1), ("D", "A", 5)]
WORK = "closest/stat/work"
IDLE = "closest/stat/idle"
UNSETTLED, PRESETTLED = 12, 3
SENT = UNSETTLED + PRESETTLED
ACCEPT, REJECT, RELEASE, MODIFY, HELD = 6, 2, 1, 1, 2
STUCK_AFTER = 10.0
CLI_TIMEOUT = 60.0


def stat_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "router", "stat", *args]


def run_all(commands: Sequence[Sequence[str]],
            timeout: float = CLI_TIMEOUT) -> list[subprocess.CompletedProcess]:
    """Run the commands at once, pumping the test clients until every one has exited."""
    procs = [subprocess.Popen(list(c), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=REPO_ROOT, stdin=subprocess.DEVNULL) for c in commands]
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise AssertionError(f"commands still running after {timeout:g} s: {commands}")
            pump(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    done = []
    for c, p in zip(commands, procs, strict=True):
        out, err = p.communicate(timeout=5)
        done.append(subprocess.CompletedProcess(list(c), p.returncode, out, err))
    return done


def json_of(proc: subprocess.CompletedProcess) -> Any:
    assert proc.returncode == 0, f"{proc.args[3:]} exited {proc.returncode}: {proc.stderr}"
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)


@dataclass
class Observed:
    """The mesh, and what the CLI printed at each step."""

    nodes: dict
    urls: dict[str, str]
    general: list[dict[str, dict]] = field(default_factory=list)   # stat -g per node: S0, S1, S2
    stuck: dict[str, dict] = field(default_factory=dict)           # stat -g after STUCK_AFTER s
    runs: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    out_dir: Path | None = None
    idle_seconds: tuple[float, float] = (0.0, 0.0)   # age of the idle producer before/after stuck-l-C

    def json(self, name: str) -> Any:
        return json_of(self.runs[name])

    def delta(self, node_id: str, attr: str) -> int:
        """The change of a node counter caused by the traffic (the stat runs' own cost taken out)."""
        s0, s1, s2 = (g[node_id][attr] for g in self.general)
        return (s2 - s1) - (s1 - s0)


@pytest.fixture(scope="package")
def package_node_factory(tmp_path_factory):
    """Like tests/conftest.py's node_factory, for one package: nodes stopped (and checked) at the end."""
    tmp = tmp_path_factory.mktemp("mesh")
    nodes = []

    def factory(node_id: str = "A", *, link_capacity: int = 250, idle_timeout: float = 16,
                rules=DEFAULT_RULES, default_distribution: str = "balanced", log_level: str = "info",
                extra: dict | None = None):
        n = _start_node(tmp, len(nodes), node_id, rules, default_distribution, link_capacity,
                        idle_timeout, log_level, extra)
        nodes.append(n)
        return n

    yield factory
    helpers.close_all()
    problems = [p for n in nodes for p in _stop(n)]
    if problems:
        tails = "\n".join(f"--- node {n.node_id} stderr tail:\n{n.stderr_tail()}" for n in nodes)
        pytest.fail("; ".join(problems) + "\n" + tails, pytrace=False)


def _general(urls: dict[str, str]) -> dict[str, dict]:
    """``stat -g --json`` of every node, each read directly."""
    runs = run_all([stat_args("-b", urls[n], "-g", "--json") for n in NAMES])
    out = {}
    for n, proc in zip(NAMES, runs, strict=True):
        data = json_of(proc)
        assert list(data) == [n], data
        out[n] = data[n]
    return out


@pytest.fixture(scope="package")
def observed(package_node_factory, tmp_path_factory) -> Observed:
    nodes = build(package_node_factory, NAMES, EDGES)
    urls = {n: nodes[n].url for n in NAMES}
    obs = Observed(nodes, urls, out_dir=tmp_path_factory.mktemp("graph"))
    obs.general.append(_general(urls))
    obs.general.append(_general(urls))

    consumer = Client(urls["A"], container_id="stat-consumer")
    rx = receiver(consumer, WORK, credit=SENT + 5, auto_accept=False)
    wait_address(nodes.values(), WORK, ["A"])
    producer = Client(urls["C"], container_id="stat-producer")
    tx = producer.sender(WORK)
    tx.wait_credit(SENT)
    producer.sender(IDLE)
    idle_since = time.monotonic()
    trackers = [tx.send(f"u{i}") for i in range(UNSETTLED)]
    trackers += [tx.send(f"p{i}", settled=True) for i in range(PRESETTLED)]
    got = rx.wait_messages(SENT)
    assert [r.body for r in got] == [f"u{i}" for i in range(UNSETTLED)] + [f"p{i}" for i in range(PRESETTLED)]
    held_since = time.monotonic()
    outcomes = ["accept"] * ACCEPT + ["reject"] * REJECT + ["release"] * RELEASE
    for rec, outcome in zip(got, outcomes, strict=False):
        getattr(rec, outcome)()
    pump_for(1.2)                                       # the modified one is settled after > 1 s
    got[len(outcomes)].modify(failed=True)
    settled = ACCEPT + REJECT + RELEASE + MODIFY
    wait_for(lambda: sum(t.settled for t in trackers[:UNSETTLED]) == settled,
             what=lambda: f"{settled} outcomes at the producer: {trackers[:UNSETTLED]}")
    pump_for(0.3)                                       # let the last dispositions reach every node

    obs.general.append(_general(urls))
    names = []
    commands = []
    for n in NAMES:
        for view in ("l", "a", "n", "c"):
            names.append(f"{view}-{n}")
            commands.append(stat_args("-b", urls[n], f"-{view}", "--json"))
    for name, proc in zip(names, run_all(commands), strict=True):
        obs.runs[name] = proc
    # tables, -r and --all-nodes go through the mesh: after the exact counts above
    later = {
        "table-l-A": stat_args("-b", urls["A"], "-l"),
        "json-l-A": stat_args("-b", urls["A"], "-l", "--json"),
        "table-a-C": stat_args("-b", urls["C"], "-a"),
        "json-a-C": stat_args("-b", urls["C"], "-a", "--json"),
        "table-g-B": stat_args("-b", urls["B"]),
        "table-c-B": stat_args("-b", urls["B"], "-c"),
        "json-c-B": stat_args("-b", urls["B"], "-c", "--json"),
        "table-n-D": stat_args("-b", urls["D"], "-n"),
    }
    for name, args in later.items():           # one after the other: each sees the previous one gone
        obs.runs[name] = run_all([args])[0]
    obs.runs["remote-a-A"] = run_all([stat_args("-b", urls["C"], "-r", "A", "-a", "--json")])[0]
    obs.runs["all-n"] = run_all([stat_args("-b", urls["C"], "--all-nodes", "-n", "--json")])[0]
    obs.runs["all-a-table"] = run_all([stat_args("-b", urls["C"], "--all-nodes", "-a")])[0]
    obs.runs["graph-bus"] = run_all([[sys.executable, "-m", "router", "mesh", "graph", "-b", urls["D"],
                                      "--out", str(obs.out_dir / "bus")]])[0]

    pump_for(max(0.0, STUCK_AFTER + 0.5 - (time.monotonic() - held_since)))
    obs.stuck = _general(urls)
    before = time.monotonic() - idle_since
    obs.runs["stuck-l-C"] = run_all([stat_args("-b", urls["C"], "-l", "--json")])[0]
    obs.idle_seconds = (before, time.monotonic() - idle_since)
    return obs
