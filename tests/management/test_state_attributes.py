"""Entity attributes that the tests read node state through (tests/support/state.py): the streams in
progress of the ``node`` entity and the ``mobileAddresses`` of ``router-node`` (docs/MANAGEMENT.md).
The ``broker`` entity's gateway attributes are checked with RabbitMQ in tests/gateway/test_gateway.py."""

from __future__ import annotations

from tests.support.clients import Client, make_message
from tests.support.management import Requester
from tests.support.meshes import chain, converged, wait_address
from tests.support.state import mesh_view, node_state
from tests.support.waiting import wait_for


def test_a_stream_is_in_progress_until_its_last_frame(node):
    rx = Client(node.url).receiver("balanced/streaming", credit=5)
    prod = Client(node.url)
    tx = prod.sender("balanced/streaming")
    tx.wait_credit()
    data = make_message(b"x" * 300_000).encode()
    tx.link.delivery("big")
    tx.link.stream(data[:100_000])                       # frames with more=true, no last one yet
    prod._write()
    wait_for(lambda: node_state(node).streams == 1, what="the stream in progress at the node")
    assert Requester(Client(node.url)).node()["streamsInProgress"] == 1
    tx.link.stream(data[100_000:])
    tx.link.advance()
    prod._write()
    assert rx.wait_messages(1)[0].body == b"x" * 300_000
    wait_for(lambda: node_state(node).streams == 0, what="the stream ended")


def test_router_nodes_list_the_mobile_addresses_they_advertise(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    Client(c.url).receiver("svc/advertised", credit=1)
    Client(b.url).receiver("svc/advertised", credit=1)
    Client(c.url).receiver("svc/only-c", credit=1)
    wait_address([a, b, c], "svc/advertised", ["B", "C"])
    wait_address([a, b, c], "svc/only-c", ["C"])
    rows = Requester(Client(a.url)).by_id("router-node")
    assert rows["B"]["mobileAddresses"] == ["svc/advertised"]
    assert rows["C"]["mobileAddresses"] == ["svc/advertised", "svc/only-c"]
    assert rows["C"]["addrCount"] == 2
    assert mesh_view(a).addresses == {"svc/advertised": ["B", "C"], "svc/only-c": ["C"]}
