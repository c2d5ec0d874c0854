"""The forwarding core on its own: distribution, credit ledger, settlement tracking, link loss."""

import random

from router.addressing import AddressRules
from router.forwarding.core import ACCEPTED, MODIFIED, REJECTED, RELEASED, RouterCore
from router.forwarding.decisions import (
    BEST,
    DONE,
    HANDED_OVER,
    HOLD,
    PRESETTLED,
    TO_MANY,
    TO_ONE,
    TRACKED,
    UNROUTABLE,
    Refusal,
)


def make_core(capacity=10, backlog=None):
    rules = AddressRules([("mc", "multicast"), ("near", "closest")], default="balanced")
    return RouterCore("A", rules, capacity, rng=random.Random(1), backlog=backlog)


def grants(core):
    g, d = core.take_credit_actions()
    return {p.handle: n for p, n in g}, {p.handle for p in d}


class Handles:
    """Unique opaque handles standing in for Proton pointers."""

    def __init__(self):
        self.n = 0

    def __call__(self, prefix="h"):
        self.n += 1
        return f"{prefix}{self.n}"


def test_producer_gets_no_credit_without_consumer():
    core = make_core()
    core.add_producer("p", "conn", "q")
    assert grants(core) == ({}, set())


def test_consumer_with_credit_releases_capacity_to_waiting_producer():
    core = make_core(capacity=10)
    core.add_producer("p", "conn", "q")
    grants(core)
    c = core.add_consumer("c", "conn", "q")
    assert grants(core) == ({}, set())          # a consumer without credit is not enough
    core.consumer_credit(c, 3)
    assert grants(core) == ({"p": 10}, set())   # up to link capacity, not the consumer's credit
    assert grants(core) == ({}, set())          # nothing more until something settles


def test_anonymous_producer_gets_capacity_at_once():
    core = make_core(capacity=7)
    core.add_producer("anon", "conn", None)
    assert grants(core) == ({"anon": 7}, set())


def test_credit_returns_only_as_deliveries_settle():
    core = make_core(capacity=3)
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 100)
    assert grants(core)[0] == {"p": 3}
    for i in range(3):
        core.arrived(p)                         # the adapter reports each arrival
        assert core.pick(c.address) is c
        core.sent(p, c, f"in{i}", f"out{i}", False)
    assert p.in_flight == 3
    assert grants(core)[0] == {}                # capacity in flight: no credit
    e = core.settle("out1")
    assert (e.in_dlv, e.producer, e.consumer) == ("in1", p, c)
    assert grants(core)[0] == {"p": 1}
    assert p.in_flight == 2 and c.unsettled == 2


def test_presettled_returns_credit_immediately():
    core = make_core(capacity=2)
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 10)
    grants(core)
    core.arrived(p)
    core.sent_presettled(p, (c,))
    assert grants(core)[0] == {"p": 1}
    assert p.in_flight == 0


def test_last_consumer_leaving_drains_producers():
    core = make_core()
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 5)
    grants(core)
    assert core.remove_consumer(c) == []
    g, d = grants(core)
    assert d == {"p"} and p.draining
    core.producer_credit(p, 0)                  # the producer answered the drain
    assert not p.draining
    c2 = core.add_consumer("c2", "conn", "q")
    core.consumer_credit(c2, 1)
    assert grants(core)[0] == {"p": 10}


def test_consumer_without_credit_stops_replenishment_until_it_flows():
    core = make_core(capacity=2)
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 1)
    grants(core)
    core.arrived(p)
    core.sent(p, c, "in", "out", False)         # uses the consumer's last credit
    assert not c.address.ready
    core.settle("out")
    assert grants(core)[0] == {}                # no consumer with credit: nothing yet
    core.consumer_credit(c, 5)
    assert grants(core)[0] == {"p": 1}


def test_closest_round_robins_among_consumers_with_credit():
    core = make_core()
    cs = [core.add_consumer(f"c{i}", "conn", "near") for i in range(3)]
    for c in cs:
        core.consumer_credit(c, 100)
    picks = [core.pick(cs[0].address).handle for _ in range(6)]
    assert picks == ["c0", "c1", "c2", "c0", "c1", "c2"]
    core.consumer_credit(cs[1], 0)
    picks = {core.pick(cs[0].address).handle for _ in range(6)}
    assert picks == {"c0", "c2"}


def test_closest_skips_consumer_with_backed_up_session():
    backlog = {"c0": 1000, "c1": 0}
    core = make_core(backlog=backlog.get)
    c0 = core.add_consumer("c0", "conn", "near")
    c1 = core.add_consumer("c1", "conn", "near")
    core.consumer_credit(c0, 1000)
    core.consumer_credit(c1, 1000)
    c0.unsettled = 100                          # stuck behind a closed session window
    picks = [core.pick(c0.address).handle for _ in range(10)]
    assert picks == ["c1"] * 10


def test_balanced_prefers_fewest_unsettled():
    core = make_core()
    a = core.add_consumer("a", "conn", "q")
    b = core.add_consumer("b", "conn", "q")
    core.consumer_credit(a, 100)
    core.consumer_credit(b, 100)
    a.unsettled = 5
    b.unsettled = 2
    assert core.pick(a.address) is b
    b.unsettled = 9
    assert core.pick(a.address) is a


def test_balanced_uses_consumers_without_credit_only_as_last_resort():
    core = make_core()
    a = core.add_consumer("a", "conn", "q")
    b = core.add_consumer("b", "conn", "q")
    core.consumer_credit(a, 0)
    core.consumer_credit(b, 10)
    b.unsettled = 50
    assert core.pick(a.address) is b


def test_multicast_fanout_and_outcome_priority():
    core = make_core()
    p = core.add_producer("p", "conn", "mc")
    cs = [core.add_consumer(f"c{i}", "conn", "mc") for i in range(4)]
    for c in cs:
        core.consumer_credit(c, 10)
    assert cs[0].address.multicast
    targets = core.fanout(cs[0].address, presettled=False)
    assert targets == cs
    g = core.new_group("in", p)
    for i, c in enumerate(targets):
        core.sent_copy(g, c, f"out{i}")
    assert p.in_flight == 1 and g.pending == 4
    results = []
    for i, outcome in enumerate([RELEASED, ACCEPTED, MODIFIED, REJECTED]):
        e = core.settle(f"out{i}")
        assert e.group is g
        results.append(core.copy_settled(g, outcome))
    assert results == [BEST, BEST, 0, BEST | DONE]
    assert g.pending == 0 and g.outcome == REJECTED
    core.group_done(g)
    assert p.in_flight == 0
    assert not core.in_flight


def test_presettled_multicast_drops_only_beyond_capacity_backlog():
    backlog = {"a": 0, "b": 0}
    core = make_core(capacity=10, backlog=backlog.get)
    a = core.add_consumer("a", "conn", "mc")
    b = core.add_consumer("b", "conn", "mc")
    core.consumer_credit(a, 1)
    assert core.fanout(a.address, presettled=True) == [a, b]    # b waits for credit, briefly
    backlog["b"] = 10                                           # b already has capacity waiting
    assert core.fanout(a.address, presettled=True) == [a]
    assert core.fanout(b.address, presettled=False) == [a, b]   # unsettled copies never dropped


def test_consumer_loss_returns_its_in_flight_and_leaves_no_trace():
    core = make_core(capacity=5)
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    other = core.add_consumer("o", "conn", "q")
    core.consumer_credit(c, 10)
    core.consumer_credit(other, 10)
    grants(core)
    for _ in range(3):
        core.arrived(p)                         # three arrivals
    core.sent(p, c, "in1", "out1", False)
    core.sent(p, other, "in2", "out2", False)
    core.sent(p, c, "in3", "out3", False)
    left = core.remove_consumer(c)
    assert sorted(od for od, _ in left) == ["out1", "out3"]
    assert [e.seq for _, e in sorted(left, key=lambda x: x[0])] == [1, 2]  # sequence numbers on that link
    assert p.in_flight == 1
    assert set(core.in_flight) == {"out2"}
    assert c not in c.address.consumers
    assert grants(core)[0] == {"p": 2}


def test_address_entry_removed_when_last_link_goes():
    core = make_core()
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.remove_consumer(c)
    assert "q" in core.addresses
    core.remove_producer(p)
    assert core.addresses == {}
    assert core.snapshot()["in_flight"] == 0


def test_dynamic_addresses_are_unique_and_routable():
    core = make_core()
    name = core.new_dynamic_address()
    c = core.add_consumer("c", "conn", name)
    assert core.lookup(name) is c.address
    assert core.lookup(name.replace("amqp:/", "")) is c.address
    assert core.lookup("amqp:/_topo/0/A/temp.nothere") is None


def test_unsettled_unroutable_counts_released():
    core = make_core()
    p = core.add_producer("p", "conn", None)
    grants(core)
    for _ in range(5):
        core.arrived(p)                         # five arrivals, none routable
    core.unroutable(p, presettled=False)
    core.unroutable(p, presettled=True)
    counters = core.snapshot()["counters"]
    assert counters["released"] == 1 and counters["dropped_presettled"] == 1
    assert grants(core)[0] == {"p": 5}          # the credit comes straight back


def test_credit_is_topped_up_in_batches():
    core = make_core(capacity=16)               # batch: 16 // 8 = 2
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 1000)
    assert grants(core)[0] == {"p": 16}
    core.arrived(p)
    core.sent(p, c, "held", "out-held", False)  # stays in flight: the pipeline is never empty
    seen = []
    for i in range(4):
        core.arrived(p)
        core.sent(p, c, f"in{i}", f"out{i}", False)
        core.settle(f"out{i}")
        seen.append(grants(core)[0])
    assert seen == [{}, {"p": 2}, {}, {"p": 2}]


def test_a_producer_with_nothing_in_flight_gets_what_is_due_at_once():
    # issue 21: a client that sends only when a FLOW wakes it must get one once its pipeline is empty,
    # or a rate-limited stream waits for the client's own timer after its first message
    core = make_core(capacity=16)               # batch 2
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 1000)
    grants(core)
    core.arrived(p)
    core.sent(p, c, "in0", "out0", False)
    assert grants(core)[0] == {}                # in flight: nothing due yet
    core.settle("out0")
    assert grants(core)[0] == {"p": 1}          # settled, nothing left in flight: 1 due, flowed now
    core.arrived(p)
    core.sent(p, c, "in1", "out1", True)        # pre-settled: never in flight
    assert grants(core)[0] == {"p": 1}


def test_credit_is_topped_up_at_half_window():
    core = make_core(capacity=16)               # batch 2, half window 8
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 1000)
    grants(core)
    for i in range(3):                          # three in flight, unsettled
        core.arrived(p)
        core.sent(p, c, f"a{i}", f"oa{i}", False)
    core.settle("oa0")
    assert grants(core)[0] == {}                # 1 due, less than a batch, 13 credit left: wait
    for i in range(6):                          # six more in flight: credit 7, below half
        core.arrived(p)
        core.sent(p, c, f"b{i}", f"ob{i}", False)
    core.settle("oa1")
    assert grants(core)[0] == {"p": 2}          # due 2 (a batch): credit 9
    core.arrived(p)
    core.sent(p, c, "c0", "oc0", False)         # credit 8: half the window
    core.settle("oa2")
    assert grants(core)[0] == {"p": 1}          # only 1 due, but the producer is down to half


def test_watched_address_reports_local_consumer_changes_only_for_watched_keys():
    core = make_core()
    core.watch("q")
    c = core.add_consumer("c", "conn-1", "q")
    core.add_consumer("o", "conn-1", "other")
    assert core.take_watched_changes() == {"q"}
    assert core.take_watched_changes() == set()
    assert core.consumers_of("q") == 1 and core.consumers_of("q", exclude_conn="conn-1") == 0
    core.remove_consumer(c)
    assert core.take_watched_changes() == {"q"}
    assert core.consumers_of("q") == 0
    core.unwatch("q")
    core.add_consumer("c2", "conn-2", "q")
    assert core.take_watched_changes() == set()


# ---- decisions as data: route, send modes, attach, detach ------------------------------------------------
def test_attach_refusals_are_data():
    core = make_core()
    assert core.attach_consumer("c", "conn", None) == Refusal(
        "amqp:invalid-field", "the source address is not valid UTF-8")
    assert core.attach_consumer("c", "conn", "amqp:/") == Refusal(
        "amqp:invalid-field", "a receiving link needs a source address")
    assert core.attach_producer("p", "conn", "x", dynamic=True).condition == "amqp:not-implemented"
    assert core.attach_producer("p", "conn", None).condition == "amqp:invalid-field"
    dyn = core.attach_consumer("d", "conn", None, dynamic=True, at_most_once=True)
    assert dyn.name.startswith("amqp:/_topo/0/A/temp.") and dyn.presettle
    assert core.attach_producer("anon", "conn", "").anonymous


def test_route_decides_one_consumer_hold_many_or_nobody_and_counts():
    core = make_core()
    p = core.add_producer("p", "conn", "q")
    grants(core)
    assert core.route(p, None, False) == (UNROUTABLE, None, None)
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 10)
    a = c.address
    assert core.route(p, a, False) is c         # the common decision: this consumer, now
    assert core.route_stream(p, a, False) == (TO_ONE, c, None)
    c.busy = True                               # a stream is going to it
    assert core.route(p, a, False) == (HOLD, c, None)
    assert core.route_stream(p, a, False) == (UNROUTABLE, None, None)
    assert (a.ingress, a.egress) == (3, 3)      # the unroutable one is not counted
    assert p.credit == -3                       # each complete (non-streamed) arrival used a credit
    m = [core.add_consumer(f"m{i}", "conn", "mc") for i in range(2)]
    kind, targets, _ = core.route(p, m[0].address, False)
    assert (kind, targets) == (TO_MANY, m)
    assert (m[0].address.ingress, m[0].address.egress) == (1, 2)


def test_send_modes_are_one_table():
    core = make_core()
    p = core.add_producer("p", "conn", "q")
    normal = core.add_consumer("n", "conn", "q")
    amo = core.add_consumer("amo", "conn", "q")
    amo.presettle = True
    for c in (normal, amo):
        core.consumer_credit(c, 10)
    assert core.sent(p, normal, "i1", "o1", False) == TRACKED and "o1" in core.in_flight
    assert core.sent(p, amo, "i2", "o2", False) == HANDED_OVER and "o2" not in core.in_flight
    assert core.sent(p, normal, "i3", "o3", True) == PRESETTLED and "o3" not in core.in_flight
    assert core.sent(p, amo, "i4", "o4", True) == PRESETTLED
    assert (p.delivered, p.presettled, p.in_flight) == (4, 3, 1)
    g = core.new_group("i5", p)
    assert core.sent_copy(g, normal, "o5") == TRACKED
    assert core.sent_copy(g, amo, "o6") == HANDED_OVER and g.pending == 2
    assert core.sent_copy(None, amo, "o7") == PRESETTLED


def test_detach_consumer_decides_released_for_unsent_and_modified_for_sent():
    core = make_core()
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 10)
    for i in range(4):
        core.sent(p, c, f"in{i}", f"out{i}", False)
    decided = core.detach_consumer(c, queued=1)     # the last one never reached the wire
    assert [(od, outcome) for od, _, outcome in decided] == [
        ("out0", MODIFIED), ("out1", MODIFIED), ("out2", MODIFIED), ("out3", RELEASED)]


def test_held_deliveries_wait_in_the_core_in_order():
    from router.forwarding.records import Held

    core = make_core()
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    g = core.new_group("gin", p)
    core.hold(c, Held(b"1", "in1", p, False, None, "q"))
    core.hold(c, Held(b"2", "in2", p, False, g, "q"))
    assert g.pending == 1
    assert [h.payload for h in core.take_held(c)] == [b"1", b"2"]
    assert core.take_held(c) == [] and c.held is None


def test_settle_counts_outcomes_for_consumer_and_producer_once():
    core = make_core()
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 10)
    core.sent(p, c, "in", "out", False)
    core.sent(p, c, "in2", "out2", False)
    core.settle("out", REJECTED, upstream=True)
    core.settle("out2", ACCEPTED, upstream=False)   # e.g. a stream: upstream answered later
    assert c.outcomes == [1, 1, 0, 0] and p.outcomes == [0, 1, 0, 0]


def test_local_address_changes_are_taken_by_the_control_plane():
    core = make_core()
    c = core.add_consumer("c", "conn", "svc")
    core.add_consumer("c2", "conn", "svc")
    core.add_consumer("d", "conn", core.new_dynamic_address())     # node-scoped: not mobile
    assert core.take_local_address_changes() == [("svc", True)]
    core.remove_consumer(c)
    assert core.take_local_address_changes() == []
