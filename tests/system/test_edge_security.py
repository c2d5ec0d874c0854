"""Edge mode as an attacker sees it (docs/EDGE.md, "Security"): a connection to an interior's edge
listener cannot claim the id of an interior or of an edge attached there, cannot inject link-state, cannot
proxy node-scoped addresses, and carries no client links.
"""

from __future__ import annotations

import pytest

from router.edge.messages import EDGE_ADDR, EdgeMessage, encode
from router.node.mesh import encode_control
from tests.support.clients import ACCEPTED, Client, make_message
from tests.support.edges import FakeEdge, edge_port, router_test_mesh
from tests.support.state import mesh_view
from tests.support.waiting import pump_for, wait_until


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    yield from router_test_mesh(tmp_path_factory, "edge-sec")


def _edge_url(node) -> str:
    return f"amqp://127.0.0.1:{edge_port(node)}"


def _refused(client: Client) -> str:
    wait_until(lambda: client.remote_condition is not None or client.transport_closed, 10,
               "the interior closed the impostor's connection")
    cond = client.remote_condition
    return cond.name if cond is not None else "closed"


@pytest.mark.parametrize("claimed", ["INT.A", "INT.B", "EA1"])
def test_an_edge_cannot_claim_an_id_in_use(mesh, claimed):
    """INT.A's own id, its peer interior's id, and an edge attached to it: refused, and the real one
    still routes."""
    impostor = FakeEdge(_edge_url(mesh["INT.A"]), claimed)
    assert _refused(impostor.client) == "amqp:unauthorized-access"
    rx = Client(mesh["EB1"].url).receiver(f"closest/after-{claimed}", credit=5)
    s = Client(mesh["EA1"].url).sender(f"closest/after-{claimed}")
    s.wait_credit(1, timeout=10)
    assert s.send(make_message("still here")).wait().state == ACCEPTED
    assert rx.wait_messages(1)[0].body == "still here"


def test_an_edge_cannot_inject_link_state(mesh):
    """HELLO, RA and an LSU naming a ghost node, sent on an edge connection's control link, never reach
    the link-state engine: no interior learns of the ghost or of the edge as a node."""
    evil = FakeEdge(_edge_url(mesh["INT.A"]), "EVIL")
    pump_for(0.5)
    body = {"id": "GHOST", "pv": 1, "area": "0", "instance": 7}
    evil.send(encode_control({"to": "_local/qdhello", "opcode": "HELLO",
                              "body": {**body, "seen": ["INT.A"]}}))
    evil.send(encode_control({"to": "_topo/0/all/qdrouter", "opcode": "RA",
                              "body": {**body, "ls_seq": 3, "mobile_seq": 0}}))
    evil.send(encode_control({"to": "_topo/0/INT.A/qdrouter", "opcode": "LSU",
                              "body": {**body, "ls_seq": 3, "ls": {"id": "GHOST", "area": "0", "ls_seq": 3,
                                                                   "peers": {"INT.A": 1}}}}))
    pump_for(1.0)
    for name in ("INT.A", "INT.B"):
        view = mesh_view(mesh[name])
        assert "GHOST" not in view.reachable and "EVIL" not in view.reachable, view
        assert "GHOST" not in view.neighbors and "EVIL" not in view.neighbors, view
    assert not evil.client.transport_closed      # dropped and logged, the connection is not the problem


def test_an_edge_cannot_proxy_node_scoped_addresses(mesh):
    """An EDGE_ADDR claiming `_topo/0/INT.B/$management` (to draw INT.B's management traffic) is
    dropped whole; a well-formed one is taken (INT.B learns the address from INT.A)."""
    evil = FakeEdge(_edge_url(mesh["INT.A"]), "EVIL2")
    pump_for(0.5)
    evil.send(encode(EdgeMessage(EDGE_ADDR, ["_topo/0/INT.B/$management", "closest/forged"], full=True)))
    pump_for(1.0)
    assert "closest/forged" not in mesh_view(mesh["INT.B"]).addresses
    evil.send(encode(EdgeMessage(EDGE_ADDR, ["closest/evil2"], full=True)))
    wait_until(lambda: mesh_view(mesh["INT.B"]).addresses.get("closest/evil2") == ["INT.A"], 10,
               "INT.B learns the well-formed address from INT.A")


def test_the_edge_listener_carries_no_client_links(mesh):
    c = Client(_edge_url(mesh["INT.A"]))
    r = c.receiver("closest/x", credit=1, wait=False)
    wait_until(lambda: r.remote_closed, 10, "the receiver refused")
    assert r.remote_condition.name == "qd:connection-role"
