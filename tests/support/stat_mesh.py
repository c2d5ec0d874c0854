"""The four-node mesh with known traffic that tests/management reads with ``stat`` and ``mesh graph``.

The mesh is a square with one expensive side, so that traffic from C to A crosses B::

    A --1-- B
    |       |
    5       1
    |       |
    D --1-- C

Shortest paths: C->A via B (2), D->A via C and B (3, not the direct 5), D->B via C (2).

The traffic: a consumer on A (address ``closest/stat/work``) and a producer on C send 12 unsettled and
3 pre-settled messages; the consumer accepts 6, rejects 2, releases 1, modifies 1 (after 1.2 s) and
keeps 2 unsettled. A second producer on C (``closest/stat/idle``) never gets credit. The consumer
attaches, and every node knows of it, before the baseline readings (the wait reads the nodes through
management, which the counters would see): the changes the tests check are those of the producers and
the messages.

Every ``meshrouter stat``/``mesh graph`` run happens inside the fixture while the clients are pumped
(the autouse fixture of tests/conftest.py closes every client after the first test), and the tests
check the recorded output. Counters of the node entity include the management traffic of the stat runs
themselves (as in qdrouterd), so each node is read directly (never through the mesh) and the expected
values add the cost of one ``stat -g`` run, measured by two runs without traffic in between.

The mesh and the traffic are made once per package by the ``observed`` fixture of
tests/management/conftest.py; this module holds their shape, the traffic plan, and the helpers that
run the CLI while the test clients keep being pumped.
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

from tests.support.nodes import REPO_ROOT
from tests.support.waiting import pump

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


def general(urls: dict[str, str]) -> dict[str, dict]:
    """``stat -g --json`` of every node, each read directly."""
    runs = run_all([stat_args("-b", urls[n], "-g", "--json") for n in NAMES])
    out = {}
    for n, proc in zip(NAMES, runs, strict=True):
        data = json_of(proc)
        assert list(data) == [n], data
        out[n] = data[n]
    return out


