"""oslo.messaging (amqp1 driver) with every client and server on an edge (docs/EDGE.md): qdrouterd's
RouterTest shape (INT.A, INT.B; EA1, EA2 on INT.A; EB1, EB2 on INT.B). Calls through one and two
interiors, a shared topic served from two edges, fanout to a server on every edge exactly once,
notifications, and a call with no server anywhere, which times out (no credit, end to end)."""

from __future__ import annotations

import queue
import time
from collections import Counter

import oslo_messaging as om
import pytest

from tests.support.edges import EDGES, router_test_mesh
from tests.support.oslo import EchoEndpoint, notify_address, rpc_addresses
from tests.support.state import mesh_view
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore:Using class:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    """Overrides tests/oslo/conftest.py's four-node mesh for this module (the `oslo` fixture uses it)."""
    yield from router_test_mesh(tmp_path_factory, "edge-oslo")


def wait_interiors(mesh, address: str, edges) -> None:
    """Both interiors know `address` from the interiors the edges `edges` are attached to."""
    at = {"INT.A" if e.startswith("EA") else "INT.B" for e in edges}

    def ok() -> bool:
        return all(sorted(mesh_view(mesh[i]).addresses.get(address, [])) == sorted(at - {i})
                   for i in ("INT.A", "INT.B"))
    wait_until(ok, 10, f"{address} served from {sorted(at)} at both interiors")


@pytest.mark.parametrize("caller", ["EA2", "EB1"])
def test_call_from_an_edge_to_a_server_on_another_edge(mesh, oslo, caller):
    topic = f"edge-call-{caller}"
    ep = EchoEndpoint("srvEA1")
    oslo.rpc_server(mesh["EA1"], topic, "srvEA1", [ep])
    wait_interiors(mesh, rpc_addresses(topic)["anycast"], ["EA1"])
    client = oslo.rpc_client(mesh[caller], topic, timeout=10)
    replies = [client.call({}, "echo", text=f"c{i}") for i in range(10)]
    assert [r["text"] for r in replies] == [f"c{i}" for i in range(10)] and ep.count("echo") == 10


def test_shared_topic_served_from_two_edges(mesh, oslo):
    topic = "edge-shared"
    ea, eb = EchoEndpoint("srvEA1"), EchoEndpoint("srvEB2")
    oslo.rpc_server(mesh["EA1"], topic, "srvEA1", [ea])
    oslo.rpc_server(mesh["EB2"], topic, "srvEB2", [eb])
    wait_interiors(mesh, rpc_addresses(topic)["anycast"], ["EA1", "EB2"])
    client = oslo.rpc_client(mesh["EB1"], topic, timeout=10)
    replies = [client.call({}, "echo", text=f"s{i}") for i in range(20)]
    served = Counter(r["server"] for r in replies)
    assert sum(served.values()) == 20 == ea.count("echo") + eb.count("echo")
    assert served["srvEA1"] and served["srvEB2"], served


def test_fanout_reaches_a_server_on_every_edge_once(mesh, oslo):
    topic = "edge-fan"
    eps = {e: EchoEndpoint(f"srv{e}") for e in EDGES}
    for e, ep in eps.items():
        oslo.rpc_server(mesh[e], topic, ep.name, [ep])
    wait_interiors(mesh, rpc_addresses(topic)["multicast"], EDGES)
    client = oslo.rpc_client(mesh["EA1"], topic).prepare(fanout=True)
    for i in range(5):
        client.cast({}, "note", text=f"f{i}")
    for ep in eps.values():
        assert ep.wait_count("note", 5, 10), f"{ep.name} got {ep.args('note')}"
    time.sleep(0.5)                                       # a duplicate would show up by now
    for ep in eps.values():
        assert sorted(ep.args("note")) == [f"f{i}" for i in range(5)], ep.name


class NotifyEndpoint:
    def __init__(self) -> None:
        self.got: queue.Queue = queue.Queue()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self.got.put((publisher_id, event_type, payload))


def test_notifications_from_an_edge_to_a_listener_on_another_edge(mesh, oslo):
    topic = "edge-notify"
    ep = NotifyEndpoint()
    oslo.notification_listener(mesh["EB2"], topic, [ep])
    wait_interiors(mesh, notify_address(topic, "info"), ["EB2"])
    notifier = oslo.notifier(mesh["EA1"], topic, publisher_id="compute.ea1")
    notifier.info({}, "compute.instance.create.end", {"id": 1})
    assert ep.got.get(timeout=10) == ("compute.ea1", "compute.instance.create.end", {"id": 1})


def test_call_without_any_server_times_out(mesh, oslo):
    client = oslo.rpc_client(mesh["EB1"], "edge-nobody", timeout=2)
    t0 = time.monotonic()
    with pytest.raises(om.MessagingTimeout):
        client.call({}, "echo", text="anyone?")
    assert time.monotonic() - t0 < 2 + 1.5
