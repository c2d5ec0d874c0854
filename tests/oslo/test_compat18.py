"""Rolling upgrade: oslo.messaging 14.9.3 with its own ``amqp`` driver (this process, the main venv) and
oslo.messaging 18.3.1 with meshrouter's driver (agents, .venv-oslo18: tests/support/oslo18.py) on one
four-node mesh, each serving the other: call, cast, fanout, direct to a server, call_monitor_timeout
heartbeats, remote exceptions and notifications, both ways; and 18.3.1 notifications stored by the
RabbitMQ gateway across a restart of the gateway's node.

Like every test here, each runs on the open mesh and on the mesh with OSLO_POLICY (conftest.py): the
18.3.1 driver must need nothing the 14.x driver did not (no anonymous relay, no management).
"""

from __future__ import annotations

import time

import pytest
import yaml

from tests.support.meshes import wait_address, wait_converged
from tests.support.nodes import READY_RE, kill9, spawn
from tests.support.oslo import EchoEndpoint, rpc_addresses, transport_url
from tests.support.oslo18 import Agent, NotifyCollector
from tests.support.ports import inter_router_port
from tests.support.state import gateway_connected, gateway_state
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:Using class:DeprecationWarning"),
]


@pytest.fixture
def agents(mesh, tmp_path):
    """``agents(name)``: an oslo 18.3.1 agent; all cleaned up before the mesh stops."""
    made: list[Agent] = []

    def start(name: str = "agent") -> Agent:
        a = Agent(tmp_path, f"{name}-{len(made)}")
        made.append(a)
        return a

    yield start
    problems = [p for a in reversed(made) for p in a.close()]
    if problems:
        pytest.fail("oslo18 agents: " + "; ".join(problems), pytrace=False)


def url(node) -> str:
    return transport_url(node.url)


def test_a_18_caller_is_served_by_14_servers(mesh, oslo, agents):
    topic = "compat-up"
    ea, eb = EchoEndpoint("srv14a"), EchoEndpoint("srv14b")
    oslo.rpc_server(mesh["A"], topic, "srv14a", [ea])
    oslo.rpc_server(mesh["B"], topic, "srv14b", [eb])
    addrs = rpc_addresses(topic, "srv14b")
    wait_address(mesh.values(), addrs["anycast"], ["A", "B"])
    wait_address(mesh.values(), addrs["unicast"], ["B"])
    c = agents("caller18")
    c.cmd("transport", name="t", url=url(mesh["C"]), amqp={"default_send_timeout": 10})
    replies = [c.cmd("call", transport="t", topic=topic, method="echo", args={"text": f"c{i}"}, timeout=10)
               for i in range(6)]
    assert [r.get("reply", {}).get("text") for r in replies] == [f"c{i}" for i in range(6)], replies
    assert {r["reply"]["server"] for r in replies} == {"srv14a", "srv14b"}
    direct = c.cmd("call", transport="t", topic=topic, server="srv14b", method="echo", args={"text": "d"})
    assert direct["reply"] == {"server": "srv14b", "text": "d"}, direct
    failed = c.cmd("call", transport="t", topic=topic, server="srv14a", method="fail", args={"text": "no"})
    assert failed["exc"] == "ValueError" and "boom from srv14a: no" in failed["error"], failed
    c.cmd("cast", transport="t", topic=topic, method="note", args={"text": "one"})
    c.cmd("cast", transport="t", topic=topic, fanout=True, method="note", args={"text": "all"})
    assert ea.wait_count("note", 1, 10) and eb.wait_count("note", 1, 10)
    wait_until(lambda: ea.count("note") + eb.count("note") == 3, 10, "the cast and the fanout")
    time.sleep(0.3)
    assert sorted(ea.args("note") + eb.args("note")) == ["all", "all", "one"]


def test_14_callers_are_served_by_18_servers(mesh, oslo, agents):
    topic = "compat-down"
    servers = {n: agents(f"srv18{n}") for n in ("B", "D")}
    for n, a in servers.items():
        a.cmd("transport", name="t", url=url(mesh[n]))
        a.cmd("server", name="s", transport="t", topic=topic, server=f"srv18{n}")
    wait_address(mesh.values(), rpc_addresses(topic)["anycast"], ["B", "D"])
    client = oslo.rpc_client(mesh["C"], topic, timeout=10)
    replies = [client.call({}, "echo", text=f"c{i}") for i in range(6)]
    assert [r["text"] for r in replies] == [f"c{i}" for i in range(6)]
    assert {r["server"] for r in replies} == {"srv18B", "srv18D"}
    assert client.prepare(server="srv18D").call({}, "echo", text="d") == {"server": "srv18D", "text": "d"}
    with pytest.raises(ValueError, match="boom from srv18"):
        client.call({}, "fail", text="no")
    # the 18.3.1 server's heartbeats keep a 14.x monitored call alive past its monitor timeout
    monitored = oslo.rpc_client(mesh["A"], topic, timeout=30).prepare(call_monitor_timeout=2,
                                                                       server="srv18B")
    assert monitored.call({}, "slow", seconds=4) == {"server": "srv18B", "slept": 4}
    client.cast({}, "note", text="one")
    client.prepare(fanout=True).cast({}, "note", text="all")

    def notes():
        return sorted(e[1] for a in servers.values() for e in a.cmd("events", name="s")["events"]
                      if e[0] == "note")

    wait_until(lambda: len(notes()) >= 3, 10, lambda: f"the cast and the fanout: {notes()}")
    time.sleep(0.3)
    assert notes() == ["all", "all", "one"]


def test_notifications_both_ways(mesh, oslo, agents):
    # 18.3.1 notifier on C -> 14.x listener on A
    ep = NotifyCollector()
    oslo.notification_listener(mesh["A"], "up18", [ep])
    n18 = agents("notifier18")
    n18.cmd("transport", name="n", url=url(mesh["C"]), kind="notify")
    n18.cmd("notifier", name="up", transport="n", topics=["up18"], publisher="svc18")
    n18.cmd("notify", notifier="up", priority="info", event_type="e.info", payload={"i": 1})
    n18.cmd("notify", notifier="up", priority="error", event_type="e.error", payload={"i": 2})
    got = sorted([ep.got.get(timeout=10), ep.got.get(timeout=10)])
    assert got == [("error", "svc18", "e.error", {"i": 2}), ("info", "svc18", "e.info", {"i": 1})]
    # 14.x notifier on D -> 18.3.1 listener on B
    l18 = agents("listener18")
    l18.cmd("transport", name="n", url=url(mesh["B"]), kind="notify")
    l18.cmd("listener", name="l", transport="n", topics=["down14"])
    notifier = oslo.notifier(mesh["D"], "down14", "svc14")
    notifier.info({}, "d.info", {"i": 3})
    notifier.error({}, "d.error", {"i": 4})
    wait_until(lambda: len(l18.cmd("events", name="l")["events"]) == 2, 10, "two notifications at B")
    assert sorted(l18.cmd("events", name="l")["events"]) == [
        ["error", "svc14", "d.error", {"i": 4}], ["info", "svc14", "d.info", {"i": 3}]]


def _restart_same_ports(node, request, tmp_path):
    """SIGKILL ``node`` and start it again with the same config and ports (the others' connectors find it
    again); the new process is stopped at teardown like the others."""
    cfg = yaml.safe_load(node.config_path.read_text())
    ports = [node.port, inter_router_port(node)]
    for listener, port in zip(cfg["listeners"], ports, strict=False):
        listener["port"] = port
    kill9(node)
    nodes = request.node._meshrouter_nodes
    index = len(nodes) + 100
    # spawn (stdout to a file), not launch: launch's stdout reader thread would outlive the oslo fixture's
    # check that no thread is left behind
    again = spawn(cfg, tmp_path, index)
    nodes.append(again)
    out = tmp_path / f"node-{cfg['node']['id']}-{index}.stdout"
    wait_until(lambda: any(READY_RE.match(line) for line in out.read_text().splitlines()), 15,
               "the restarted node ready")
    again.stdout_lines = out.read_text().splitlines()
    return again


@pytest.mark.rabbit_gateway("A")
def test_18_notifications_stored_by_the_gateway_survive_a_restart_of_its_node(mesh, oslo, agents, rabbit,
                                                                             request, tmp_path):
    """Sent by oslo 18.3.1 on C while no listener runs: stored in RabbitMQ by A's gateway; A is killed and
    started again; a listener then starting on B gets each notification exactly once."""
    if request.node.callspec.params.get("mesh") == "policy":
        pytest.skip("the policy mesh's teardown checks each node's refusal counters since it started, "
                    "which a "
                    "restarted node has lost; the open mesh runs this test")
    topic, addr = rabbit.topic, rabbit.addresses["info"]
    a = mesh["A"]
    wait_until(lambda: gateway_connected(a), 10, "the gateway on A connected to RabbitMQ")
    wait_address(mesh.values(), addr, ["A"])
    n18 = agents("notifier18")
    n18.cmd("transport", name="n", url=url(mesh["C"]), kind="notify")
    n18.cmd("notifier", name="n", transport="n", topics=[topic], publisher="svc18")
    n = 20
    t0 = time.monotonic()
    for i in range(n):
        n18.cmd("notify", notifier="n", priority="info", event_type="svc.stored", payload={"i": i})
    assert time.monotonic() - t0 < 10, "a notification waited for its timeout (not stored)"
    wait_until(lambda: rabbit.depth() == n, 10, lambda: f"{n} in the queue, not {rabbit.depth()}")

    a2 = _restart_same_ports(a, request, tmp_path)
    mesh["A"] = a2
    wait_converged(mesh.values(), 20)
    wait_until(lambda: gateway_connected(a2), 15, "the restarted gateway connected to RabbitMQ")
    assert rabbit.depth() == n, "the restart lost or added a stored notification"

    l18 = agents("listener18")
    l18.cmd("transport", name="n", url=url(mesh["B"]), kind="notify")
    l18.cmd("listener", name="l", transport="n", topics=[topic])

    def events():
        return l18.cmd("events", name="l")["events"]

    wait_until(lambda: len(events()) >= n, 15, lambda: f"{n} notifications at B: {len(events())}")
    wait_until(lambda: rabbit.depth() == 0, 10, lambda: f"the queue drained: depth {rabbit.depth()}")
    time.sleep(0.5)                                       # a duplicate would show up by now
    got = events()
    assert sorted(e[3]["i"] for e in got) == list(range(n)), got
    assert {(e[0], e[1], e[2]) for e in got} == {("info", "svc18", "svc.stored")}
    assert gateway_state(a2)["acked"] == n
