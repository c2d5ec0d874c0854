"""A new view of the mesh rescans the address table in batches (`set_routes(..., batch)` and
`continue_routes`): at 20,000 addresses a rescan in one go held a node's other traffic for 30-50 ms of CPU
(issue 33, the restart of a busy node). The batches end where one full rescan would; addresses with local
producers go first; a view that comes while a rescan is unfinished takes the rest of it first."""

import random

from router.addressing import AddressRules
from router.forwarding.core import RouterCore
from router.forwarding.table import AddressTable, RouteRescan


def make_core():
    rules = AddressRules([("mc", "multicast")], default="balanced")
    core = RouterCore("B", rules, 8, rng=random.Random(1))
    outs = {n: core.add_router_consumer("out" + n, "conn" + n, n) for n in "ACD"}
    for c in outs.values():
        core.consumer_credit(c, 100)
    return core, outs


def view(outs, nodes, cost=1):
    return {n: (cost, outs[n]) for n in nodes}


def routes(core):
    return {k: [(d.node, d.cost) for d in a.remote] for k, a in core.addresses.items() if a.remote}


HOLDERS = {**{f"x/{i}": ("A",) for i in range(50)}, **{f"y/{i}": ("D", "A") for i in range(30)}}


def test_batches_end_where_one_full_rescan_ends():
    batched, outs_b = make_core()
    whole, outs_w = make_core()
    for nodes, cost in (("ACD", 1), ("CD", 1), ("ACD", 2)):
        whole.set_routes(view(outs_w, nodes, cost), HOLDERS, 2, dict)
        assert not whole.routes_pending
        batched.set_routes(view(outs_b, nodes, cost), HOLDERS, 2, dict, batch=7)
        turns = 0
        while batched.routes_pending:
            batched.continue_routes(7)
            turns += 1
        assert turns >= 80 // 7 - 1
        assert routes(batched) == routes(whole)
    assert set(batched.addresses) == set(whole.addresses)


def test_until_its_turn_an_address_keeps_its_old_destinations():
    core, outs = make_core()
    core.set_routes(view(outs, "ACD"), HOLDERS, 2, dict)
    assert len(routes(core)) == 80
    core.set_routes(view(outs, "CD"), HOLDERS, 2, dict, batch=10)     # A is gone
    assert core.routes_pending
    only_a = [k for k, r in routes(core).items() if [n for n, _ in r] == ["A"]]
    assert 0 < len(only_a) < 50          # some rescanned (and forgotten), the others not yet
    while core.routes_pending:
        core.continue_routes(10)
    assert all(r == [("D", 1)] for r in routes(core).values()) and len(routes(core)) == 30


def test_addresses_with_local_producers_go_first():
    core, outs = make_core()
    core.set_routes(view(outs, "ACD"), HOLDERS, 2, dict)
    p = core.add_producer("p", "conn", "x/49")
    granted, _ = core.take_credit_actions()
    assert [q for q, _ in granted] == [p]
    core.set_routes(view(outs, "CD"), HOLDERS, 2, dict, batch=1)
    assert core.addresses["x/49"].remote == []          # rescanned in the first batch: drained
    _, drained = core.take_credit_actions()
    assert p in drained
    assert core.addresses["x/48"].remote                # not yet


def test_a_view_during_an_unfinished_rescan_takes_its_rest_first():
    core, outs = make_core()
    core.set_routes(view(outs, "ACD"), HOLDERS, 2, dict)
    core.set_routes(view(outs, "CD"), HOLDERS, 2, dict, batch=10)
    left = core._rescan.rest()
    assert left
    core.set_routes(view(outs, "CD", 3), HOLDERS, 2, dict, batch=len(left))
    for key in left:                    # all rescanned in the new view's first batch
        a = core.addresses.get(key)
        assert a is None or all(d.node != "A" for d in a.remote)


def test_new_holders_keys_come_after_the_table_and_are_created():
    core, outs = make_core()
    core.set_routes(view(outs, "ACD"), {}, 2, dict)
    assert not core.addresses
    core.set_routes(view(outs, "ACD"), HOLDERS, 2, dict, batch=1)
    while core.routes_pending:
        core.continue_routes(1)
    assert len(routes(core)) == 80


def test_no_step_looks_at_more_than_its_share_of_the_holders_keys():
    """The holders' keys the table already had are sifted out step by step: listing them all at the turn
    from the table's keys to the holders' was one 4-6 ms step at 20,000 addresses."""
    had = {f"x/{i}": object() for i in range(1000)}
    holders = {**{k: ("A",) for k in had}, "new/1": ("A",)}
    rescan = RouteRescan([], had, holders)
    looked, taken = [], []
    while not rescan.done:
        keys, n = rescan.take(50)
        looked.append(n)
        taken += keys
    assert max(looked) == 50 and min(looked) > 0
    assert taken == list(had) + ["new/1"]     # the table's keys, then only the holders' new one


def test_the_table_is_not_scanned_for_producers():
    """Addresses with local producers are found from the producers (RouterCore keeps them), not by a scan
    of the whole table at every new view."""
    core, outs = make_core()
    core.set_routes(view(outs, "ACD"), HOLDERS, 2, dict)
    core.add_producer("p1", "conn", "x/3")
    core.add_producer("p2", "conn", "x/3")
    core.add_producer("p3", "conn", "y/7")
    core.add_producer("anon", "conn", None)
    assert sorted(core._produced_keys()) == ["x/3", "y/7"]
    assert sorted(core._produced_keys()) == sorted(AddressTable._produced_keys(core))
