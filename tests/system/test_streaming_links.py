"""Streaming links between nodes (issue 29; router/adapter/streamlinks.py).

A streamed message crosses to a peer on a link of its own, opened on demand and reused; several
large messages cross at once, each on its own link, and small ones beside them. A peer node may open at
most 16 of them toward a node, and only as their sender: an impostor on the inter-router listener that
asks for more, or asks the node to send on one, is refused link by link, its connection kept.
"""

from __future__ import annotations

from proton import Data, symbol

from tests.support.clients import Client, make_message, random_bytes
from tests.support.meshes import build, inter_router_port, wait_address
from tests.support.state import reading
from tests.support.waiting import wait_for

MB = 1024 * 1024
STREAM = "qd.router-stream"


def stream_links(node, peer: str) -> list[dict]:
    """The node's links whose name says it opened them as streaming links toward `peer`... or `peer`
    opened them toward the node (`qdlink.<opener>.qd.router-stream.<n>`)."""
    with reading(node) as m:
        rows = m.query_dicts("link", ["linkName", "linkDir", "peerNode"])
    return [r for r in rows if STREAM in (r["linkName"] or "") and r["peerNode"] == peer]


def test_concurrent_large_messages_each_take_a_link_and_the_links_are_reused(node_factory):
    nodes = build(node_factory, ["A", "B"], [("B", "A", 1)])
    a, b = nodes["A"], nodes["B"]
    receivers = [Client(b.url).receiver(f"balanced/big-{i}", credit=5, credit_window=5) for i in range(3)]
    small_rx = Client(b.url).receiver("balanced/small", credit=50, credit_window=50)
    for i in range(3):
        wait_address(nodes.values(), f"balanced/big-{i}", ["B"])
    wait_address(nodes.values(), "balanced/small", ["B"])
    senders = []
    for i in range(3):
        s = Client(a.url).sender(f"balanced/big-{i}")
        s.wait_credit()
        senders.append(s)
    small = Client(a.url).sender("balanced/small")
    small.wait_credit()
    bodies = [random_bytes(6 * MB) for _ in range(3)]
    for round_ in range(2):             # all three at once: as many links as streams overlapped (<= 3)
        trackers = [s.send(make_message(body)) for s, body in zip(senders, bodies, strict=True)]
        smalls = [small.send(make_message(f"small {round_} {k}")) for k in range(20)]
        for t in trackers + smalls:
            assert t.wait(30).outcome == "ACCEPTED", t
        for r in receivers:
            r.wait_messages(round_ + 1, timeout=30)
        out = stream_links(a, "B")
        assert [r["linkDir"] for r in out] == ["out"] * len(out) and 1 <= len(out) <= 3, out
    opened = sorted(r["linkName"] for r in stream_links(a, "B"))
    for s, body, r in zip(senders, bodies, receivers, strict=True):   # one at a time: a link is free
        assert s.send(make_message(body)).wait(30).outcome == "ACCEPTED"
        r.wait_messages(3, timeout=30)
    assert sorted(r["linkName"] for r in stream_links(a, "B")) == opened      # reused, none added
    assert [r.received[-1].body for r in receivers] == bodies
    assert len(small_rx.received) == 40


def _stream_link_attach(cl: Client, name: str, as_sender: bool):
    link = cl.session.sender(name) if as_sender else cl.session.receiver(name)
    for terminus in (link.source, link.target):
        caps = terminus.capabilities
        caps.put_array(False, Data.SYMBOL)
        caps.enter()
        caps.put_symbol(symbol(STREAM))
        caps.exit()
    link.open()
    if not as_sender:
        link.flow(10)
    cl._write()
    return link


def test_an_impostor_peer_gets_16_streaming_links_and_no_more(node_factory):
    nodes = build(node_factory, ["A", "B"], [("B", "A", 1)])
    a = nodes["A"]
    cl = Client(f"amqp://127.0.0.1:{inter_router_port(a)}", container_id="Z")
    links = [_stream_link_attach(cl, f"Z-stream-{i}", as_sender=True) for i in range(20)]
    backwards = _stream_link_attach(cl, "Z-stream-backwards", as_sender=False)

    def answered(link) -> bool:
        return bool(link.state & link.REMOTE_ACTIVE) or bool(link.state & link.REMOTE_CLOSED)
    wait_for(lambda: all(answered(lk) for lk in links + [backwards]), what="every attach answered")
    refused = [lk for lk in links if lk.state & lk.REMOTE_CLOSED]
    assert len(refused) == 4, [lk.remote_condition for lk in refused]
    assert all(lk.remote_condition.name == "amqp:resource-limit-exceeded" for lk in refused)
    assert backwards.state & backwards.REMOTE_CLOSED
    assert "opened by the node that sends" in backwards.remote_condition.description
    assert cl.remote_open and not cl.transport_closed       # the connection itself is kept
    # the real mesh is untouched: A and B still pass messages
    rx = Client(nodes["B"].url).receiver("balanced/after", credit=5)
    wait_address(nodes.values(), "balanced/after", ["B"])
    s = Client(a.url).sender("balanced/after")
    s.wait_credit()
    assert s.send(make_message("still fine")).wait().outcome == "ACCEPTED"
    assert rx.wait_messages(1)[0].body == "still fine"
