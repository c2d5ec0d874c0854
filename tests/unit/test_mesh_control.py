"""MeshControl's inbox: large control messages (MAU floods) are handled in turns, in order; HELLOs
never wait. The duty cycle that paces those turns."""

from __future__ import annotations

from types import SimpleNamespace

from router.linkstate import LinkStateEngine
from router.linkstate.mobile import MAU_CHUNK
from router.node.mesh import BULK_BYTES, MeshControl, encode_control


def _pair() -> tuple[MeshControl, LinkStateEngine, object, object, list]:
    """Node B's MeshControl with A as its neighbour over `conn`; A is a bare engine whose messages B gets."""
    sent: list = []
    b = MeshControl("B", {}, send=lambda link, data: sent.append((link, data)), clock=lambda: 1.0)
    a, conn, peer = _neighbour(b, sent, "A")
    return b, a, conn, peer, sent


def _neighbour(b: MeshControl, sent: list, node: str) -> tuple[LinkStateEngine, object, object]:
    """A bare engine `node` linked to B (HELLOs both ways, its first RA handled by B)."""
    engine = LinkStateEngine(node, 1)
    conn, peer = object(), SimpleNamespace(cost=1, node_id=node)
    sent.clear()
    b.link_up(conn, peer)
    for out in engine.link_up("LB", 1, 0.0):
        b.on_control(conn, encode_control(out.message))
    for link, data in sent:                             # B's HELLO back: the engine sees B
        if link is conn:
            engine.handle(_decode(data), 0.1, "LB")
    for out in engine.tick(0.2):
        b.on_control(conn, encode_control(out.message))
    return engine, conn, peer


def _decode(data: bytes) -> dict:
    from router.node.mesh import decode_control
    return decode_control(data)


def _burst(a: LinkStateEngine, n: int, now: float) -> list[bytes]:
    for i in range(n):
        a.add_local_address(f"svc/{i}")
    return [encode_control(o.message) for o in a.tick(now)]


def test_large_maus_wait_in_the_inbox_and_are_applied_in_order_in_turns():
    b, a, conn, _, _ = _pair()
    messages = _burst(a, 2 * MAU_CHUNK + 7, 1.0)
    big = [m for m in messages if len(m) > BULK_BYTES]
    assert len(big) >= 2
    for data in messages:
        b.on_control(conn, data)
    assert b.backlog and len(b.ls.known_addresses) == 0      # nothing applied while the read was handled
    b.handle_backlog(budget=0)                               # a turn: at least one message
    first = len(b.ls.known_addresses)
    assert 0 < first < 2 * MAU_CHUNK + 7 and b.backlog
    while b.backlog:
        b.handle_backlog()
    assert len(b.ls.known_addresses) == 2 * MAU_CHUNK + 7
    assert b.ls.counters["mau_gap"] == 0 and b.ls.counters["mau_applied"] == 3   # in order: no resync


def test_a_hello_is_handled_at_once_while_other_messages_queue_behind_the_maus():
    b, a, conn, _, sent = _pair()
    hellos, ras = b.ls.counters["in_HELLO"], b.ls.counters["in_RA"]
    burst = _burst(a, MAU_CHUNK + 1, 1.0)           # two MAUs, then the RA advertising the last seq
    assert len(burst[-1]) <= BULK_BYTES
    for data in burst:
        b.on_control(conn, data)
    assert b.ls.counters["in_RA"] == ras                      # behind the MAUs whose seq it advertises
    hello = next(o for o in a.tick(3.0) if o.opcode == "HELLO")
    b.on_control(conn, encode_control(hello.message))
    assert b.ls.counters["in_HELLO"] == hellos + 1            # not behind them
    while b.backlog:
        b.handle_backlog()
    assert b.ls.counters["in_RA"] == ras + 1
    assert b.ls.counters["mau_gap"] == 0
    assert "MAR" not in [_decode(data)["opcode"] for _, data in sent]      # the RA did not look ahead


def test_what_a_lost_peer_sent_and_was_not_handled_is_dropped_with_it():
    b, a, conn, peer, _ = _pair()
    for data in _burst(a, MAU_CHUNK + 1, 1.0):
        b.on_control(conn, data)
    assert b.backlog
    b.link_down(conn, peer)
    assert not b.backlog


def test_bulk_turns_take_at_most_their_share_of_the_time():
    from router.adapter.routerlinks import DutyCycle
    pace = DutyCycle(0.25)
    assert pace.due(0.0) and pace.wait(0.0) == 0.0
    pace.turn_done(1.000, 1.002)                     # a 2 ms turn: the next one 8 ms after it began
    assert not pace.due(1.002) and abs(pace.wait(1.002) - 0.006) < 1e-9
    assert pace.due(1.008)
    busy = 0.0
    now = 2.0
    for _ in range(100):                             # back to back as soon as due: 25% busy
        now += pace.wait(now)
        pace.turn_done(now, now + 0.001)
        busy += 0.001
        now += 0.001
    assert abs(busy / (pace.next_turn - 2.0) - 0.25) < 0.01


def test_link_state_and_other_links_never_wait_behind_a_flood():
    """While A's MAUs wait: A's LSR is answered at once, and C's RA (another link) is handled at once."""
    b, a, conn, _, sent = _pair()
    c, conn_c, _ = _neighbour(b, sent, "C")
    for data in _burst(a, MAU_CHUNK + 1, 1.0):
        b.on_control(conn, data)
    assert b.backlog
    sent.clear()
    lsr = {"to": "_topo/0/B/qdrouter", "opcode": "LSR", "trace": ["A"],
           "body": {"id": "A", "pv": 1, "area": "0", "instance": 1}}
    b.on_control(conn, encode_control(lsr))
    assert [_decode(data)["opcode"] for link, data in sent] == ["LSU"]      # B's link state, at once
    ras = b.ls.counters["in_RA"]
    c.add_local_address("svc/c")
    for out in c.tick(1.0):
        b.on_control(conn_c, encode_control(out.message))
    assert b.ls.counters["in_RA"] == ras + 1 and "svc/c" in b.ls.known_addresses
    assert b.backlog and len(b.ls.known_addresses) == 1                     # A's still wait


def test_the_inbox_is_bounded_by_handling_the_oldest_message_first(monkeypatch):
    """A peer that floods faster than the turns: past INBOX_LIMIT each new message makes the oldest one be
    handled at once, still in order (no gap, no resync)."""
    import router.node.mesh as mesh
    monkeypatch.setattr(mesh, "INBOX_LIMIT", 2)
    b, a, conn, _, _ = _pair()
    messages = _burst(a, 4 * MAU_CHUNK, 1.0)            # four MAUs and the RA
    for data in messages:
        b.on_control(conn, data)
    assert len(b._inbox) == 2 and b.ls.counters["mau_applied"] == 3
    while b.backlog:
        b.handle_backlog()
    assert len(b.ls.known_addresses) == 4 * MAU_CHUNK and b.ls.counters["mau_gap"] == 0


def test_a_forged_opcode_of_any_type_is_dropped_while_messages_wait():
    """The fuzz test's find: while a link had messages queued, an opcode that was a list or a map (not
    hashable) raised in the node's delivery handler; it is a malformed message like any other."""
    b, a, conn, _, _ = _pair()
    for data in _burst(a, MAU_CHUNK + 1, 1.0):
        b.on_control(conn, data)
    assert b.backlog
    malformed = b.ls.counters["malformed"]
    for opcode in (["MAU"], {"RA": 1}, 7, None):
        forged = {"to": "_topo/0/all/qdrouter", "opcode": opcode, "trace": ["A"],
                  "body": {"id": "A", "pv": 1, "area": "0", "instance": 1}}
        b.on_control(conn, encode_control(forged))
    assert b.ls.counters["malformed"] == malformed + 4
    while b.backlog:
        b.handle_backlog()
    assert len(b.ls.known_addresses) == MAU_CHUNK + 1


def test_the_inbox_is_bounded_in_bytes_too(monkeypatch):
    """Large messages: past INBOX_BYTES queued, the oldest are handled before a new one is queued."""
    import router.node.mesh as mesh
    b, a, conn, _, _ = _pair()
    messages = [m for m in _burst(a, 4 * MAU_CHUNK, 1.0) if len(m) > BULK_BYTES]
    monkeypatch.setattr(mesh, "INBOX_BYTES", 2 * len(messages[0]))
    for data in messages:
        b.on_control(conn, data)
    assert len(b._inbox) == 2 and b.ls.counters["mau_applied"] == 2
    while b.backlog:
        b.handle_backlog()
    assert len(b.ls.known_addresses) == 4 * MAU_CHUNK and b.ls.counters["mau_gap"] == 0
    assert b._inbox_bytes == 0


def test_copies_of_a_large_flooded_mau_are_dropped_before_they_are_decoded():
    """A second copy of a flooded MAU (another path) is recognised from its bytes (router.node.controlpeek):
    dropped as a duplicate without the full decode, and the addresses are applied once."""
    from router.linkstate.flood import flood_key
    from router.node.controlpeek import peek_flood_key

    b, a, conn, _, _ = _pair()
    messages = _burst(a, MAU_CHUNK, 1.0)
    big = [m for m in messages if len(m) > BULK_BYTES]
    assert big
    message = _decode(big[0])
    assert peek_flood_key(big[0]) == (message["to"], message["opcode"],
                                      flood_key(message["opcode"], message["body"]))
    for data in messages:
        b.on_control(conn, data)
    while b.backlog:
        b.handle_backlog()
    before = b.ls.counters["flood_duplicate"]
    b.on_control(conn, big[0])                           # the same MAU again, as by another neighbour
    while b.backlog:
        b.handle_backlog()
    assert b.early_duplicates == 1
    assert b.ls.counters["flood_duplicate"] == before + 1
    assert len(b.ls.known_addresses) == MAU_CHUNK


def test_the_peek_gives_up_on_anything_unexpected():
    from router.node.controlpeek import peek_flood_key

    assert peek_flood_key(b"") is None
    assert peek_flood_key(b"\x00\x53\x77\xa1\x03abc") is None              # no application properties
    hello = encode_control({"to": "_topo/0/all/$qd.router", "opcode": "HELLO",
                            "body": {"id": "A", "instance": 1, "seen": []}})
    assert peek_flood_key(hello) is None                                  # not a flooded opcode
    absolute = encode_control({"to": "_topo/0/all/$qd.router", "opcode": "MAU",
                               "body": {"id": "A", "instance": 1, "mobile_seq": 3, "exist": ["x"] * 300}})
    assert peek_flood_key(absolute) is None                               # absolute MAUs are not flooded


# ---- a large message is decoded in steps (issue 33, point 5) ---------------------------------------------

def _absolute(node: str, seq: int, n: int, to: str = "B") -> bytes:
    from router.linkstate.messages import MobileAddressUpdate
    body = MobileAddressUpdate(node, 1, seq, exist=tuple(f"resync/{i}" for i in range(n)),
                               hints=(3,) * n).to_map()
    return encode_control({"to": f"_topo/0/{to}/qdrouter.ma", "opcode": "MAU", "body": body, "trace": [node]})


def test_a_large_absolute_mau_is_decoded_in_steps_and_what_follows_it_waits():
    from router.node.mesh import STEP_BYTES, STEP_VALUES
    b, a, conn, _, _ = _pair()
    data = _absolute("A", 3, 20_000)
    assert len(data) > STEP_BYTES
    b.on_control(conn, data)
    ra = [encode_control(o.message) for o in a.tick(5.0) if o.opcode == "RA"]
    for message in ra:                                  # behind it on the same link: waits for it
        b.on_control(conn, message)
    turns = 0
    while b.ls.counters["mau_applied"] == 0:
        b.handle_backlog(budget=0)                      # a turn with no time left: one step each
        turns += 1
        assert turns < 1000
    assert turns >= 2 * 20_000 // STEP_VALUES           # 40,000 values (addresses, hints): one step per 500
    assert b.stepped == 1 and b.backlog == bool(ra)     # the RA is still behind it, until the next turn
    assert b.ls.remote_nodes()[0]["mobile_seq"] == 3 and b.ls.address_updates_pending == 20_000
    while b.backlog:
        b.handle_backlog()
    while b.ls.apply_address_updates():
        pass
    assert len(b.ls.known_addresses) == 20_000 and b._inbox_bytes == 0
    assert b.ls.counters["mau_gap"] == 0


def test_a_message_decoded_in_steps_is_dropped_if_unreadable_or_if_its_link_goes():
    b, a, conn, peer, _ = _pair()
    data = _absolute("A", 3, 5_000)
    broken = data[:-100] + b"\xff" * 100                # its last values are not AMQP
    b.on_control(conn, broken)
    b.on_control(conn, _absolute("A", 4, 6_000))        # the next one is handled after it
    while b.backlog:
        b.handle_backlog(budget=0)
    assert b.stepped == 1 and b.ls.counters["mau_applied"] == 1 and b.ls.address_updates_pending == 6_000
    b.on_control(conn, _absolute("A", 9, 5_000))
    b.handle_backlog(budget=0)                          # one step into it
    assert b.backlog and b._inbox_bytes > 0
    b.link_down(conn, peer)                             # what it was decoding goes with it
    assert not b.backlog and b._inbox_bytes == 0 and b.ls.counters["mau_applied"] == 1


def test_an_overflowing_inbox_finishes_the_message_being_decoded(monkeypatch):
    import router.node.mesh as mesh
    monkeypatch.setattr(mesh, "INBOX_LIMIT", 1)
    b, a, conn, _, _ = _pair()
    b.on_control(conn, _absolute("A", 3, 5_000))
    b.handle_backlog(budget=0)                          # decoding has begun
    b.on_control(conn, _absolute("A", 4, 3_000))        # over the limit: the first is handled whole now
    assert b.ls.counters["mau_applied"] == 1 and len(b._inbox) == 1
    while b.backlog:
        b.handle_backlog()
    assert b.ls.counters["mau_applied"] == 2 and b.ls.addresses_of("A").keys() == {f"resync/{i}"
                                                                                   for i in range(3_000)}
