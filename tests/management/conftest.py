"""The four-node mesh with known traffic, made once for the tests of this directory.

Its shape, the traffic plan and the CLI helpers are in tests/support/stat_mesh.py (see its docstring).
"""

from __future__ import annotations

import sys
import time

import pytest

from tests.support.clients import Client
from tests.support.meshes import build, wait_address
from tests.support.nodes import NodeSet
from tests.support.stat_mesh import (
    ACCEPT,
    EDGES,
    IDLE,
    MODIFY,
    NAMES,
    PRESETTLED,
    REJECT,
    RELEASE,
    SENT,
    STUCK_AFTER,
    UNSETTLED,
    WORK,
    Observed,
    general,
    run_all,
    stat_args,
)
from tests.support.waiting import close_all, pump_for, wait_for


@pytest.fixture(scope="package")
def package_node_factory(tmp_path_factory):
    """Like tests/conftest.py's node_factory, for one package: nodes stopped (and checked) at the end."""
    nodes = NodeSet(tmp_path_factory.mktemp("mesh"))
    yield nodes.start
    close_all()
    failure = nodes.stop_all()
    if failure:
        pytest.fail(failure, pytrace=False)


@pytest.fixture(scope="package")
def observed(package_node_factory, tmp_path_factory) -> Observed:
    nodes = build(package_node_factory, NAMES, EDGES)
    urls = {n: nodes[n].url for n in NAMES}
    obs = Observed(nodes, urls, out_dir=tmp_path_factory.mktemp("graph"))
    consumer = Client(urls["A"], container_id="stat-consumer")
    rx = consumer.receiver(WORK, credit=SENT + 5, auto_accept=False)
    wait_address(nodes.values(), WORK, ["A"])
    obs.general.append(general(urls))
    obs.general.append(general(urls))

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

    obs.general.append(general(urls))
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
    obs.stuck = general(urls)
    before = time.monotonic() - idle_since
    obs.runs["stuck-l-C"] = run_all([stat_args("-b", urls["C"], "-l", "--json")])[0]
    obs.idle_seconds = (before, time.monotonic() - idle_since)
    return obs
