"""A chain A <- B <- C: a producer on C, a consumer on A, two hops in between.

Credit is proxied across the mesh (no consumer anywhere: no credit), messages arrive intact and in
order without router annotations, and every outcome the consumer chooses travels back to C.
"""

from __future__ import annotations

import random

from proton import symbol

from tests.support.clients import ACCEPTED, MODIFIED, REJECTED, RELEASED, Client, make_message
from tests.support.meshes import build, wait_address
from tests.support.state import mesh_view, node_state
from tests.support.traffic import outcome_counts, qd_keys
from tests.support.waiting import assert_stays, wait_for

ADDR = "svc/chain"


def chain(node_factory, **kw):
    """A <- B <- C: B dials A (cost 2), C dials B (cost 1)."""
    n = build(node_factory, ["A", "B", "C"], [("B", "A", 2), ("C", "B", 1)], **kw)
    return n["A"], n["B"], n["C"]


def _consumer_and_producer(a, b, c, *, credit_window=300, auto_accept=True, address=ADDR):
    """A producer on C (attached first), then a consumer on A; returns them once C's producer has
    credit."""
    prod = Client(c.url)
    s = prod.sender(address)
    cons = Client(a.url)
    r = cons.receiver(address, credit_window=credit_window, auto_accept=auto_accept)
    wait_address([a, b, c], address, ["A"])
    s.wait_credit()
    return s, r


def test_no_credit_without_consumer_then_credit_once_consumer_on_far_node(node_factory):
    a, b, c = chain(node_factory)
    prod = Client(c.url)
    s = prod.sender(ADDR)
    assert s.remote_active, f"sender refused: {s.remote_condition}"
    # converged, and nobody consumes svc/chain anywhere: C must not hand out credit
    assert_stays(lambda: s.credit == 0, 1.0, f"credit 0 on C's producer with no consumer (has {s.credit})")
    assert all(ADDR not in mesh_view(n).addresses for n in (a, b, c))

    cons = Client(a.url)
    r = cons.receiver(ADDR, credit_window=300)
    wait_address([a, b, c], ADDR, ["A"])
    s.wait_credit(1)
    assert r.received == []


def test_200_unsettled_messages_cross_two_hops_in_order_without_router_annotations(node_factory):
    a, b, c = chain(node_factory)
    s, r = _consumer_and_producer(a, b, c)
    n = 200
    trackers = []
    for i in range(n):
        m = make_message(f"m{i}", id=f"id-{i}", subject="chain",
                         properties={"seq": i}, annotations={symbol("x-opt-app.k"): f"v{i}"})
        trackers.append(s.send(m))
    r.wait_messages(n)
    wait_for(lambda: all(t.settled for t in trackers),
             what=lambda: f"settlement of all {n} deliveries at C: {outcome_counts(trackers)}")

    assert [t.state for t in trackers] == [ACCEPTED] * n, outcome_counts(trackers)
    assert len(r.received) == n, f"{len(r.received)} messages at A for {n} sent"
    assert r.bodies == [f"m{i}" for i in range(n)], "bodies changed, missing or out of order"
    for i, rec in enumerate(r.received):
        m = rec.message
        assert not rec.presettled
        assert qd_keys(m) == [], f"message {i} reached the client with router annotations {m.annotations}"
        assert (m.annotations or {}).get(symbol("x-opt-app.k")) == f"v{i}", \
            f"user annotation of message {i} lost: {m.annotations}"
        assert m.id == f"id-{i}" and m.subject == "chain" and m.properties == {"seq": i}
        # the producer's link target gave the address; the message's own `to` stays unset
        assert m.address is None, f"message {i} got a `to` on the way: {m.address!r}"
    # nothing stays inside the nodes
    for nd in (a, b, c):
        assert node_state(nd).in_flight == 0, f"node {nd.node_id} still holds deliveries"


def test_presettled_messages_cross_two_hops_in_order_and_are_counted_on_each_hop(node_factory):
    """Pre-settled deliveries take the one-call path on B (transit) and A (egress): 1,000 of them (four
    times the link capacity, so credit must come back through that path) arrive settled, in order, without
    router annotations, and every hop counts them."""
    a, b, c = chain(node_factory)
    s, r = _consumer_and_producer(a, b, c, credit_window=300)
    n = 1000
    for i in range(n):
        s.send(make_message(f"p{i}", properties={"seq": i}), settled=True)
    r.wait_messages(n)
    assert r.bodies == [f"p{i}" for i in range(n)], "bodies changed, missing or out of order"
    assert all(rec.presettled for rec in r.received), "a pre-settled delivery arrived unsettled"
    assert all(qd_keys(rec.message) == [] for rec in r.received), "router annotations reached the client"
    for nd in (a, b, c):
        st = node_state(nd)
        assert st.in_flight == 0, f"node {nd.node_id} tracks pre-settled deliveries"
        assert st.node["presettledDeliveries"] >= n, (nd.node_id, st.node["presettledDeliveries"])
    # and an unsettled message after them still goes through and is accepted end to end
    t = s.send("after")
    r.wait_messages(n + 1)
    t.wait()
    assert t.state == ACCEPTED


def test_large_messages_stream_across_two_hops_intact(node_factory):
    a, b, c = chain(node_factory)
    s, r = _consumer_and_producer(a, b, c, credit_window=20)
    bodies = [random.Random(i).randbytes(size) for i, size in enumerate((70_000, 300_000, 1_000_000, 5))]
    trackers = [s.send(make_message(body, annotations={symbol("x-opt-app.n"): i}))
                for i, body in enumerate(bodies)]
    r.wait_messages(len(bodies))
    wait_for(lambda: all(t.settled for t in trackers), what=lambda: f"settlement: {outcome_counts(trackers)}")
    assert [t.state for t in trackers] == [ACCEPTED] * len(bodies)
    assert r.aborted == 0
    for i, rec in enumerate(r.received):
        assert rec.body == bodies[i], f"body {i} ({len(bodies[i])} bytes) changed"
        assert qd_keys(rec.message) == []
        assert rec.message.annotations == {symbol("x-opt-app.n"): i}


def test_router_annotations_set_by_a_client_are_not_trusted(node_factory):
    """A client cannot smuggle x-opt-qd.* in: C replaces them, so a false `to` or a trace naming A
    neither misroutes nor drops the message, and A's consumer sees none of them."""
    a, b, c = chain(node_factory)
    s, r = _consumer_and_producer(a, b, c)
    fake = {symbol("x-opt-qd.to"): "svc/nowhere", symbol("x-opt-qd.trace"): ["0/A", "0/B"],
            symbol("x-opt-qd.ingress"): "0/Z", symbol("x-opt-app.k"): "kept"}
    tr = s.send(make_message("smuggler", annotations=fake)).wait()
    assert tr.state == ACCEPTED, f"outcome {tr.outcome}"
    rec = r.wait_messages(1)[0]
    assert rec.body == "smuggler"
    assert qd_keys(rec.message) == [], rec.message.annotations
    assert rec.message.annotations == {symbol("x-opt-app.k"): "kept"}


def test_consumer_outcomes_travel_back_across_two_hops(node_factory):
    a, b, c = chain(node_factory)
    s, r = _consumer_and_producer(a, b, c, credit_window=10, auto_accept=False)
    names = ["accept", "release", "reject", "modify"]
    trackers = {name: s.send(make_message(name)) for name in names}
    r.wait_messages(4)
    by_body = {rec.body: rec for rec in r.received}
    assert sorted(by_body) == sorted(names)
    # outcomes are not settled on the consumer's behalf: nothing is settled at C yet
    assert_stays(lambda: not any(t.settled for t in trackers.values()), 0.3,
                 "no delivery settled at C before A's consumer decided")
    by_body["accept"].accept()
    by_body["release"].release()
    by_body["reject"].reject("app:bad-request", "no thanks", {symbol("why"): "test"})
    by_body["modify"].modify(failed=True, undeliverable=True, annotations={symbol("x-opt-app.retry"): 3})
    wait_for(lambda: all(t.settled for t in trackers.values()),
             what=lambda: f"outcomes at C: {outcome_counts(trackers.values())}")

    assert trackers["accept"].state == ACCEPTED
    assert trackers["release"].state == RELEASED
    rej = trackers["reject"]
    assert rej.state == REJECTED
    assert rej.condition is not None, "REJECTED arrived without the consumer's error"
    assert rej.condition.name == "app:bad-request" and rej.condition.description == "no thanks"
    assert rej.condition.info == {symbol("why"): "test"}
    mod = trackers["modify"]
    assert mod.state == MODIFIED
    assert mod.failed is True and mod.undeliverable is True, (mod.failed, mod.undeliverable)
    assert mod.annotations == {symbol("x-opt-app.retry"): 3}, mod.annotations
    assert len(r.received) == 4, "an outcome made the message go round again"


def test_consumer_detach_drains_the_far_producer_and_a_new_consumer_restores_credit(node_factory):
    a, b, c = chain(node_factory)
    s, r = _consumer_and_producer(a, b, c)
    tr = s.send("before").wait()
    assert tr.state == ACCEPTED
    r.close()
    wait_for(lambda: s.credit == 0, what=lambda: f"C's producer drained (credit {s.credit}, "
             f"drain requests {s.drain_requests})")
    assert s.drain_requests >= 1, "credit vanished without a drain"
    wait_address([a, b, c], ADDR, [])
    assert_stays(lambda: s.credit == 0, 0.5, "credit 0 while nobody consumes")
    # sent now, it is never delivered: it waits at C, or (when the client answered the drain only
    # after sending it, as Proton does lazily) it comes back RELEASED
    late = s.send("after")
    assert_stays(lambda: not late.settled or late.state == RELEASED, 0.3,
                 lambda: f"the late message waits or is released: it ended {late.outcome} "
                 f"(producer credit {s.credit}, drain requests {s.drain_requests})")
    r2 = Client(a.url).receiver(ADDR, credit_window=10)
    wait_address([a, b, c], ADDR, ["A"])
    s.wait_credit()
    if late.settled:
        late = s.send("after")
    late.wait()
    assert late.state == ACCEPTED
    assert r2.wait_messages(1)[0].body == "after"
    assert_stays(lambda: len(r2.received) == 1, 0.2, "exactly one copy of the late message")


def test_small_windows_keep_a_long_stream_moving_across_two_hops(node_factory):
    """link_capacity 4 on every node and a consumer granting 3 at a time: credit must keep flowing
    hop by hop (inter-router windows, producer credit, consumer credit) until all 300 arrive."""
    a, b, c = chain(node_factory, link_capacity=4)
    s, r = _consumer_and_producer(a, b, c, credit_window=3)
    assert s.credit <= 4
    n = 300
    trackers = [s.send(f"s{i}") for i in range(n)]
    wait_for(lambda: all(t.settled for t in trackers), timeout=10,
             what=lambda: f"settlement of {n} through small windows: {outcome_counts(trackers)}, "
             f"{len(r.received)} received, producer credit {s.credit}")
    assert [t.state for t in trackers] == [ACCEPTED] * n, outcome_counts(trackers)
    assert r.bodies == [f"s{i}" for i in range(n)]


def test_closest_prefers_a_local_consumer_then_falls_back_to_the_far_one(node_factory):
    a, b, c = chain(node_factory)
    addr = "closest/pick"
    # both consumers grant enough credit up front for a whole burst: closest uses a remote consumer
    # only while the local one has no credit
    far = Client(a.url).receiver(addr, credit=50, credit_window=50)
    near = Client(c.url).receiver(addr, credit=50, credit_window=50)
    wait_address([a, b, c], addr, ["A", "C"])
    s = Client(c.url).sender(addr)
    s.wait_credit()
    first = [s.send(f"c{i}") for i in range(20)]
    wait_for(lambda: all(t.settled for t in first), what=lambda: outcome_counts(first))
    assert len(near.received) == 20 and far.received == [], (len(near.received), len(far.received))
    near.close()
    wait_address([a, b, c], addr, ["A"])
    second = [s.send(f"f{i}") for i in range(20)]
    wait_for(lambda: all(t.settled for t in second), what=lambda: outcome_counts(second))
    assert [t.state for t in first + second] == [ACCEPTED] * 40
    assert far.bodies == [f"f{i}" for i in range(20)]
