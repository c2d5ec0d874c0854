"""A large message that goes wrong half-way across the mesh (issue 29): only that message is lost.

Diamond A-B (1), B-D (1), A-C (5), C-D (5): a producer on A streams an 8 MB message to a consumer on D
through B, and something happens to it mid-stream:

* the producer aborts the transfer (``aborted=true``);
* the consumer detaches while its copy is half-sent (it stopped reading, so the message is stuck
  part-way along the whole path);
* the producer's connection dies;
* the next hop (B) is killed.

Each time, meanwhile and afterwards, small messages keep flowing between A and D: on another link while
the large one is stuck, and on the same link once it is over; the large message ends RELEASED or
MODIFIED for its producer (when it still has one), its consumer sees an aborted transfer or nothing, and
no node holds a delivery or a stream afterwards.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.clients import MODIFIED, RELEASED, Client, Tracker, make_message, random_bytes
from tests.support.meshes import build, wait_address
from tests.support.nodes import kill9
from tests.support.state import mesh_view, node_state
from tests.support.waiting import wait_for, wait_until

MB = 1024 * 1024
EDGES = [("B", "A", 1), ("C", "A", 5), ("D", "B", 1), ("D", "C", 5)]
_tags = itertools.count()


@pytest.fixture
def diamond(node_factory):
    nodes = build(node_factory, ["A", "B", "C", "D"], EDGES)
    assert mesh_view(nodes["A"]).next_hops["D"] == "B"
    return nodes


def start_big(s, data: bytes, upto: int) -> Tracker:
    """Begin a delivery of `data` on sender link `s`, sending only its first `upto` bytes."""
    tag = f"big-{next(_tags)}"
    dlv = s.link.delivery(tag)
    s.link.stream(data[:upto])
    tr = Tracker(s, tag, dlv, presettled=False)
    s.trackers[tag] = tr
    s.client._write()
    return tr


def streaming(node) -> bool:
    return node_state(node).streams > 0


def small_ones_flow(sender, receiver, n: int = 10, tag: str = "small") -> None:
    """`n` small messages from `sender` reach `receiver` and are all ACCEPTED."""
    before = len(receiver.received)
    trackers = [sender.send(make_message(f"{tag} {i}")) for i in range(n)]
    for t in trackers:
        assert t.wait().outcome == "ACCEPTED", t
    got = receiver.wait_messages(before + n)
    assert [r.body for r in got[before:]] == [f"{tag} {i}" for i in range(n)]


def nothing_in_flight(nodes) -> None:
    for nd in nodes:
        wait_until(lambda nd=nd: (lambda s: s.in_flight == 0 and s.streams == 0)(node_state(nd)), 10,
                   lambda nd=nd: f"node {nd.node_id} holding nothing: {node_state(nd)}")


def side_traffic(diamond):
    """A second producer on A and consumer on D, on an address of their own."""
    rx = Client(diamond["D"].url).receiver("balanced/side", credit=20, credit_window=20)
    wait_address(diamond.values(), "balanced/side", ["D"])
    tx = Client(diamond["A"].url).sender("balanced/side")
    tx.wait_credit()
    return tx, rx


def big_path(diamond, address: str = "balanced/big"):
    cons = Client(diamond["D"].url)
    rx = cons.receiver(address, credit=5, credit_window=5)
    wait_address(diamond.values(), address, ["D"])
    prod = Client(diamond["A"].url)
    s = prod.sender(address)
    s.wait_credit()
    return prod, s, cons, rx


def test_producer_aborts_mid_stream(diamond):
    prod, s, cons, rx = big_path(diamond)
    tx, side = side_traffic(diamond)
    data = make_message(random_bytes(8 * MB)).encode()
    big = start_big(s, data, 2 * MB)
    wait_for(lambda: streaming(diamond["D"]), what="the message streaming at D")
    small_ones_flow(tx, side, tag="beside")
    big.delivery.abort()
    prod._write()
    wait_for(lambda: rx.aborted == 1, what="the consumer's copy aborted")
    nothing_in_flight(diamond.values())
    small_ones_flow(s, rx, tag="after")          # the same link, the same consumer


def test_consumer_detaches_mid_stream(diamond):
    prod, s, cons, rx = big_path(diamond)
    tx, side = side_traffic(diamond)
    cons.paused = True                                   # its copy stops part-way, the path backs up
    big = s.send(make_message(random_bytes(8 * MB)))
    wait_for(lambda: all(streaming(diamond[n]) for n in "ABD"), what="the message streaming at A, B and D")
    small_ones_flow(tx, side, tag="beside")
    rx.close(wait=False)                                 # the detach is written; nothing more is read
    assert big.wait(20).state in (MODIFIED, RELEASED), big
    cons.paused = False
    rx2 = Client(diamond["D"].url).receiver("balanced/big", credit=5, credit_window=5)
    wait_address(diamond.values(), "balanced/big", ["D"])
    small_ones_flow(s, rx2, tag="after")
    nothing_in_flight(diamond.values())


@pytest.mark.parametrize("how", ["reset", "close"])
def test_producer_connection_dies_mid_stream(diamond, how):
    prod, s, cons, rx = big_path(diamond)
    tx, side = side_traffic(diamond)
    data = make_message(random_bytes(8 * MB)).encode()
    start_big(s, data, 3 * MB)
    wait_for(lambda: streaming(diamond["D"]), what="the message streaming at D")
    if how == "reset":
        prod.disconnect()
    else:
        prod.close()
    wait_for(lambda: rx.aborted == 1, what="the consumer's copy aborted")
    small_ones_flow(tx, side, tag="after")
    prod2 = Client(diamond["A"].url)
    s2 = prod2.sender("balanced/big")
    s2.wait_credit()
    small_ones_flow(s2, rx, tag="next producer")
    nothing_in_flight(diamond.values())


def test_next_hop_dies_mid_stream(diamond):
    prod, s, cons, rx = big_path(diamond)
    tx, side = side_traffic(diamond)
    cons.paused = True
    big = s.send(make_message(random_bytes(8 * MB)))
    wait_for(lambda: all(streaming(diamond[n]) for n in "ABD"), what="the message streaming at A, B and D")
    kill9(diamond["B"])
    assert big.wait(20).state in (MODIFIED, RELEASED), big
    cons.paused = False
    wait_for(lambda: rx.aborted == 1, what="the consumer's part-copy aborted")
    survivors = [diamond[n] for n in "ACD"]
    wait_until(lambda: mesh_view(diamond["A"]).next_hops.get("D") == "C", 10, "A routing to D through C")
    small_ones_flow(s, rx, tag="after")               # the same link, now through C
    small_ones_flow(tx, side, tag="side after")
    assert [r.body for r in rx.received] == [f"after {i}" for i in range(10)]
    nothing_in_flight(survivors)
