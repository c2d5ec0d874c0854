"""The node-wide memory budget (issue 33, point 2): slow consumers hold their producers back through
credit, the node's memory stays bounded, nothing is lost, and other addresses keep flowing.

One node with a 32 MiB budget (``node.memory_limit``). Eight consumers grant plenty of credit and then
stop reading their sockets (a stalled client: its TCP window closes and what the node sends it waits in
the node). Eight producers send 16 KiB pre-settled messages to them as fast as their credit allows, 16 MiB
each: 128 MiB in all, four times the budget. The node must slow them (no credit: their messages wait on
the producer's side), keep its RSS within the budget plus 100 MB of its RSS at the start, answer a canary
on another address meanwhile, and, once the consumers read again, deliver every message exactly once,
in order.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.clients import Client, make_message
from tests.support.resources import rss_bytes
from tests.support.state import reading
from tests.support.waiting import pump_for, wait_until

MiB = 1024 * 1024
LIMIT = 32 * MiB
SLOW = 8
BODY = 16 * 1024 - 200                # one transfer frame each (max-frame-size 16 KiB)
PER_PRODUCER = 16 * MiB // (16 * 1024)
RSS_MARGIN = 100 * 1000 * 1000        # the bound: RSS under the budget + 100 MB


def _node_figures(node) -> dict:
    with reading(node) as m:
        return m.query_dicts("node", ["bufferedBytes", "bufferedPeak", "heldProducers", "creditHolds",
                                      "memoryLimit", "droppedPresettledDeliveries"])[0]


@pytest.fixture
def budget_node(node_factory):
    return node_factory("A", extra={"node": {"memory_limit": LIMIT}})


def _stalled_consumer(url: str, address: str):
    c = Client(url)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    r = c.receiver(address, credit=PER_PRODUCER + 10)
    c.paused = True                    # reads nothing more: its window closes, the node buffers
    return c, r


def test_slow_consumers_hold_producers_within_the_budget(budget_node):
    node = budget_node
    rss0 = rss_bytes(node.proc.pid)
    consumers = [_stalled_consumer(node.url, f"closest/slow/{i}") for i in range(SLOW)]
    producers = []
    for i in range(SLOW):
        p = Client(node.url)
        producers.append((p, p.sender(f"closest/slow/{i}")))
    canary_c = Client(node.url)
    canary_r = canary_c.receiver("closest/canary", credit=100)
    canary_p = Client(node.url).sender("closest/canary")

    template = bytearray(make_message(b"x" * BODY + bytes(4)).encode())

    def message(seq: int) -> bytes:
        template[-4:] = seq.to_bytes(4, "big")     # the body's last bytes, the message's last too
        return bytes(template)

    queued = [0] * SLOW                # messages handed to each producer's link (sent or waiting)
    peak_rss = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for i, (_p, s) in enumerate(producers):
            # use the link's credit and queue 4 more (Proton counts queued deliveries against credit)
            while queued[i] < PER_PRODUCER and s.link.credit > -4:
                s.send(message(queued[i]), settled=True)
                queued[i] += 1
        pump_for(0.01)
        peak_rss = max(peak_rss, rss_bytes(node.proc.pid))
        held = sum(s.queued for _p, s in producers)
        if all(q == PER_PRODUCER for q in queued) or held >= SLOW * 2:
            pump_for(1.0)              # give them time to be let go, if the node were to let them go
            if all(s.link.credit <= 0 for _p, s in producers):
                break
    figures = _node_figures(node)
    sent_by_now = sum(queued) - sum(s.queued for _p, s in producers)
    assert sum(queued) < SLOW * PER_PRODUCER or any(s.queued for _p, s in producers), \
        "every message went into the node: the consumers were not slow enough to test anything"
    # (Proton counts a sender's queued deliveries against its credit: <= 0 is "no credit left"; a producer
    # may just have been let go for a while: the kernel grows a stalled socket's send buffer now and then)
    assert all(s.link.credit <= 0 for _p, s in producers) and sum(s.queued for _p, s in producers), (
        f"producers of stalled consumers still have credit: {[s.link.credit for _p, s in producers]}, "
        f"queued {queued}, waiting {[s.queued for _p, s in producers]}, node {figures}")
    assert figures["heldProducers"] >= SLOW // 2 and figures["creditHolds"] > 0, figures
    assert figures["bufferedPeak"] <= LIMIT + SLOW * 250 * 16 * 1024, figures
    peak_rss = max(peak_rss, rss_bytes(node.proc.pid))
    assert peak_rss < rss0 + LIMIT + RSS_MARGIN, (
        f"RSS {peak_rss / MiB:.0f} MiB (started at {rss0 / MiB:.0f} MiB, budget {LIMIT / MiB:.0f} MiB)")
    assert sent_by_now * (BODY + 4) > LIMIT // 2, "too little reached the node to reach the budget"

    # another address keeps flowing meanwhile
    t0 = time.monotonic()
    assert canary_p.link.credit > 0, f"canary credit {canary_p.link.credit}, node {_node_figures(node)}"
    canary_p.send(make_message("ping"))
    canary_r.wait_messages(1, timeout=5)
    assert time.monotonic() - t0 < 2.0

    # the consumers read again: every message arrives, once, in order; the producers finish
    for c, _r in consumers:
        c.paused = False

    def drained() -> bool:
        for i, (_p, s) in enumerate(producers):
            while queued[i] < PER_PRODUCER and s.link.credit > -4:
                s.send(message(queued[i]), settled=True)
                queued[i] += 1
        return all(len(r.received) >= PER_PRODUCER for _c, r in consumers)

    wait_until(drained, 60, "every message at its consumer")
    for _c, r in consumers:
        seqs = [int.from_bytes(m.raw[-4:], "big") for m in r.received]
        assert seqs == list(range(PER_PRODUCER)), "lost, duplicated or reordered"
    assert _node_figures(node)["droppedPresettledDeliveries"] == 0


STREAMS = 4
STREAM_SIZE = 12 * MiB
STREAM_LIMIT = 16 * MiB


def test_streamed_messages_paused_for_stalled_consumers_count_in_the_budget(node_factory):
    """Large messages are streamed frame by frame and pause on a consumer that does not read: what waits
    then (in the consumer's session and output, and the rest of the message in the producer's session,
    up to its 8 MiB window) counts in the budget. Four of them put a node over its 16 MiB: a new producer
    for one of those consumers gets no credit, while a canary address keeps flowing; once the consumers
    read again every message arrives whole and the new producer gets its credit."""
    node = node_factory("A", extra={"node": {"memory_limit": STREAM_LIMIT}})
    consumers = [_stalled_consumer(node.url, f"closest/big/{i}") for i in range(STREAMS)]
    bodies = [bytes([65 + i]) * STREAM_SIZE for i in range(STREAMS)]
    senders = [Client(node.url).sender(f"closest/big/{i}") for i in range(STREAMS)]
    trackers = [s.send(make_message(bodies[i])) for i, s in enumerate(senders)]
    wait_until(lambda: _node_figures(node)["bufferedBytes"] >= STREAM_LIMIT, 20,
               lambda: f"the paused streams over the budget: {_node_figures(node)}")
    assert not any(t.settled for t in trackers), "a stalled consumer cannot have settled a whole message"
    another = Client(node.url).sender("closest/big/0")
    pump_for(1.0)
    assert another.link.credit == 0, f"a producer of a stalled consumer got credit: {_node_figures(node)}"
    canary_r = Client(node.url).receiver("closest/canary", credit=10)
    canary_p = Client(node.url).sender("closest/canary")
    canary_p.send(make_message("ping"))
    canary_r.wait_messages(1, timeout=5)
    for c, _r in consumers:
        c.paused = False
    wait_until(lambda: all(t.settled for t in trackers), 60, "every streamed message settled")
    for i, (_c, r) in enumerate(consumers):
        assert len(r.received) == 1 and r.received[0].body == bodies[i]
    assert [t.outcome for t in trackers] == ["ACCEPTED"] * STREAMS
    another.wait_credit(1)
