"""Large messages that reach a node complete are streamed to a slow reader too (issue 29).

A large transfer usually arrives in pieces and is streamed (router/adapter/streams.py). One that waited
behind another on its producer's link arrives complete: it was read whole and given to Proton in one
piece, and every write of a few frames of it to a reader with a small window then rotated the whole
buffer in Proton-C (4 MB messages: single turns of the node took 12 ms). Above `WHOLE_LIMIT` it is now
streamed like any other: the node keeps at most 64 KiB of it in the consumer's delivery.

The receiver has a 64 KiB session window. Three messages of 2-3 MB are sent while it reads nothing, so
that the second and third are in the node whole behind the first. It reads the first and stops again:
the second must then be a stream in progress (before the change none was), small messages on another
address keep flowing beside it, and once the receiver reads again all three arrive byte for byte and in
order.
"""

from __future__ import annotations

import os

import pytest

from tests.support.clients import Client, make_message
from tests.support.meshes import build, wait_address
from tests.support.state import node_state
from tests.support.waiting import pump_for, wait_for, wait_until

MB = 1000 * 1000
# They fit the 8 MiB session window the node gives their producer; the first is larger than the 2 MiB
# window of a streaming link at the far end (router.adapter.streamlinks), so that through a hop it is still
# streaming at the ingress, not all with the egress already, when the other two have arrived there.
SIZES = [3 * MB, 2 * MB, 2 * MB]
WINDOW = 64 * 1024            # the receiver's session capacity: four 16 KiB frames in flight


@pytest.mark.parametrize("path", ["node", "hop"])
def test_complete_large_messages_to_a_slow_reader_are_streamed_and_arrive_intact(node_factory, path):
    names = ["A", "B"] if path == "hop" else ["A"]
    nodes = build(node_factory, names, [("B", "A", 1)] if path == "hop" else [])
    src, dst = nodes["A"], nodes[names[-1]]
    reader = Client(dst.url, incoming_capacity=WINDOW)
    rx = reader.receiver("balanced/whole", credit=3)
    small_rx = Client(dst.url).receiver("balanced/beside", credit=50)
    wait_address(nodes.values(), "balanced/whole", [names[-1]])
    wait_address(nodes.values(), "balanced/beside", [names[-1]])
    reader.paused = True
    bodies = [os.urandom(n) for n in SIZES]
    tx = Client(src.url).sender("balanced/whole")
    tx.wait_credit(3)
    trackers = [tx.send(make_message(b, id=i)) for i, b in enumerate(bodies)]
    wait_for(lambda: tx.queued == 0 and tx.client.transport.pending() == 0, 20, "all three written")
    pump_for(0.5)                            # the node reads them: the 2nd and 3rd complete behind the 1st
    reader.paused = False
    wait_until(lambda: len(rx.received) >= 1, 60, "the first message at the reader")
    reader.paused = True
    wait_for(lambda: sum(node_state(n).streams for n in nodes.values()) >= 1, 10,
             "the second message, complete in the node, streamed to the reader")
    small_tx = Client(src.url).sender("balanced/beside")
    small = [small_tx.send(make_message(f"small {i}")) for i in range(20)]
    assert [t.wait().outcome for t in small] == ["ACCEPTED"] * 20
    assert small_rx.wait_messages(20)[-1].body == "small 19"
    assert len(rx.received) == 1, "the reader read nothing more meanwhile"
    reader.paused = False
    wait_until(lambda: len(rx.received) >= 3, 120, "all three at the reader")
    assert [r.body == b for r, b in zip(rx.received, bodies, strict=True)] == [True] * 3
    assert [t.wait(30).outcome for t in trackers] == ["ACCEPTED"] * 3
    wait_for(lambda: all(node_state(n).in_flight == 0 and node_state(n).streams == 0 for n in nodes.values()),
             10, "nothing left in flight")
