"""Edge mode with real processes, qdrouterd's `RouterTest` shape (docs/EDGE.md): interiors INT.A and INT.B,
edges EA1, EA2 on INT.A and EB1, EB2 on INT.B (tests.support.edges.router_test).

Connectivity edge to edge through one and two interiors, dynamic reply addresses, anycast with consumers
on several edges, multicast to every edge exactly once, the anonymous relay, credit end to end, and
management through the mesh, on one topology for the module; the failover test (it kills an interior)
has its own (tests/system/test_edge_failover.py).
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from tests.support.clients import ACCEPTED, RELEASED, Client, make_message
from tests.support.edges import EDGES, router_test_mesh
from tests.support.management import Requester
from tests.support.waiting import pump_for, wait_until

_names = itertools.count()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    yield from router_test_mesh(tmp_path_factory, "edge")


def name(prefix: str) -> str:
    return f"{prefix}/edge-{next(_names)}"


def test_every_edge_reaches_every_other_edge(mesh):
    """A receiver on each edge; a sender on each other edge gets credit and its message ACCEPTED there."""
    receivers = {e: Client(mesh[e].url).receiver(f"closest/at-{e}", credit=20) for e in EDGES}
    for src in EDGES:
        c = Client(mesh[src].url)
        for dst in EDGES:
            if dst == src:
                continue
            s = c.sender(f"closest/at-{dst}")
            s.wait_credit(1, timeout=10)
            t = s.send(make_message(f"{src}->{dst}"))
            assert t.wait().state == ACCEPTED, (src, dst, t)
    for dst, r in receivers.items():
        got = sorted(m.body for m in r.wait_messages(3))
        assert got == sorted(f"{s}->{dst}" for s in EDGES if s != dst)


@pytest.mark.parametrize("sender_on", ["EA2", "EB1", "INT.B"])
@pytest.mark.parametrize("anonymous", [False, True])
def test_dynamic_reply_address_on_an_edge(mesh, sender_on, anonymous):
    """A dynamic receiver on EA1 is reached from EA2 (one interior), EB1 (two) and INT.B."""
    r = Client(mesh["EA1"].url).receiver(dynamic=True, credit=10)
    assert r.address.startswith("amqp:/_topo/0/EA1/temp."), r.address
    c = Client(mesh[sender_on].url)
    if anonymous:
        t = c.sender(None).send(make_message("reply", address=r.address))
    else:
        s = c.sender(r.address)
        s.wait_credit(1, timeout=10)
        t = s.send(make_message("reply"))
    assert t.wait().state == ACCEPTED, t
    assert r.wait_messages(1)[0].body == "reply"


def test_credit_is_end_to_end(mesh):
    """A producer on an edge gets credit only once a consumer exists somewhere else than nowhere: none
    while nobody consumes, then credit for a consumer on another edge, withdrawn when it leaves."""
    addr = name("balanced")
    s = Client(mesh["EA1"].url).sender(addr)
    pump_for(1.0)
    assert s.credit == 0
    rc = Client(mesh["EB2"].url)
    r = rc.receiver(addr, credit=10)
    s.wait_credit(1, timeout=10)
    assert s.send(make_message("x")).wait().state == ACCEPTED
    r.close()
    wait_until(lambda: s.credit == 0, 10, "credit withdrawn when the only consumer left")


def test_anycast_spreads_over_consumers_on_several_edges(mesh):
    addr = name("balanced")
    receivers = {e: Client(mesh[e].url).receiver(addr, credit=100) for e in ("EA2", "EB1", "EB2")}
    s = Client(mesh["EA1"].url).sender(addr)
    wait_until(lambda: s.credit > 0, 10, "credit")
    pump_for(1.0)               # every consumer's address reached the mesh
    trackers = []
    for i in range(60):
        wait_until(lambda: s.credit > 0, 10, "credit")
        trackers.append(s.send(make_message(i)))
    for t in trackers:
        assert t.wait().state == ACCEPTED
    counts = {e: len(r.received) for e, r in receivers.items()}
    assert sum(counts.values()) == 60
    assert sum(1 for n in counts.values() if n > 0) >= 2, counts


@pytest.mark.parametrize("settled", [False, True])
def test_multicast_reaches_every_edge_exactly_once(mesh, settled):
    addr = name("multicast")
    where = [*EDGES, "INT.A", "INT.B"]
    receivers = {w: Client(mesh[w].url).receiver(addr, credit=100) for w in where}
    receivers["EA1-2"] = Client(mesh["EA1"].url).receiver(addr, credit=100)     # two on the sender's edge
    s = Client(mesh["EA1"].url).sender(addr)
    s.wait_credit(1, timeout=10)
    pump_for(1.5)               # every edge's consumer is known in the mesh before the first message
    trackers = [s.send(make_message(i), settled=settled) for i in range(20)]
    if not settled:
        for t in trackers:
            assert t.wait().state == ACCEPTED
    for w, r in receivers.items():
        got = [m.body for m in r.wait_messages(20)]
        pump_for(0.3)
        got = [m.body for m in r.received]
        assert Counter(got) == Counter(range(20)), (w, got)


def test_anonymous_relay_from_an_edge(mesh):
    addr = name("closest")
    r = Client(mesh["EA1"].url).receiver(addr, credit=10)
    anon = Client(mesh["EB2"].url).sender(None)
    pump_for(1.0)
    assert anon.send(make_message("via relay", address=addr)).wait().state == ACCEPTED
    assert r.wait_messages(1)[0].body == "via relay"
    # nobody anywhere: the interior says so, the sender hears RELEASED
    assert anon.send(make_message("lost", address=name("closest"))).wait().state == RELEASED


def test_management_through_an_edge(mesh):
    """A client on INT.B asks edge EA1's agent (qdstat --edge-router), and a client on EB1 asks INT.A's."""
    assert Requester(Client(mesh["INT.B"].url)).node("EA1")["id"] == "EA1"
    req = Requester(Client(mesh["EB1"].url))
    assert req.node("INT.A")["id"] == "INT.A"
    status, _, _ = req.request({"operation": "QUERY", "type": "org.apache.qpid.dispatch.connection"},
                               None, "EA2")
    assert status == 200


def test_a_large_message_crosses_two_uplinks_intact(mesh):
    """A 3 MB message (many frames) from EA1 to EB2: through both uplinks and both interiors, byte for
    byte."""
    addr = name("closest")
    r = Client(mesh["EB2"].url).receiver(addr, credit=2)
    s = Client(mesh["EA1"].url).sender(addr)
    s.wait_credit(1, timeout=10)
    body = bytes(range(256)) * (3 * 4096)
    assert s.send(make_message(body)).wait(30).state == ACCEPTED
    assert r.wait_messages(1)[0].body == body
