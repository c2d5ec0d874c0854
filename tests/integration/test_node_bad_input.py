"""Bad input on one connection costs only that connection: the node closes it, everyone else carries on."""

from __future__ import annotations

import os

import pytest

from tests.support.clients import ACCEPTED, Client, make_message
from tests.support.raw_amqp import AMQP_HEADER, ATTACH, CLOSE, FLOW, TRANSFER, RawConn, encode_frame
from tests.support.resources import assert_not_spinning
from tests.support.waiting import wait_for

ADDRESS = "balanced/bad-input-pair"


class Pair:
    """A producer and a consumer that must keep working whatever the others do."""

    def __init__(self, node):
        self.node = node
        self.prod = Client(node.url)
        self.cons = Client(node.url)
        self.r = self.cons.receiver(ADDRESS, credit=50, credit_window=50)
        self.s = self.prod.sender(ADDRESS)
        self.s.wait_credit()
        self.n = 0
        self.check()

    def check(self, count: int = 3, idle_check: bool = True) -> None:
        """``count`` messages go through; then the node is idle (not busy-looping on a dead socket)."""
        trackers = []
        for _ in range(count):
            self.s.wait_credit()
            trackers.append(self.s.send(f"pair-{self.n}"))
            self.n += 1
        for t in trackers:
            t.wait()
            assert t.state == ACCEPTED, t
        good = [x for x in self.r.received if x.message is not None and str(x.body).startswith("pair-")]
        assert [x.body for x in good][-count:] == [f"pair-{i}" for i in range(self.n - count, self.n)]
        assert self.node.alive()
        if idle_check:
            assert_not_spinning(self.node.pid, 0.5)


@pytest.fixture
def pair(node):
    return Pair(node)


def test_garbage_bytes(node, pair):
    raw = RawConn(node.url)
    raw.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(200))
    raw.wait_eof()
    pair.check()


def test_random_bytes_after_header(node, pair):
    raw = RawConn(node.url)
    raw.send_bytes(AMQP_HEADER + os.urandom(300))
    raw.wait_eof()
    pair.check()


def test_malformed_frame_body(node, pair):
    raw = RawConn(node.url)
    raw.send_header()
    raw.send_bytes(encode_frame(b"\x00\x53\x10\xd0\xff\xff\xff\xff\x01"))   # open with a broken list
    raw.wait_eof()
    pair.check()


def test_malformed_frame_then_more_bytes(node, pair):
    """The peer keeps talking after its malformed frame: the node must close the connection, and
    must not spin on the unread input meanwhile."""
    raw = RawConn(node.url)
    raw.send_header()
    raw.send_bytes(encode_frame(b"\x00\x53\x10\xd0\xff\xff\xff\xff\x01"))
    raw.wait_header()                        # the node has read (and failed on) the frame by now
    try:
        raw.send_bytes(b"still talking " * 20)
    except OSError:
        pass                                 # already closed by the node: fine
    assert_not_spinning(node.pid, 1.0)
    raw.wait_eof()
    pair.check()


def test_frame_size_below_minimum(node, pair):
    raw = RawConn(node.url)
    raw.open()
    raw.send_bytes(b"\x00\x00\x00\x04\x02\x00\x00\x00")   # size 4 < 8: framing error
    raw.wait_eof()
    assert any(f.code == CLOSE for f in raw.frames) or raw.eof
    pair.check()


def test_frame_larger_than_max_frame_size(node, pair):
    raw = RawConn(node.url)
    opened = raw.open()
    max_frame = opened.field(2) or 2 ** 32 - 1
    if max_frame >= 2 ** 24:
        pytest.skip(f"node max-frame-size {max_frame} too large to exceed cheaply")
    raw.begin()
    raw.send_bytes(encode_frame(b"\x00\x53\x13\x45" + b"\x00" * max_frame))
    raw.wait_eof()
    pair.check()


def test_transfer_on_unattached_handle(node, pair):
    raw = RawConn(node.url)
    raw.open()
    raw.begin()
    raw.transfer(7, make_message("orphan", address=ADDRESS).encode())
    raw.wait_eof()
    pair.check()
    assert "orphan" not in pair.r.bodies


def test_frame_on_unknown_channel(node, pair):
    raw = RawConn(node.url)
    raw.open()
    raw.attach("no-session", 0, role_receiver=False, target=ADDRESS, channel=3, wait=False)
    raw.wait_eof()
    pair.check()


def test_disconnect_mid_transfer_raw(node, pair):
    """A producer sends the first frames of a multi-frame message and vanishes."""
    raw = RawConn(node.url)
    opened = raw.open(max_frame_size=16384)
    node_max = opened.field(2) or 16384
    chunk = min(4096, node_max - 64)
    raw.begin()
    reply = raw.attach("half-sender", 0, role_receiver=False, target=ADDRESS)
    assert reply.code == ATTACH
    raw.expect(FLOW, pred=lambda f: f.field(4) == reply.field(1) and (f.field(6) or 0) > 0, timeout=5)
    body = make_message(b"z" * 200_000, address=ADDRESS).encode()
    raw.transfer(0, body[:chunk], more=True)
    raw.transfer(0, body[chunk:2 * chunk], more=True, first=False)
    raw.close()
    pair.check()
    assert all(x.decode_error is None for x in pair.r.received), \
        "consumer got a truncated message from the vanished producer"
    pair.check()


@pytest.mark.parametrize("when", ["streaming", "all_written"])
@pytest.mark.parametrize("how", ["reset", "fin"])
def test_disconnect_mid_transfer_proton_client(node, pair, how, when):
    """A Proton producer's TCP connection ends (RST or FIN) while its 4 MB message is streaming to
    the pair's consumer ("streaming": the consumer has 256 KiB of it; "all_written": the producer
    has written the whole message to its socket).  The consumer's partial copy must be aborted, the
    consumer's link keeps working, the node does not spin."""
    c = Client(node.url)
    s = c.sender(ADDRESS)
    s.wait_credit()
    before = pair.cons.bytes_in
    s.send(make_message(os.urandom(4 * 1024 * 1024)))
    if when == "streaming":
        wait_for(lambda: pair.cons.bytes_in > before + 256 * 1024,
                 what="the large message streaming to the consumer")
    else:
        wait_for(lambda: s.link.queued == 0 and c.transport.pending() <= 0,
                 what="the whole large message written by the producer")
    if how == "reset":
        c.disconnect()
    else:
        c.abort()
    wait_for(lambda: pair.r.aborted == 1 or pair.r.received[-1].body != "pair-2",
             what=lambda: f"the consumer's partial copy aborted or completed "
             f"(aborted {pair.r.aborted}, consumer read {pair.cons.bytes_in - before} bytes)")
    assert all(x.decode_error is None for x in pair.r.received), "consumer got a truncated message"
    pair.check()


def test_transfer_without_credit(node, pair):
    """Sending on a link the node gave no credit is a protocol error for that connection only
    (or the delivery is refused); the node must not forward it."""
    raw = RawConn(node.url)
    raw.open()
    raw.begin()
    reply = raw.attach("no-credit", 0, role_receiver=False, target="balanced/nobody-listens")
    assert reply.code == ATTACH
    raw.transfer(0, make_message("uninvited").encode())
    # either the connection is closed or the delivery comes back with an outcome; never a crash
    try:
        raw.expect(0x15, timeout=2)           # DISPOSITION
    except AssertionError:
        pass
    pair.check()


def test_many_bad_connections_in_a_row(node, pair):
    for i in range(12):
        raw = RawConn(node.url)
        if i % 3 == 0:
            raw.send_bytes(os.urandom(64))
        elif i % 3 == 1:
            raw.send_bytes(AMQP_HEADER + b"\xff\xff\xff\xff" + os.urandom(60))   # absurd frame size
        else:
            raw.send_bytes(AMQP_HEADER + b"\x00\x00\x00\x04\x02\x00\x00\x00")  # size below 8
        raw.wait_eof()
    pair.check(5)
    assert not any(f.code == TRANSFER for f in raw.frames)
