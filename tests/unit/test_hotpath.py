"""router.adapter.hotpath: the grouped Proton calls of the forwarding hot path, on real Proton objects (two
connections joined in memory, no sockets), checked against what the single Proton calls they replace
report."""

from __future__ import annotations

import pytest
from cproton_ffi import ffi, lib

from router.adapter import hotpath
from router.adapter.hotpath_build import build, source_hash

ACCEPTED, REJECTED, RELEASED = lib.PN_ACCEPTED, lib.PN_REJECTED, lib.PN_RELEASED


class Pair:
    """A sending and a receiving connection whose transports are joined in memory; one collector."""

    def __init__(self) -> None:
        self.coll = lib.pn_collector()
        self.conns, self.transports = [], []
        for server in (False, True):
            c, t = lib.pn_connection(), lib.pn_transport()
            if server:
                lib.pn_transport_set_server(t)
            lib.pn_transport_bind(t, c)
            lib.pn_connection_collect(c, self.coll)
            lib.pn_connection_open(c)
            self.conns.append(c)
            self.transports.append(t)
        s = lib.pn_session(self.conns[0])
        lib.pn_session_open(s)
        self.sender = lib.pn_sender(s, b"out")
        lib.pn_link_open(self.sender)
        self.pump()
        rs = lib.pn_session_head(self.conns[1], 0)
        lib.pn_session_open(rs)
        self.receiver = lib.pn_link_head(self.conns[1], 0)
        lib.pn_link_open(self.receiver)
        lib.pn_link_flow(self.receiver, 100)
        self.pump()
        self.buf = ffi.new("char[]", 1024)
        self.reader = hotpath.reader(self.buf, 1024)

    def take(self, d: object, cap: int = 1024) -> int:
        """hotpath.take of `d` into the buffer, seen as `cap` bytes long."""
        hotpath.set_buffer(self.reader, self.buf, cap)
        return hotpath.take(d, self.receiver, self.reader)

    def pump(self) -> None:
        """Move bytes both ways until neither transport has anything to write."""
        io = ffi.new("char[]", 65536)
        moved = True
        while moved:
            moved = False
            for src, dst in ((0, 1), (1, 0)):
                t_out, t_in = self.transports[src], self.transports[dst]
                n = lib.pn_transport_pending(t_out)
                room = lib.pn_transport_capacity(t_in)     # 1 KiB at first (scripts/build_proton.py)
                if n > 0 and room > 0:
                    n = min(n, 65536, room)
                    lib.pn_transport_peek(t_out, io, n)
                    lib.pn_transport_pop(t_out, n)
                    lib.pn_transport_push(t_in, io, n)
                    moved = True

    def send(self, data: bytes, settle: bool = False, complete: bool = True) -> object:
        d = hotpath.send(self.sender, data, len(data)) if complete else None
        if not complete:
            hotpath.TAG_COUNTER[0] += 1
            d = lib.pn_delivery(self.sender, hotpath.TAG)
            lib.pn_link_send(self.sender, data, len(data))
        if settle:
            lib.pn_delivery_settle(d)
        self.pump()
        return d

    def events(self) -> list[tuple[int, object, object, object]]:
        """Every event next_event gives, as (type, event, context, link)."""
        out = hotpath.ffi.new("void *[3]")
        seen = []
        t = hotpath.next_event(self.coll, 0, out)
        while t:
            delivery = t == lib.PN_DELIVERY or t > hotpath.SETTLED
            ctx = out[1] if delivery or t == lib.PN_LINK_FLOW else None
            link = out[2] if delivery else None
            seen.append((t, out[0], ctx, link))
            t = hotpath.next_event(self.coll, 1, out)
        return seen

    def arrived(self) -> object:
        self.events()
        d = lib.pn_link_current(self.receiver)
        assert d != ffi.NULL
        return d


def test_next_event_skips_transport_events_and_gives_the_delivery_and_its_link() -> None:
    pair = Pair()
    pair.events()
    pair.send(b"hello")
    seen = pair.events()
    assert seen and all(t != lib.PN_TRANSPORT for t, *_ in seen)
    deliveries = [(ctx, link) for t, _, ctx, link in seen if t == lib.PN_DELIVERY]
    assert len(deliveries) == 1
    d, link = deliveries[0]
    assert link == pair.receiver and d == lib.pn_link_current(pair.receiver)
    assert lib.pn_delivery_link(d) == link          # a void * from hotpath is Proton's pointer
    assert {pair.receiver: "rec"}.get(link) == "rec"
    flows = [ctx for t, _, ctx, _ in seen if t == lib.PN_LINK_FLOW]
    assert all(ctx in (pair.sender, pair.receiver) for ctx in flows)
    assert pair.events() == []                      # everything was popped


def test_raw_collector_does_hold_transport_events_next_event_skips() -> None:
    pair = Pair()
    types = set()
    ev = lib.pn_collector_peek(pair.coll)
    while ev:
        types.add(lib.pn_event_type(ev))
        lib.pn_collector_pop(pair.coll)
        ev = lib.pn_collector_peek(pair.coll)
    assert lib.PN_TRANSPORT in types                # so the skip above is tested on real input


def test_take_reads_a_complete_transfer_and_advances() -> None:
    pair = Pair()
    pair.send(b"hello")
    d = pair.arrived()
    r = pair.take(d)
    assert r == (5 << 1) | 0
    assert ffi.buffer(pair.buf, 5)[:] == b"hello"
    assert lib.pn_link_current(pair.receiver) != d   # advanced past it
    pair.send(b"settled!", settle=True)
    d = pair.arrived()
    assert pair.take(d) == (8 << 1) | 1


def test_take_leaves_what_it_does_not_read() -> None:
    pair = Pair()
    pair.send(b"x" * 100)
    d = pair.arrived()
    assert pair.take(d, 99) == hotpath.TOO_LARGE
    assert lib.pn_delivery_pending(d) == 100 and lib.pn_link_current(pair.receiver) == d
    assert pair.take(d, 100) == 100 << 1

    pair.send(b"part", complete=False)               # still arriving
    d = pair.arrived()
    assert pair.take(d) == hotpath.PARTIAL
    assert lib.pn_delivery_pending(d) == 4 and lib.pn_link_current(pair.receiver) == d
    lib.pn_delivery_abort(lib.pn_link_current(pair.sender))
    pair.pump()
    pair.events()
    assert lib.pn_delivery_aborted(d)
    assert pair.take(d) == hotpath.ABORTED


def test_take_reports_an_empty_transfer() -> None:
    pair = Pair()
    pair.send(b"")
    d = pair.arrived()
    assert pair.take(d) == hotpath.EMPTY
    assert lib.pn_link_current(pair.receiver) != d


def test_take_on_a_delivery_that_is_not_readable() -> None:
    pair = Pair()
    od = pair.send(b"hello")
    assert hotpath.take(od, pair.sender, pair.reader) == hotpath.NOT_READABLE


def test_send_draws_unique_tags_from_the_shared_counter() -> None:
    pair = Pair()
    before = hotpath.TAG_COUNTER[0]
    sent = [pair.send(b"m%d" % i) for i in range(3)]
    assert hotpath.TAG_COUNTER[0] == before + 3
    tags = {ffi.buffer(lib.pn_delivery_tag(d).start, 8)[:] for d in sent}
    assert len(tags) == 3
    pair.events()
    got = []
    d = lib.pn_link_current(pair.receiver)
    while d != ffi.NULL:
        got.append(pair.take(d) >> 1)
        d = lib.pn_link_current(pair.receiver)
    assert got == [2, 2, 2]


@pytest.mark.parametrize("state", [ACCEPTED, REJECTED, RELEASED, lib.PN_MODIFIED])
def test_outcome_gives_a_terminal_state(state: int) -> None:
    pair = Pair()
    od = pair.send(b"hello")
    d = pair.arrived()
    assert hotpath.outcome(od) == 0                 # nothing yet
    lib.pn_delivery_update(d, state)
    pair.pump()
    pair.events()
    assert hotpath.outcome(od) == state == lib.pn_delivery_remote_state(od)


def test_outcome_of_a_delivery_settled_without_one_is_accepted() -> None:
    pair = Pair()
    od = pair.send(b"hello")
    d = pair.arrived()
    lib.pn_delivery_settle(d)
    pair.pump()
    pair.events()
    assert lib.pn_delivery_remote_state(od) == 0 and lib.pn_delivery_settled(od)
    assert hotpath.outcome(od) == ACCEPTED


def test_settle_pair_gives_the_outcome_and_settles_both() -> None:
    pair = Pair()
    od = pair.send(b"hello")
    d = pair.arrived()
    hotpath.settle_pair(d, REJECTED, hotpath.NULL)    # a receiver's delivery, nothing else
    pair.pump()
    pair.events()
    assert lib.pn_delivery_remote_state(od) == REJECTED and lib.pn_delivery_settled(od)
    od2 = pair.send(b"again")
    d2 = pair.arrived()
    pair.take(d2)
    sender, receiver = lib.pn_link_unsettled(pair.sender), lib.pn_link_unsettled(pair.receiver)
    hotpath.settle_pair(d2, 0, od2)                  # no outcome given: both settled as they are
    assert lib.pn_link_unsettled(pair.sender) == sender - 1
    assert lib.pn_link_unsettled(pair.receiver) == receiver - 1


def test_a_stale_build_is_refused(tmp_path) -> None:
    source = tmp_path / "hotpath.c"
    text = hotpath.Path(hotpath.__file__).with_name("hotpath.c").read_text()
    source.write_text(text)
    hotpath._check(source)                          # the build matches the tree's source
    source.write_text(text + "\n/* changed */\n")
    assert source_hash(source.read_text()) != source_hash(text)
    with pytest.raises(ImportError, match="run `make`"):
        hotpath._check(source)


def test_the_build_is_up_to_date_and_not_rebuilt() -> None:
    out = build()
    stamp = out.stat().st_mtime_ns
    assert build() == out and out.stat().st_mtime_ns == stamp


@pytest.mark.parametrize(("at", "insert"), [
    (0, b"<ins>"),             # a section inserted first (an ingress, message without header)
    (3, b"<ins>"),             # inserted after the header
    (10, b"<ins>"),            # at the very end
    (30, b"!"),                # a point past the end is clamped to it
    (4, b""),                  # nothing inserted
])
def test_send_inserted_sends_the_last_transfer_with_the_insert(at: int, insert: bytes) -> None:
    pair = Pair()
    data = b"0123456789"
    pair.send(data)
    assert pair.take(pair.arrived()) == len(data) << 1         # the reader's last transfer
    hotpath.send_inserted(pair.sender, pair.reader, at, insert, len(insert))
    pair.pump()
    r = pair.take(pair.arrived())
    expected = data[:at] + insert + data[at:]
    assert r >> 1 == len(expected)
    assert ffi.buffer(pair.buf, r >> 1)[:] == expected


def _messages() -> list[bytes]:
    """Encoded messages with every form of message-id, user-id, `to` and the sections before them."""
    import uuid

    from proton import Message

    out = []
    ids = [None, 7, 2**40, "an-id", uuid.UUID(int=5), b"\x01\x02", "x" * 300]
    users = [None, b"", b"alice", b"u" * 300]
    tos = [None, "", "amqp:/_topo/0/A/temp.1", "q" * 300, "é/ü"]
    for i, mid in enumerate(ids):
        for j, user in enumerate(users):
            for k, to in enumerate(tos):
                m = Message(body=b"x" * (i + j + k), id=mid, address=to, correlation_id="c")
                if user is not None:
                    m.user_id = user
                if (i + j + k) % 2:
                    m.durable, m.priority, m.ttl = True, 7, 1.5
                if (i + j + k) % 3 == 0:
                    m.annotations = {"x-opt-a": "b" * (40 * k)}
                if (i + j + k) % 4 == 1:
                    m.instructions = {"x-di": 1}
                out.append(bytes(m.encode()))
    return out


def test_find_to_agrees_with_scan_message_and_finds_the_usual_forms() -> None:
    from router.amqp.codec import scan_message

    found = 0
    for data in _messages():
        to = scan_message(data, complete=True).to
        span = hotpath.find_to(data, len(data))
        if span >= 0:
            at, n = span >> 32, span & 0xFFFFFFFF
            assert data[at:at + n].decode() == to
            found += 1
        else:
            assert not to                               # every message with a `to` here is a usual form
    assert found == 7 * 4 * 3


def test_find_to_never_reads_past_the_data_and_agrees_on_mutated_messages() -> None:
    import random

    from router.amqp.codec import MalformedError, scan_message
    from router.amqp.sections import client_sections

    rng = random.Random(21)
    checked = 0
    for data in _messages()[::3]:
        for _ in range(60):
            b = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            cut = bytes(b[:rng.randint(0, len(b))]) if rng.random() < 0.3 else bytes(b)
            span = hotpath.find_to(cut, len(cut))
            if span < 0:
                continue
            at, n = span >> 32, span & 0xFFFFFFFF
            assert at + n <= len(cut)
            try:                       # the node checks a client's sections before it looks for `to`
                client_sections(cut, len(cut))
                info = scan_message(cut, complete=True)
            except MalformedError:
                continue
            try:
                assert cut[at:at + n].decode() == info.to
            except UnicodeDecodeError:
                pass                   # the node falls back to scan_message, which rejects it
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("state", [ACCEPTED, REJECTED, RELEASED, lib.PN_MODIFIED, 0])
def test_next_event_reports_a_consumers_outcome_as_settled(state: int) -> None:
    pair = Pair()
    od = pair.send(b"hello")
    d = pair.arrived()
    if state:
        lib.pn_delivery_update(d, state)
    else:
        lib.pn_delivery_settle(d)                   # settled without an outcome: ACCEPTED
    pair.pump()
    seen = pair.events()
    settled = [(t - hotpath.SETTLED, ctx, link) for t, _, ctx, link in seen if t > hotpath.SETTLED]
    assert settled == [(state or ACCEPTED, od, pair.sender)]
    assert not [t for t, _, ctx, _ in seen if t == lib.PN_DELIVERY and ctx == od]


def test_next_event_leaves_a_non_terminal_update_as_a_delivery_event() -> None:
    pair = Pair()
    od = pair.send(b"hello")
    d = pair.arrived()
    lib.pn_delivery_update(d, lib.PN_RECEIVED)
    pair.pump()
    seen = pair.events()
    assert not [t for t, *_ in seen if t > hotpath.SETTLED]
    assert [ctx for t, _, ctx, _ in seen if t == lib.PN_DELIVERY] == [od]


def test_take_peer_says_whether_the_transfer_starts_with_the_stream() -> None:
    pair = Pair()
    for data, prefix, same in [(b"\x00Sr-stream-1:body", b"\x00Sr-stream-1:", 1),
                               (b"\x00Sr-stream-2:body", b"\x00Sr-stream-1:", 0),
                               (b"short", b"shorter", 0),                # the prefix is longer
                               (b"anything", b"", 0)]:                  # no stream: never the same
        assert hotpath.set_stream(pair.reader, prefix, len(prefix), b"P", 1, b"C", 1) == 0
        pair.send(data)
        r = hotpath.take_peer(pair.arrived(), pair.receiver, pair.reader)
        assert r == len(data) << 2 | same << 1
        assert ffi.buffer(pair.buf, len(data))[:] == data
    hotpath.set_stream(pair.reader, b"x", 1, b"", 0, b"", 0)
    pair.send(b"x" * 50, settle=True)
    d = pair.arrived()
    hotpath.set_buffer(pair.reader, pair.buf, 10)
    assert hotpath.take_peer(d, pair.receiver, pair.reader) == hotpath.TOO_LARGE
    hotpath.set_buffer(pair.reader, pair.buf, 1024)
    assert hotpath.take_peer(d, pair.receiver, pair.reader) == 50 << 2 | 2 | 1


@pytest.mark.parametrize("to_client", [0, 1])
def test_send_stream_sends_the_last_transfer_with_its_start_rewritten(to_client: int) -> None:
    pair = Pair()
    source = ffi.new("char[]", b"<start>")          # copied by set_stream: changed below, not used
    heads = [b"<toward a peer>", b""]               # a client's head may be empty (no annotations left)
    assert hotpath.set_stream(pair.reader, source, 7, heads[0], len(heads[0]), heads[1], len(heads[1])) == 0
    ffi.memmove(source, b"<other>", 7)
    for body in (b"body one", b"", b"a longer body, two"):
        pair.send(b"<start>" + body)
        assert pair.take(pair.arrived()) >> 1 == 7 + len(body)
        hotpath.send_stream(pair.sender, pair.reader, to_client)
        pair.pump()
        r = pair.take(pair.arrived())
        expected = heads[to_client] + body
        if not expected:                            # nothing at all: an empty transfer
            assert r == hotpath.EMPTY
            continue
        assert ffi.buffer(pair.buf, r >> 1)[:] == expected


def test_a_longer_stream_replaces_a_shorter_one() -> None:
    pair = Pair()
    hotpath.set_stream(pair.reader, b"ab", 2, b"P", 1, b"C", 1)
    long_prefix = b"L" * 5000                       # more room than the first stream had
    hotpath.set_stream(pair.reader, long_prefix, len(long_prefix), b"peer" * 300, 1200, b"c", 1)
    big = ffi.new("char[]", 8192)                   # kept alive here: the reader does not own it
    hotpath.set_buffer(pair.reader, big, 8192)
    pair.send(long_prefix + b"!")
    assert hotpath.take_peer(pair.arrived(), pair.receiver, pair.reader) == 5001 << 2 | 2


def test_a_proton_whose_signatures_differ_is_refused(monkeypatch) -> None:
    wrong = tuple((name, "void(*)(void)") if name == "pn_link_send" else (name, sig)
                  for name, sig in hotpath.FUNCTIONS)
    monkeypatch.setattr(hotpath, "FUNCTIONS", wrong)
    with pytest.raises(ImportError, match="pn_link_send"):
        hotpath._check()
