"""The window of a peer's stream (issue 29 point 3; router/adapter/streamlinks.py `size_window`).

A node grants a peer's streaming link `node.stream_window` bytes of session window while the peer's data
link is quiet, and `node.stream_window_shared` while messages cross on it too: small messages then wait
behind less of the stream on the one TCP connection. Seen on the wire: the nodes run with Proton's frame
trace (PN_TRACE_FRM) and the test reads the incoming-window of every flow B sends on A's streaming link's
session, for a stream alone and for one with small messages crossing beside it.
"""

from __future__ import annotations

import re

from tests.support.clients import Client, make_message, random_bytes
from tests.support.meshes import build, wait_address, wait_converged
from tests.support.state import node_state

MB = 1024 * 1024
FRAME = 16384
# "[0x28e96f70]: AMQP:FRAME:1 -> @flow(19) [next-incoming-id=0x21c, incoming-window=0x10, ...": a flow
# the node sent, on which channel
FLOW = re.compile(r"AMQP:FRAME:(\d+) -> @flow\(19\) \[[^\]]*?incoming-window=(0x[0-9a-f]+|\d+)")


def stream_windows(node) -> list[int]:
    """Every incoming-window `node` advertised on a session other than channel 0: the data and control
    links' session is channel 0 (and every test client has one session), so these are streaming links'."""
    text = node.stderr_path.read_text(errors="replace")
    return [int(m.group(2), 0) for m in FLOW.finditer(text) if m.group(1) != "0"]


def test_a_peers_stream_gets_the_shared_window_while_its_data_link_carries_messages(node_factory,
                                                                                    monkeypatch):
    monkeypatch.setenv("PN_TRACE_FRM", "1")         # for the nodes: the test's own clients are not traced
    nodes = build(node_factory, ["A", "B"], [("B", "A", 1)], wait=False,
                  sections={"B": {"node": {"stream_window_shared": 4 * FRAME}}})
    monkeypatch.delenv("PN_TRACE_FRM")
    wait_converged(nodes.values())
    a, b = nodes["A"], nodes["B"]
    big_rx = Client(b.url).receiver("balanced/big", credit=5, credit_window=5)
    small_rx = Client(b.url).receiver("balanced/small", credit=100, credit_window=100)
    wait_address(nodes.values(), "balanced/big", ["B"])
    wait_address(nodes.values(), "balanced/small", ["B"])
    big_client, small_client = Client(a.url), Client(a.url)   # one connection's output is in order
    big, small = big_client.sender("balanced/big"), small_client.sender("balanced/small")
    big.wait_credit()
    small.wait_credit()
    bodies = [random_bytes(8 * MB), random_bytes(8 * MB)]

    # alone: the default window, 256 KiB = 16 frames (less only while B has not yet read what came)
    assert big.send(make_message(bodies[0])).wait(60).outcome == "ACCEPTED"
    alone = stream_windows(b)
    assert alone and max(alone) == 16, alone

    # beside small messages, sent one after the other from another connection (every wait pumps every
    # client) from before the stream starts until it is in. The window comes down as A uses what it was
    # granted (B re-grants less: taken back at once, a transfer A had already sent would exceed it and
    # Proton would close the connection; this test's sender is too slow to show that, rhea's in
    # test_large_messages.py's repro showed it) to 4 frames at most, and stays there
    before = len(stream_windows(b))          # A holds the 16 frames B granted at the end of the first
    assert small.send(make_message("small 0")).wait(30).outcome == "ACCEPTED"
    tracker = big.send(make_message(bodies[1]))
    smalls = 1
    while not tracker.done:
        assert small.send(make_message(f"small {smalls}")).wait(30).outcome == "ACCEPTED"
        smalls += 1
    assert tracker.wait(60).outcome == "ACCEPTED"
    beside = stream_windows(b)[before:]
    down = next((i for i, w in enumerate(beside) if w <= 4), None)
    assert down is not None and down <= 20, beside        # 16 frames granted: used within 20 flows
    assert len(beside) - down >= 10 and max(beside[down:]) <= 4, beside
    for node in (a, b):
        log = node.stderr_path.read_text(errors="replace")
        assert "window-violation" not in log and not re.search(r"inter-router connection to \S+ lost", log)

    assert [r.body for r in big_rx.wait_messages(2, timeout=30)] == bodies
    assert len(small_rx.wait_messages(smalls, timeout=30)) == smalls
    for node in (a, b):
        assert node_state(node).in_flight == 0
