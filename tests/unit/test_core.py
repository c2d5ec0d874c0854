"""The forwarding core on its own: distribution, credit ledger, settlement tracking, link loss."""

import random

from router.addressing import AddressRules
from router.forwarding.core import ACCEPTED, MODIFIED, REJECTED, RELEASED, RouterCore


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
        p.credit -= 1                           # the adapter counts each arrival
        assert core.pick(c.address) is c
        core.sent(p, c, f"in{i}", f"out{i}")
    assert p.in_flight == 3
    assert grants(core)[0] == {}                # capacity in flight: no credit
    e = core.settle("out1")
    assert e[:3] == ("in1", p, c)
    assert grants(core)[0] == {"p": 1}
    assert p.in_flight == 2 and c.unsettled == 2


def test_presettled_returns_credit_immediately():
    core = make_core(capacity=2)
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 10)
    grants(core)
    p.credit -= 1
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
    p.credit -= 1
    core.sent(p, c, "in", "out")                # uses the consumer's last credit
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
        assert e[3] is g
        results.append(core.copy_outcome(g, outcome))
    assert results == [True, True, False, True]
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
    p.credit -= 3                               # three arrivals
    core.sent(p, c, "in1", "out1")
    core.sent(p, other, "in2", "out2")
    core.sent(p, c, "in3", "out3")
    left = core.remove_consumer(c)
    assert sorted(od for od, _ in left) == ["out1", "out3"]
    assert [e[4] for _, e in sorted(left)] == [1, 2]       # sequence numbers on that link
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
    p.credit -= 5                               # five arrivals, none routable
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
    seen = []
    for i in range(4):
        p.credit -= 1
        core.sent(p, c, f"in{i}", f"out{i}")
        core.settle(f"out{i}")
        seen.append(grants(core)[0])
    assert seen == [{}, {"p": 2}, {}, {"p": 2}]


def test_credit_is_topped_up_at_half_window():
    core = make_core(capacity=16)               # batch 2, half window 8
    p = core.add_producer("p", "conn", "q")
    c = core.add_consumer("c", "conn", "q")
    core.consumer_credit(c, 1000)
    grants(core)
    for i in range(3):                          # three in flight, unsettled
        p.credit -= 1
        core.sent(p, c, f"a{i}", f"oa{i}")
    core.settle("oa0")
    assert grants(core)[0] == {}                # 1 due, less than a batch, 13 credit left: wait
    for i in range(6):                          # six more in flight: credit 7, below half
        p.credit -= 1
        core.sent(p, c, f"b{i}", f"ob{i}")
    core.settle("oa1")
    assert grants(core)[0] == {"p": 2}          # due 2 (a batch): credit 9
    p.credit -= 1
    core.sent(p, c, "c0", "oc0")                # credit 8: half the window
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
