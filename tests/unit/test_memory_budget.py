"""The node-wide memory budget (router.forwarding.budget) driving the forwarding core's credit decisions."""

import random

from router.addressing import AddressRules
from router.forwarding.budget import (
    DEFAULT_CAP,
    DEFAULT_FLOOR,
    MIN_CONN_HIGH,
    MemoryBudget,
    default_limit,
)
from router.forwarding.core import RouterCore

MiB = 1024 * 1024


def make_core(limit=64 * MiB, capacity=64):
    rules = AddressRules([("mc", "multicast")], default="balanced")
    core = RouterCore("A", rules, capacity, rng=random.Random(1))
    budget = core.ledger.budget = MemoryBudget(limit)
    budget.size_of = lambda conn: 1024               # the adapter's estimate: RPC-sized deliveries
    return core, budget


def grants(core):
    g, _d = core.take_credit_actions()
    return {p.handle: n for p, n in g}


def flood(core, p, c, n):
    """`n` pre-settled deliveries from `p` to `c` (credit comes back at once)."""
    for _ in range(n):
        core.arrived(p)
        core.sent_presettled(p, (c,))


def test_default_limit_is_a_quarter_of_memory_within_floor_and_cap():
    assert default_limit(None) == DEFAULT_FLOOR
    assert default_limit(512 * MiB) == DEFAULT_FLOOR
    assert default_limit(4096 * MiB) == 1024 * MiB
    assert default_limit(64 * 1024 * MiB) == DEFAULT_CAP


def test_producer_of_a_slow_consumer_waits_and_resumes_when_it_drains():
    core, budget = make_core()
    p = core.add_producer("p", "prod-conn", "q")
    c = core.add_consumer("c", "slow", "q")
    core.consumer_credit(c, 10_000)
    assert grants(core) == {"p": 64}
    budget.report("slow", budget.conn_high)          # its socket is full: bytes wait in the node
    flood(core, p, c, 64)
    assert grants(core) == {}                        # held: no credit, nothing dropped
    assert budget.snapshot()["held_producers"] == 1
    budget.report("slow", budget.conn_low + 1)       # draining, not yet down to half
    assert grants(core) == {}
    budget.report("slow", budget.conn_low)
    assert grants(core) == {"p": 64}                 # released without anything else happening


def test_other_addresses_keep_their_credit_over_the_limit():
    core, budget = make_core(limit=16 * MiB)
    slow_p = core.add_producer("slow-p", "pc1", "slow-q")
    fast_p = core.add_producer("fast-p", "pc2", "canary")
    slow_c = core.add_consumer("slow-c", "slow", "slow-q")
    fast_c = core.add_consumer("fast-c", "fast", "canary")
    core.consumer_credit(slow_c, 10_000)
    core.consumer_credit(fast_c, 10_000)
    grants(core)
    budget.report("slow", 17 * MiB)                  # over the whole budget
    assert budget.over
    flood(core, slow_p, slow_c, 64)
    flood(core, fast_p, fast_c, 64)
    g = grants(core)
    assert "slow-p" not in g
    assert g["fast-p"] == 64                         # the canary goes on


def test_over_the_limit_busy_anonymous_and_peer_producers_wait_until_three_quarters():
    core, budget = make_core(limit=16 * MiB)
    busy_c = core.add_consumer("busy-c", "busy", "q-busy")
    fast_c = core.add_consumer("fast-c", "fast", "q-fast")
    core.consumer_credit(busy_c, 1000)
    core.consumer_credit(fast_c, 1000)
    to_busy = core.add_producer("to-busy", "pc1", None)
    to_fast = core.add_producer("to-fast", "pc2", None)
    peer = core.add_router_producer("peer", "rc", "B")
    grants(core)
    for _ in range(64):                              # each uses its whole window
        core.route(to_busy, core.addresses["q-busy"], True)
        core.route(to_fast, core.addresses["q-fast"], True)
    budget.report("busy", 48 * 1024)                 # not slow on its own (64 KiB), but not draining
    budget.report("y", 16 * MiB)                     # the total at the limit
    core.ledger.grant.update((to_busy, to_fast, peer))
    assert grants(core) == {"to-fast": 64}           # its last deliveries went to a consumer that drains
    budget.report("y", 13 * MiB)                     # still over three quarters
    assert grants(core) == {}
    budget.report("y", 12 * MiB - 48 * 1024)         # 12 MiB: released
    assert grants(core) == {"to-busy": 64}           # the peer's link still had its whole window
    assert not budget.over


def test_over_the_limit_a_stalled_consumer_is_busy_whatever_its_connection_holds():
    """A consumer busy with a stream (or behind a full socket) is busy even while the kernel has just
    taken its output (its connection holds nothing): a new producer of its address waits."""
    core, budget = make_core(limit=16 * MiB)
    stalled_conns = {"stalled"}
    budget.stalled = lambda c: c.conn in stalled_conns
    stalled_c = core.add_consumer("stalled-c", "stalled", "q-big")
    fast_c = core.add_consumer("fast-c", "fast", "q-fast")
    core.consumer_credit(stalled_c, 1000)
    core.consumer_credit(fast_c, 1000)
    budget.report("y", 16 * MiB)                     # over the limit; the consumers hold nothing
    core.add_producer("to-big", "pc1", "q-big")
    core.add_producer("to-fast", "pc2", "q-fast")
    assert grants(core) == {"to-fast": 64}
    stalled_conns.clear()                            # the consumer reads again: released once under 3/4
    budget.report("y", 12 * MiB)
    assert grants(core) == {"to-big": 64}


def test_the_nodes_own_clients_are_never_held():
    core, budget = make_core()
    budget.exempt = lambda p: p.conn == "internal"
    p = core.add_producer("agent", "internal", "q")
    c = core.add_consumer("c", "slow", "q")
    core.consumer_credit(c, 1000)
    grants(core)
    budget.report("slow", budget.conn_high)
    flood(core, p, c, 64)
    assert grants(core) == {"agent": 64}


def test_multicast_waits_for_its_slowest_consumer():
    core, budget = make_core()
    p = core.add_producer("p", "pc", "mc/t")
    for i, conn in enumerate(("fast", "slow")):
        c = core.add_consumer(f"c{i}", conn, "mc/t")
        core.consumer_credit(c, 1000)
    grants(core)
    budget.report("slow", budget.conn_high)
    core.arrived(p)
    core.sent_presettled(p, tuple(core.addresses["mc/t"].consumers))
    assert grants(core) == {}


def test_anycast_with_one_fast_consumer_is_not_held():
    core, budget = make_core()
    p = core.add_producer("p", "pc", "q")
    for i, conn in enumerate(("fast", "slow")):
        core.consumer_credit(core.add_consumer(f"c{i}", conn, "q"), 1000)
    grants(core)
    budget.report("slow", 10 * budget.conn_high)
    flood(core, p, core.addresses["q"].consumers[0], 64)
    assert grants(core) == {"p": 64}                 # the fast consumer takes its deliveries


def test_a_slow_connection_that_goes_releases_its_producers():
    core, budget = make_core()
    p = core.add_producer("p", "pc", "q")
    c = core.add_consumer("c", "slow", "q")
    core.consumer_credit(c, 1000)
    grants(core)
    budget.report("slow", budget.conn_high)
    flood(core, p, c, 64)
    assert grants(core) == {}
    budget.forget("slow")                            # the consumer's connection closed
    assert budget.total == 0
    core.remove_consumer(c)
    c2 = core.add_consumer("c2", "other", "q")
    core.consumer_credit(c2, 1000)
    assert grants(core) == {"p": 64}


def test_a_held_producer_that_detaches_is_forgotten():
    core, budget = make_core()
    p = core.add_producer("p", "pc", "q")
    c = core.add_consumer("c", "slow", "q")
    core.consumer_credit(c, 1000)
    grants(core)
    budget.report("slow", budget.conn_high)
    flood(core, p, c, 64)
    grants(core)
    core.remove_producer(p)
    assert budget.snapshot()["held_producers"] == 0
    budget.report("slow", 0)
    assert grants(core) == {}


def test_connection_threshold_follows_the_limit():
    assert MemoryBudget(16 * MiB).conn_high == MIN_CONN_HIGH
    assert MemoryBudget(1024 * MiB).conn_high == 4 * MiB
    b = MemoryBudget(16 * MiB)
    b.report("a", 3 * MiB)
    b.report("b", 6 * MiB)
    b.report("a", 1 * MiB)
    assert (b.total, b.peak) == (7 * MiB, 9 * MiB)


def test_credit_is_sized_in_bytes_and_shrinks_from_half_the_limit():
    core, budget = make_core(limit=16 * MiB, capacity=250)
    budget.size_of = lambda conn: 16 * 1024          # the adapter's estimate: 16 KiB per delivery
    ps = [core.add_producer(f"p{i}", f"pc{i}", f"q{i}") for i in range(8)]
    for i in range(8):
        core.consumer_credit(core.add_consumer(f"c{i}", f"cc{i}", f"q{i}"), 1000)
    # half the limit shared by 8 producers: 1 MiB each, 64 deliveries of 16 KiB (not the 250 of the link)
    assert grants(core) == {f"p{i}": 64 for i in range(8)}
    budget.report("elsewhere", 8 * MiB)              # half the limit is buffered: an eighth of that
    for p in ps:
        for _ in range(64):
            core.arrived(p)
        core.sent_presettled(p, (core.addresses[p.address.key].consumers[0],))
    assert grants(core) == {f"p{i}": 8 for i in range(8)}
    budget.size_of = lambda conn: 4 * 1024 * 1024    # one delivery is more than its share: still one
    budget.report("elsewhere", 0)
    for p in ps:
        for _ in range(8):
            core.arrived(p)
        core.ledger.grant.add(p)
    assert grants(core) == {f"p{i}": 1 for i in range(8)}


def test_anycast_with_every_consumer_slow_resumes_when_any_of_them_drains():
    core, budget = make_core()
    p = core.add_producer("p", "pc", "q")
    for i, conn in enumerate(("slow1", "slow2")):
        core.consumer_credit(core.add_consumer(f"c{i}", conn, "q"), 1000)
    grants(core)
    budget.report("slow1", budget.conn_high)
    budget.report("slow2", budget.conn_high)
    flood(core, p, core.addresses["q"].consumers[0], 64)
    assert grants(core) == {}
    budget.report("slow1", 0)                        # the other one may stay stuck for ever
    assert grants(core) == {"p": 64}


def test_a_connection_that_sent_nothing_yet_gets_a_frame_per_credit():
    # 200 producers that just attached (their connection's delivery size is not known yet) share half of
    # 16 MiB: 40 KiB each, 2 deliveries of a frame (16 KiB), not the 250 of the link: 250 x 4 KiB each
    # would have been 200 MB buffered at slow consumers, whatever the budget
    core, budget = make_core(limit=16 * MiB, capacity=250)
    budget.size_of = lambda conn: 0
    for i in range(200):
        core.add_producer(f"p{i}", "producers", f"q{i}")
        core.consumer_credit(core.add_consumer(f"c{i}", "consumers", f"q{i}"), 1000)
    assert set(grants(core).values()) == {2}
