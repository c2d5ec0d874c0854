"""A consumer that settles a large (streamed) message before it has fully arrived."""

import pytest
from proton import Delivery

from tests.support.clients import Client, make_message, random_bytes
from tests.support.state import node_state
from tests.support.waiting import wait_for

MB = 1024 * 1024
MAX_FRAME = 2**32 - 1        # AMQP's default max-frame-size: frames of any size


def _settle_early(rl, outcome: int) -> None:
    """Make receiver link `rl` settle each delivery with `outcome` on its first frame."""
    decided = set()

    def on_delivery(d: Delivery) -> None:
        cur = rl.link.current
        while cur is not None:
            if cur.aborted:
                rl.aborted += 1
                cur.settle()
                cur = rl.link.current
                continue
            if cur.pending > 0:
                rl.link.recv(cur.pending)
            if id(cur) not in decided and not cur.settled:
                decided.add(id(cur))
                cur.update(outcome)
                cur.settle()
                rl.received.append(cur)
            if cur.partial:
                break
            rl.link.advance()
            cur = rl.link.current

    rl._on_delivery = on_delivery


def test_early_reject_of_streamed_message_reaches_producer_and_link_recovers(node):
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/early", credit=10, auto_accept=False)
    _settle_early(r, Delivery.REJECTED)
    s = prod.sender("balanced/early")
    s.wait_credit()
    big = s.send(make_message(random_bytes(4 * MB)))
    assert big.wait().outcome == "REJECTED"
    assert not s.unsettled
    # the consumer link is usable again: a small message after the aborted big one
    r2_cons = Client(node.url)
    r2 = r2_cons.receiver("balanced/early-after", credit=10)
    s2 = prod.sender("balanced/early-after")
    s2.wait_credit()
    assert s2.send(make_message("small")).wait().outcome == "ACCEPTED"
    assert r2.bodies == ["small"]
    small = s.send(make_message("next"))
    assert small.wait().outcome == "REJECTED"       # same early-settling consumer, not stuck
    wait_for(lambda: len(r.received) == 2, what="second delivery at the early-settling consumer")


def _send_settled_late(s, data: bytes, first: int) -> None:
    """Send `data` as one delivery whose first `first` bytes go out unsettled and the rest with it
    settled (python-qpid-proton's Container settles an at-most-once delivery after its last frame)."""
    d = s.link.delivery(f"late-{len(data)}")
    s.link.stream(data[:first])
    s.client._write()
    s.link.stream(data[first:])
    s.link.advance()
    d.settle()
    s.client._write()


@pytest.mark.parametrize("settled", ["first-frame", "last-frame"])
def test_presettled_burst_closed_behind_a_paused_stream_is_still_delivered(node, settled):
    """A pre-settled sender writes a 6 MB message and ten small ones, then closes its connection while
    the node holds the big one paused for a consumer that stopped reading: everything it wrote has
    arrived (within the node's session window) and still reaches the consumer once it reads again.
    Before the fix, the close aborted the stream and dropped the ten transfers behind it."""
    cons = Client(node.url)
    r = cons.receiver("balanced/burst-close", credit=20)
    prod = Client(node.url)
    s = prod.sender("balanced/burst-close")
    s.wait_credit()
    cons.paused = True                              # the consumer's node-side session backs up
    big = random_bytes(6 * MB)
    message = make_message(big).encode()
    if settled == "first-frame":
        s.send(message, settled=True)
    else:
        _send_settled_late(s, message, 64 * 1024)
    for i in range(10):
        s.send(make_message(f"small {i}"), settled=True)
    wait_for(lambda: node_state(node).streams == 1, what="the big message streaming, paused")
    wait_for(lambda: not prod.transport.pending() and not prod.session.outgoing_bytes,
             what="the sender's output written")
    prod.close()
    cons.paused = False
    got = r.wait_messages(11, timeout=30)
    assert [m.body for m in got[1:]] == [f"small {i}" for i in range(10)]
    assert got[0].body == big and not r.aborted
    wait_for(lambda: node_state(node).streams == 0 and node_state(node).in_flight == 0,
             what="nothing left in flight")


@pytest.mark.parametrize("path", ["node", "hop"])
def test_a_consumer_that_stops_reading_holds_a_streaming_producer_back(node_factory, path):
    """A 64 MB message for a consumer that granted credit, then stopped reading (with no frame size
    limit, as rhea's default, and an unbounded session window, as python-qpid-proton's): the node keeps
    at most its stream window of the message (1 MiB per consumer with its transport's output, plus its
    session window from the producer), the producer holds the rest, and the node's memory does not grow
    by the message. (That it arrives intact when read is benchmarks/large_bench.py rss, with 1 GB.)"""
    from tests.support.meshes import build, wait_address
    from tests.support.resources import rss_bytes
    from tests.support.waiting import pump_for, wait_until

    if path == "node":
        nodes = {"A": node_factory("A")}
        into, out = nodes["A"], nodes["A"]
    else:
        nodes = build(node_factory, ["A", "B"], [("B", "A", 1)])
        into, out = nodes["B"], nodes["A"]
    cons = Client(out.url, max_frame_size=MAX_FRAME)
    r = cons.receiver("balanced/held-back", credit=1)
    if path == "hop":
        wait_address(nodes.values(), "balanced/held-back", ["A"])
    prod = Client(into.url)
    s = prod.sender("balanced/held-back")
    s.wait_credit()
    before = {n.node_id: rss_bytes(n.pid) for n in nodes.values()}
    cons.paused = True
    s.send(make_message(random_bytes(64 * MB)))
    wait_for(lambda: node_state(out).streams == 1, what="the message streaming")
    pump_for(3)
    held_by_producer = prod.session.outgoing_bytes + prod.transport.pending()
    growth = {n.node_id: (rss_bytes(n.pid) - before[n.node_id]) / MB for n in nodes.values()}
    assert all(g < 24 for g in growth.values()), f"node RSS grew by {growth} MiB"
    assert held_by_producer > 32 * MB, f"the producer could hand over all but {held_by_producer} bytes"
    prod.disconnect()
    cons.paused = False
    wait_until(lambda: r.aborted == 1, 10, "the consumer's copy aborted")
    for n in nodes.values():
        wait_until(lambda n=n: node_state(n).streams == 0 and node_state(n).in_flight == 0, 10,
                   f"node {n.node_id} holding nothing")
