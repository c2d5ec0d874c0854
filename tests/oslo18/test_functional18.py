"""oslo.messaging 18.3.1's own functional tests (oslo_messaging/tests/functional/test_functional.py, installed
with the package in .venv-oslo18) with RPC_TRANSPORT_URL / NOTIFY_TRANSPORT_URL pointing at:

- ``rabbit``: the local RabbitMQ with the ``rabbit`` driver (the baseline, run in the same window);
- ``node``: one meshrouter node (``amqp://HOST:PORT/``);
- ``mesh``: the four-node mesh, every host in the URL (``amqp://A,B,C,D/``): each connection of the suite
  starts at a random one of them, so servers, clients, notifiers and listeners are spread over the nodes;
- ``edges``: qdrouterd's RouterTest shape (docs/EDGE.md; tests/support/edges.py): interiors INT.A and
  INT.B, edges EA1, EA2 on INT.A and EB1, EB2 on INT.B, only the edges in the URL
  (``amqp://EA1,EA2,EB1,EB2/``): every client sits on an edge, and a call, cast or notification stays
  on one edge or goes edge -> interior -> edge, through one interior or both (checked at the end: every
  edge had client deliveries and both interiors carried deliveries in transit).

The four runs go at once (the suite mostly sleeps: about a minute each on this VM), but for MetricsTestCase,
whose metrics server has a fixed port (3000) and socket: it runs after, one target at a time.
Every test the rabbit run passes must pass through the node, the mesh and the edges, except those the suite
itself skips for ``amqp:`` URLs; they must skip with the suite's own reason.
"""

from __future__ import annotations

import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.edges import EDGES, router_test
from tests.support.meshes import build
from tests.support.nodes import MESH_RULES
from tests.support.oslo import MESH_EDGES, MESH_NODES
from tests.support.oslo18 import VENV, ensure_venv
from tests.support.rabbit import RABBIT_HOST, RABBIT_PORT, require_rabbit
from tests.support.state import node_state

SUITE = "oslo_messaging.tests.functional.test_functional"
# skipped by the suite itself for amqp: URLs (its code: `if self.rpc_url.startswith("amqp:")` /
# `if not self.rpc_url.startswith("rabbit://")`), with the reason it gives
AMQP_SKIPS = {
    "CallTestCase.test_mandatory_call": "backend does not support call monitoring",
    "CastTestCase.test_server_in_group": "QPID-6307",
    "NotifyTestCase.test_multiple_servers": "QPID-6307",
}

pytestmark = pytest.mark.timeout(900)


def _start(label: str, transport_url: str, tmp: Path, select: str) -> tuple[subprocess.Popen, Path, Path]:
    python = ensure_venv()
    xml, log = tmp / f"{label}-{len(select)}.xml", tmp / f"{label}-{len(select)}.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # MetricsTestCase runs `python3 -m oslo_metrics`: the venv's, which has it
    env.update(RPC_TRANSPORT_URL=transport_url, NOTIFY_TRANSPORT_URL=transport_url,
               PATH=f"{VENV / 'bin'}:{env.get('PATH', '')}")
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout",
                                 "120",
                                 "--timeout-method=thread", "-W", "ignore", "-rs", f"--junitxml={xml}",
                                 "-k", select, "--pyargs", SUITE], cwd=tmp, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, xml, log


def _outcomes(xml: Path) -> dict[str, tuple[str, str]]:
    """{Class.test: (passed|failed|error|skipped, message)} from a junit file."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome, msg = ("failed" if tag == "failure" else tag), (el.get("message") or "")
        out[name] = (outcome, msg)
    return out


def test_oslo_18_functional_tests_pass_through_a_node_the_mesh_and_edges_wherever_rabbit_passes(
        node_factory, tmp_path):
    require_rabbit()
    single = node_factory("S", rules=MESH_RULES)
    mesh = build(node_factory, MESH_NODES, MESH_EDGES, rules=MESH_RULES)
    edged = router_test(node_factory)

    def url(nodes) -> str:
        return "amqp://" + ",".join(f"{n.host}:{n.port}" for n in nodes) + "/"

    runs = {"rabbit": f"rabbit://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/",
            "node": url([single]),
            "mesh": url(mesh.values()),
            "edges": url([edged[e] for e in EDGES])}
    t0 = time.monotonic()
    took: dict[str, float] = {}
    results: dict[str, dict] = {label: {} for label in runs}

    def finish(label: str, proc: subprocess.Popen, xml: Path, log: Path) -> None:
        try:
            proc.wait(800)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"{label}: the functional suite did not finish in 800 s; log tail:\n"
                        + log.read_text(errors="replace")[-3000:])
        assert xml.exists(), f"{label}: no junit file; log:\n{log.read_text(errors='replace')[-3000:]}"
        results[label].update(_outcomes(xml))
        took[label] = time.monotonic() - t0

    started = {label: _start(label, u, tmp_path, "not MetricsTestCase") for label, u in runs.items()}
    for label, run in started.items():
        finish(label, *run)
    logs = {label: run[2] for label, run in started.items()}
    for label, u in runs.items():
        finish(label, *_start(label, u, tmp_path, "MetricsTestCase"))
    print("functional suite durations (s, from the common start):", {k: round(v) for k, v in took.items()})
    carried = {n: {k: node_state(edged[n]).node[k] for k in ("deliveriesIngress", "deliveriesTransit")}
               for n in edged}
    print("edges target, deliveries per node:", carried)
    # the suite's clients were on every edge, and its traffic crossed both interiors
    assert all(carried[e]["deliveriesIngress"] > 0 for e in EDGES), carried
    assert all(carried[i]["deliveriesTransit"] > 0 for i in ("INT.A", "INT.B")), carried
    rabbit = results["rabbit"]
    passed = sorted(t for t, (o, _) in rabbit.items() if o == "passed")
    assert len(passed) >= 15, f"the rabbit baseline passed only {passed}: {rabbit}"
    for label in ("node", "mesh", "edges"):
        got = results[label]
        bad = {}
        for t in passed:
            outcome, msg = got.get(t, ("missing", ""))
            if outcome == "passed":
                continue
            if outcome == "skipped" and t in AMQP_SKIPS and AMQP_SKIPS[t] in msg:
                continue
            bad[t] = (outcome, msg[:300])
        assert not bad, (f"{label}: tests that pass with rabbit but not here: {bad}\nlog tail:\n"
                         + logs[label].read_text(errors="replace")[-4000:])
        # and no test passes with rabbit only because it was skipped here for another reason
        assert {t for t, (o, _) in got.items() if o == "skipped"} <= set(AMQP_SKIPS), got
