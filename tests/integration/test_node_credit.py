"""Credit: no queueing in the node, credit proxied from consumers, drain and echo answered."""

from __future__ import annotations

import time

from tests.support.clients import ACCEPTED, MODIFIED, RELEASED, Client, make_message, outcome_name
from tests.support.raw_amqp import ATTACH, FLOW, RawConn
from tests.support.waiting import WaitTimeout, assert_stays, wait_for

CAPACITY = 10


def test_sender_without_consumer_gets_no_credit(node_factory):
    n = node_factory(link_capacity=CAPACITY)
    c = Client(n.url)
    s = c.sender("balanced/nobody")
    assert s.remote_active, "sender attach refused"
    assert_stays(lambda: s.credit == 0, 1.0, "sender credit == 0 with no consumer")


def test_consumer_arrival_grants_credit_up_to_capacity(node_factory):
    n = node_factory(link_capacity=CAPACITY)
    c = Client(n.url)
    s = c.sender("balanced/late-consumer")
    assert_stays(lambda: s.credit == 0, 0.3, "no credit before the consumer")
    c.receiver("balanced/late-consumer", credit=100)
    s.wait_credit(1)
    assert_stays(lambda: 0 < s.credit <= CAPACITY, 0.5, f"0 < credit <= link_capacity {CAPACITY}")


def test_sender_attaching_after_consumer_gets_credit(node_factory):
    n = node_factory(link_capacity=CAPACITY)
    c = Client(n.url)
    c.receiver("balanced/early-consumer", credit=100)
    s = c.sender("balanced/early-consumer")
    s.wait_credit(1)
    assert s.credit <= CAPACITY


def test_unsettled_in_flight_bounded_by_capacity(node_factory):
    """A consumer that never settles: the producer has at most link_capacity deliveries in flight
    and gets one more credit per settlement."""
    n = node_factory(link_capacity=CAPACITY)
    c = Client(n.url)
    r = c.receiver("balanced/hold", credit=100, auto_accept=False)
    s = c.sender("balanced/hold")
    s.wait_credit(1)
    trackers = [s.send(f"m{i}") for i in range(CAPACITY + 5)]
    r.wait_messages(CAPACITY)
    # (Proton counts the 5 deliveries still queued at the producer against its credit: -5)
    assert_stays(lambda: len(r.received) == CAPACITY and s.link.queued == 5 and s.credit <= 0, 1.0,
                 lambda: f"exactly {CAPACITY} in flight and no credit while the consumer holds them "
                 f"(received {len(r.received)}, producer credit {s.credit}, queued {s.link.queued})")
    assert all(not t.settled for t in trackers)

    r.received[0].accept()
    trackers[0].wait()
    assert trackers[0].state == ACCEPTED
    r.wait_messages(CAPACITY + 1)
    assert_stays(lambda: len(r.received) == CAPACITY + 1 and s.link.queued == 4, 0.5,
                 lambda: f"one settlement frees exactly one credit (received {len(r.received)})")

    for rec in r.received[1:]:
        rec.accept()
    r.wait_messages(CAPACITY + 5)
    for rec in r.received[CAPACITY + 1:]:
        rec.accept()
    wait_for(lambda: all(t.settled for t in trackers), what="all deliveries settled")
    assert [t.state for t in trackers] == [ACCEPTED] * len(trackers)
    assert r.bodies == [f"m{i}" for i in range(CAPACITY + 5)]


def test_presettled_credit_comes_back_without_settlement(node_factory):
    n = node_factory(link_capacity=CAPACITY)
    c = Client(n.url)
    r = c.receiver("balanced/presettled-credit", credit=100, auto_accept=False)
    s = c.sender("balanced/presettled-credit")
    s.wait_credit(1)
    for i in range(3 * CAPACITY):
        s.send(f"p{i}", settled=True)
    r.wait_messages(3 * CAPACITY)
    assert all(x.presettled for x in r.received)


def test_last_consumer_leaving_drains_sender_credit(node_factory):
    n = node_factory(link_capacity=CAPACITY)
    c = Client(n.url)
    r = c.receiver("balanced/leaving", credit=100)
    s = c.sender("balanced/leaving")          # answers drain (link.drained()) like a careful client
    s.wait_credit(1)
    r.close()
    wait_for(lambda: s.credit == 0, what=f"sender credit back to 0 (credit {s.credit}, "
             f"drain requests {s.drain_requests})")
    assert_stays(lambda: s.credit == 0, 0.5, "credit stays 0 with no consumer")


def test_last_consumer_leaving_is_signalled_to_passive_sender(node_factory):
    """A sender that does not call drained() (a stock Container sender): the node must still tell
    it (drain request or credit revoked); if it keeps credit, an unsettled send comes back
    RELEASED, and credit returns when a consumer does."""
    n = node_factory(link_capacity=CAPACITY)
    c = Client(n.url)
    r = c.receiver("balanced/leaving-passive", credit=100)
    s = c.sender("balanced/leaving-passive", auto_drain=False)
    s.wait_credit(1)
    r.close()
    wait_for(lambda: s.link.drain_mode or s.credit == 0, what="drain request or credit revoked")
    if s.credit > 0:
        tr = s.send("into the void").wait()
        assert tr.state == RELEASED, tr
    r2 = c.receiver("balanced/leaving-passive", credit=100)
    s.wait_credit(1)
    tr = s.send("back").wait()
    assert tr.state == ACCEPTED
    assert r2.wait_messages(1)[-1].body == "back"


def test_unsettled_send_while_nothing_routes_is_released(node_factory):
    """A producer that sends before it has seen the drain (its input is paused): RELEASED, and its
    credit comes back when a consumer returns."""
    n = node_factory(link_capacity=CAPACITY)
    prod = Client(n.url)
    cons = Client(n.url)
    r = cons.receiver("balanced/race", credit=100)
    s = prod.sender("balanced/race")
    s.wait_credit(1)
    prod.paused = True                       # does not read what the node sends from now on
    r.close()                                # node has processed the detach once this returns
    tr = s.send("nobody home")
    wait_for(lambda: s.link.queued == 0, what="delivery written to the node")
    prod.paused = False
    tr.wait()
    assert tr.state == RELEASED, tr
    wait_for(lambda: s.credit == 0, what="sender credit back to 0 after the release")

    r2 = cons.receiver("balanced/race", credit=100)
    s.wait_credit(1)
    tr2 = s.send("somebody home").wait()
    assert tr2.state == ACCEPTED
    assert [x.body for x in r2.received] == ["somebody home"]


def test_presettled_send_while_nothing_routes_is_dropped_not_queued(node_factory):
    n = node_factory(link_capacity=CAPACITY)
    prod = Client(n.url)
    cons = Client(n.url)
    r = cons.receiver("balanced/race-presettled", credit=100)
    s = prod.sender("balanced/race-presettled")
    s.wait_credit(1)
    prod.paused = True
    r.close()
    s.send("dropped", settled=True)
    probe = s.send("probe")                  # unsettled, same link: once its outcome is back, the
    wait_for(lambda: s.link.queued == 0, what="deliveries written to the node")
    prod.paused = False
    probe.wait()                             # node has handled "dropped" too
    assert probe.state == RELEASED, probe
    r2 = cons.receiver("balanced/race-presettled", credit=100)
    s.wait_credit(1)
    s.send("kept", settled=True)
    r2.wait_messages(1)
    assert_stays(lambda: len(r2.received) == 1, 0.3, "only the later message arrives")
    assert r2.bodies == ["kept"], "a message sent while nothing routed was queued in the node"


def test_consumer_drain_with_nothing_to_send_is_answered(node):
    c = Client(node.url)
    r = c.receiver("balanced/drain-empty", credit=0)
    r.drain(5)
    assert r.credit == 5
    wait_for(lambda: r.credit == 0 and not r.link.draining(), what="drain answered (credit 0)")
    assert r.link.drained() == 5, "drained credit not reported by the node's flow"


def test_consumer_drain_answered_on_the_wire(node):
    """Raw frames: the node's answer to a drain advances delivery-count by the unused credit and
    leaves link-credit 0."""
    raw = RawConn(node.url)
    raw.open()
    raw.begin()
    reply = raw.attach("drainer", 0, role_receiver=True, source="balanced/drain-raw")
    node_handle, dc0 = reply.field(1), reply.field(9) or 0
    _drain_frames(raw)
    raw.flow(handle=0, delivery_count=dc0, link_credit=5, drain=True)
    f = raw.expect(FLOW, pred=lambda f: f.field(4) == node_handle, timeout=5)
    assert (f.field(5), f.field(6)) == ((dc0 + 5) % 2 ** 32, 0), \
        f"drain answer delivery-count/link-credit {f.field(5)}/{f.field(6)}, expected {dc0 + 5}/0"


def test_consumer_drain_answered_while_producer_idle(node):
    c = Client(node.url)
    r = c.receiver("balanced/drain-idle", credit=3)
    s = c.sender("balanced/drain-idle")
    s.wait_credit(1)
    s.send("one").wait()
    r.wait_messages(1)
    r.drain(4)
    wait_for(lambda: r.credit == 0 and not r.link.draining(), what="drain answered with a producer attached")
    # the consumer gets credit again later and messages still flow
    r.flow(2)
    tr = s.send("two").wait()
    assert tr.state == ACCEPTED
    assert r.bodies == ["one", "two"]


def _drain_frames(raw: RawConn, quiet: float = 0.3) -> None:
    """Read what the node sends until it has been quiet for ``quiet`` s."""
    while True:
        try:
            raw.read_frame(quiet)
        except WaitTimeout:
            return


def test_echo_flow_on_sender_link_is_answered(node):
    raw = RawConn(node.url)
    raw.open()
    raw.begin()
    reply = raw.attach("echo-snd", 0, role_receiver=False, target="balanced/echo-snd")
    node_handle = reply.field(1)
    _drain_frames(raw)
    raw.flow(handle=0, delivery_count=0, link_credit=0, echo=True)
    f = raw.expect(FLOW, timeout=5)
    assert f.field(4) == node_handle, f"FLOW answered for handle {f.field(4)}, expected {node_handle}"


def test_echo_flow_on_receiver_link_is_answered(node):
    raw = RawConn(node.url)
    raw.open()
    raw.begin()
    reply = raw.attach("echo-rcv", 0, role_receiver=True, source="balanced/echo-rcv")
    dc = reply.field(9) or 0
    _drain_frames(raw)
    raw.flow(handle=0, delivery_count=dc, link_credit=0, echo=True)
    raw.expect(FLOW, timeout=5)


def test_session_level_echo_flow_is_answered(node):
    raw = RawConn(node.url)
    raw.open()
    raw.begin()
    _drain_frames(raw)
    raw.flow(echo=True)
    f = raw.expect(FLOW, timeout=5)
    assert f.field(4) is None, f"session FLOW expected, got one for handle {f.field(4)}"


def test_consumer_with_closed_session_window_does_not_block_others(node):
    """A consumer that grants link credit but advertises incoming-window 0 (it stopped reading) must
    not stop deliveries to another consumer of the same address; the deliveries stuck at it are not
    lost: they come back RELEASED/MODIFIED when it disconnects."""
    address = "balanced/blocked-window"
    raw = RawConn(node.url)
    raw.open()
    raw.begin(incoming_window=0)
    reply = raw.attach("blocked", 0, role_receiver=True, source=address)
    assert reply.field(1) is not None
    raw.flow(handle=0, incoming_window=0, delivery_count=reply.field(9) or 0, link_credit=100)

    c = Client(node.url)
    normal = c.receiver(address, credit=100)
    s = c.sender(address)
    s.wait_credit(1)

    total, stuck_limit = 20, 3
    trackers, stuck = [], []
    for i in range(total):
        s.wait_credit(1)
        tr = s.send(make_message(f"w{i}"))
        trackers.append(tr)
        deadline = time.monotonic() + 1.0
        try:
            wait_for(lambda t=tr: t.settled, max(0.05, deadline - time.monotonic()))
        except WaitTimeout:
            stuck.append(tr)
            assert len(stuck) <= stuck_limit, \
                f"{len(stuck)} of {i + 1} deliveries stuck: the blocked consumer keeps getting them"
    accepted = [t for t in trackers if t.settled and t.state == ACCEPTED]
    assert len(accepted) >= total - stuck_limit, [t.outcome for t in trackers]

    raw.close()
    wait_for(lambda: all(t.settled for t in trackers), what="stuck deliveries settled after the blocked "
             f"consumer left: {[t for t in trackers if not t.settled]}")
    for t in trackers:
        assert t.state in (ACCEPTED, RELEASED, MODIFIED), f"{t}: {outcome_name(t.state)}"
    got = {x.body for x in normal.received}
    for t, i in zip(trackers, range(total), strict=True):
        if t.state == ACCEPTED:
            assert f"w{i}" in got


def test_attach_reply_comes_before_credit(node):
    """The node answers a sender's ATTACH even when the address has no consumer (0 credit, no
    detach): producers wait for credit rather than failing."""
    raw = RawConn(node.url)
    raw.open()
    raw.begin()
    reply = raw.attach("waiting-snd", 0, role_receiver=False, target="balanced/nobody-raw")
    assert reply.code == ATTACH and reply.field(6) is not None, f"attach refused: {reply}"
    _drain_frames(raw, 0.5)
    credits = [f.field(6) for f in raw.frames if f.code == FLOW and f.field(4) == reply.field(1)]
    assert all((x or 0) == 0 for x in credits), f"credit granted with no consumer: {credits}"


def _link_flow(raw: RawConn, handle: int, pred=None, timeout: float = 5.0):
    return raw.expect(FLOW, pred=lambda f: f.field(4) == handle and (pred is None or pred(f)),
                      timeout=timeout)


def test_credit_after_an_answered_drain_is_a_full_window(node_factory):
    """Consumer leaves -> drain; the producer answers it on the wire (delivery-count advanced, credit 0);
    a consumer comes back -> the producer gets the whole window again, and keeps getting it."""
    n = node_factory(link_capacity=CAPACITY)
    raw = RawConn(n.url)
    raw.open()
    raw.begin()
    raw.attach("raw-snd", 0, role_receiver=False, target="balanced/redrain")
    c = Client(n.url)
    r = c.receiver("balanced/redrain", credit=100)
    first = _link_flow(raw, 0, lambda f: (f.field(6) or 0) > 0)
    count, credit = first.field(5) or 0, first.field(6)
    assert credit == CAPACITY
    for i in range(3):
        raw.transfer(0, bytes(make_message(f"m{i}").encode()))
    r.wait_messages(3)
    r.close()
    drain = _link_flow(raw, 0, lambda f: f.field(8) is True)
    assert drain.field(5) == count + 3 and drain.field(6) > 0, drain.fields
    # answer the drain: the remaining credit is used up (delivery-count advanced), none left
    count = drain.field(5) + drain.field(6)
    raw.flow(handle=0, next_incoming_id=None, delivery_count=count, link_credit=0, drain=True,
             next_outgoing_id=3)
    time.sleep(0.2)
    r2 = c.receiver("balanced/redrain", credit=100)
    back = _link_flow(raw, 0, lambda f: (f.field(6) or 0) > 0 and f.field(8) is not True)
    assert (back.field(5), back.field(6)) == (count, CAPACITY), back.fields
    for i in range(CAPACITY):
        raw.transfer(0, bytes(make_message(f"again{i}").encode()))
    assert len(r2.wait_messages(CAPACITY)) == CAPACITY
    _link_flow(raw, 0, lambda f: (f.field(5) or 0) >= count + CAPACITY and (f.field(6) or 0) > 0)
