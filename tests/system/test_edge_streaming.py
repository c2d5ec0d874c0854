"""Streaming links on edge connections (issue 31 point e; router/adapter/streamlinks.py, docs/EDGE.md).

One interior INT.A and two edges EA1, EA2 (tests.support.edges.star). A large message from a client on
EA1 to a client on EA2 crosses both uplinks (EA1 -> INT.A and INT.A -> EA2) on streaming links, as between
interiors: it arrives byte for byte, no node's RSS grows by more than a fraction of it (issue 29: a node
never buffers a message whole), and request / reply traffic between the same two edges keeps going
while the large message is stuck mid-way behind a consumer that stopped reading.
"""

from __future__ import annotations

import time

import pytest

from tests.support.clients import ACCEPTED, Client, Tracker, make_message, random_bytes
from tests.support.edges import star
from tests.support.nodes import NodeSet
from tests.support.resources import RssSampler, rss_bytes
from tests.support.state import node_state, reading
from tests.support.waiting import close_all, pump, wait_for, wait_until

MB = 1024 * 1024
STREAM = "qd.router-stream"
BIG = 64 * MB
# a node may hold its stream windows of the message (1 MiB per consumer, 2 MiB per streaming session),
# its reads and Python's allocator slack; a node that buffered the message whole would grow by >= 64 MiB
MAX_GROWTH = 24 * MB
SLOW_READ = 4 * MB                 # bytes per second the consumer reads


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    nodes = NodeSet(tmp_path_factory.mktemp("edge-stream"))
    made = star(nodes.start)
    yield made
    close_all()
    failure = nodes.stop_all()
    if failure:
        pytest.fail(failure, pytrace=False)


def stream_links(node, peer: str) -> list[dict]:
    """The node's streaming links with `peer` (either direction)."""
    with reading(node) as m:
        rows = m.query_dicts("link", ["linkName", "linkDir", "peerNode"])
    return [r for r in rows if STREAM in (r["linkName"] or "") and r["peerNode"] == peer]


class PieceSender:
    """One message whose body (a data section) the producer writes in PIECE steps as its session takes
    them, as a streaming producer does (benchmarks/large_client.py); handed to Proton whole, a 64 MiB
    message costs the test's own Proton more than the nodes (it re-aligns the delivery's buffer each time
    it frames a part of it)."""

    PIECE = 256 * 1024

    def __init__(self, s, body: bytes) -> None:
        self.s = s
        self.raw = b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body
        self.offset = 0
        tag = "piece-sender-1"
        self.tracker = s.trackers[tag] = Tracker(s, tag, s.link.delivery(tag), presettled=False)

    def step(self) -> None:
        link = self.s.link
        while self.offset < len(self.raw) and link.session.outgoing_bytes < 2 * self.PIECE:
            end = min(self.offset + self.PIECE, len(self.raw))
            link.send(self.raw[self.offset:end])
            self.offset = end
            if end == len(self.raw):
                link.advance()
        self.s.client._write()


def nothing_held(mesh) -> None:
    for n in mesh.values():
        wait_until(lambda n=n: node_state(n).streams == 0 and node_state(n).in_flight == 0, 15,
                   f"node {n.node_id} holding nothing")


@pytest.mark.timeout(300)          # 64 MiB through a Python client and three nodes on a loaded machine
def test_a_large_message_streams_edge_to_edge_with_bounded_memory(mesh):
    """64 MB EA1 -> INT.A -> EA2, byte for byte, on streaming links both ways up and down, to a consumer
    that reads slower than the nodes could send (SLOW_READ bytes a second) with an unbounded
    session window (python-qpid-proton's): every node's RSS peak stays within MAX_GROWTH of what it was
    before."""
    rc = Client(mesh["EA2"].url)
    rx = rc.receiver("balanced/edge-big", credit=2)
    s = Client(mesh["EA1"].url).sender("balanced/edge-big")
    s.wait_credit(1, timeout=10)
    body = random_bytes(BIG)
    pids = {name: n.pid for name, n in mesh.items()}
    before = {name: rss_bytes(pid) for name, pid in pids.items()}
    sampler = RssSampler(pids, interval=0.05)
    big = PieceSender(s, body)
    t = big.tracker
    deadline = time.monotonic() + 240
    start, read0 = time.monotonic(), rc.bytes_in
    while not (t.settled and rx.received) and time.monotonic() < deadline:
        big.step()
        sampler.poll()
        rc.recv_budget = max(0, int((time.monotonic() - start) * SLOW_READ) - (rc.bytes_in - read0))
        pump(0.01)
    rc.recv_budget = None
    assert t.outcome == "ACCEPTED", t
    assert len(rx.received) == 1 and rx.received[0].raw == big.raw
    growth = {name: (max(v for _, v in sampler.samples[name]) - before[name]) / MB for name in pids}
    print("RSS growth (MiB) while 64 MiB crossed EA1 -> INT.A -> EA2: "
          + ", ".join(f"{k} {v:.1f}" for k, v in growth.items()))
    # the message went on a streaming link on each uplink, opened by the node that sent it
    up = stream_links(mesh["EA1"], "INT.A")
    down = stream_links(mesh["INT.A"], "EA2")
    assert up and {r["linkDir"] for r in up} == {"out"}, up
    assert down and {r["linkDir"] for r in down} == {"out"}, down
    nothing_held(mesh)
    assert all(g * MB < MAX_GROWTH for g in growth.values()), f"node RSS grew by {growth} MiB"


@pytest.mark.timeout(400)
def test_request_reply_between_edges_goes_on_beside_a_stuck_large_message(mesh):
    """A 64 MB message for a consumer on EA2 that stopped reading stays mid-way (streaming on both
    uplinks); meanwhile 30 requests EA1 -> EA2 and their replies EA2 -> EA1 (over the same two uplinks,
    both ways) are answered. Then the consumer reads again and gets the message intact."""
    cons = Client(mesh["EA2"].url, max_frame_size=16384)
    big_rx = cons.receiver("balanced/edge-stuck", credit=1)
    server = Client(mesh["EA2"].url)
    requests = server.receiver("balanced/edge-rpc", credit=50)
    replies_out = server.sender(None)
    caller = Client(mesh["EA1"].url)
    reply_rx = caller.receiver(dynamic=True, credit=50)
    big_client = Client(mesh["EA1"].url)
    big = big_client.sender("balanced/edge-stuck")
    big.wait_credit(1, timeout=10)
    calls = caller.sender("balanced/edge-rpc")
    calls.wait_credit(1, timeout=10)
    cons.paused = True
    stuck = PieceSender(big, random_bytes(BIG))
    big_t = stuck.tracker

    def streaming_into_ea2() -> bool:
        stuck.step()
        return node_state(mesh["EA2"]).streams == 1
    wait_for(streaming_into_ea2, what="the message streaming into EA2")
    wait_until(lambda: stuck.step() or node_state(mesh["EA2"]).streams == 1, 2, "still streaming")
    answered = 0
    times = []
    for i in range(30):
        start = time.monotonic()
        req = calls.send(make_message(f"request {i}", reply_to=reply_rx.address))
        got = requests.wait_messages(i + 1, timeout=15)[-1]
        replies_out.send(make_message(f"reply {i}", address=got.message.reply_to))
        reply_rx.wait_messages(i + 1, timeout=15)
        assert req.wait(15).state == ACCEPTED, req
        times.append(time.monotonic() - start)
        answered += 1
    print(f"30 calls beside the stuck 64 MiB message: max {max(times) * 1000:.1f} ms, "
          f"median {sorted(times)[15] * 1000:.1f} ms", [round(t * 1000) for t in times])
    assert [m.body for m in reply_rx.received] == [f"reply {i}" for i in range(30)]
    assert not big_t.settled and not big_rx.received, "the large message was not stuck after all"
    for name in ("EA1", "INT.A", "EA2"):
        assert node_state(mesh[name]).streams == 1, f"{name} not streaming the large message"
    cons.paused = False
    wait_until(lambda: stuck.step() or big_t.settled, 240, "the large message settled")
    assert big_t.state == ACCEPTED, big_t
    assert big_rx.wait_messages(1, timeout=30)[0].raw == stuck.raw
    nothing_held(mesh)
