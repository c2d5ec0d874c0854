"""The state line's table counts (`RouterCore.snapshot`): links that `hidden` hides (the node's own
management client) are left out, and so are addresses only they use."""

import random
from types import SimpleNamespace

from router.addressing import AddressRules
from router.forwarding.core import RouterCore


def by_hand(core, hidden):
    """The counts address by address: what the snapshot must say."""
    addresses = remote = consumers = producers = 0
    for a in core.addresses.values():
        c = sum(1 for x in a.consumers if not hidden(x))
        p = sum(1 for x in a.producers if not hidden(x))
        if c or p or a.remote or (not a.consumers and not a.producers):
            addresses += 1
            remote += bool(a.remote)
            consumers += c
            producers += p
    return {"addresses": addresses, "remote_addresses": remote, "consumers": consumers,
            "producers": producers}


def test_counts_match_an_address_by_address_count_with_hidden_links():
    rng = random.Random(7)
    core = RouterCore("A", AddressRules([], default="balanced"), 10, rng=random.Random(1))
    out = core.add_router_consumer("outB", "connB", "B")
    core.set_routes({"B": (1, out)}, {f"r/{i}": ("B",) for i in range(300)}, 1, dict)
    visible, internal = SimpleNamespace(internal=False), SimpleNamespace(internal=True)
    for i in range(400):
        key = f"r/{i}" if rng.random() < 0.5 else f"l/{i}"
        conn = internal if rng.random() < 0.4 else visible
        if rng.random() < 0.5:
            core.add_consumer(f"c{i}", conn, key)
        else:
            core.add_producer(f"p{i}", conn, key)
    hidden = lambda link: link.conn.internal     # noqa: E731 (as the engine passes it)
    snap = core.snapshot(hidden=hidden)
    expected = by_hand(core, hidden)
    assert {k: snap[k] for k in expected} == expected
    assert expected["addresses"] < len(core.addresses)           # some are used by hidden links only
    assert 0 < expected["remote_addresses"] < expected["addresses"]
    unhidden = core.snapshot()
    assert unhidden["addresses"] == len(core.addresses)
    assert {k: unhidden[k] for k in expected} == by_hand(core, lambda link: False)


def test_counts_stay_right_as_views_change_and_links_come_and_go():
    """The remote count is kept as destinations come and go (not counted by a walk of the table): after
    every step of a random sequence it matches a count address by address."""
    rng = random.Random(11)
    core = RouterCore("A", AddressRules([], default="balanced"), 10, rng=random.Random(1))
    outs = {n: core.add_router_consumer("out" + n, "conn" + n, n) for n in "BCD"}
    holders = {f"r/{i}": tuple(rng.sample("BCD", rng.randint(1, 2))) for i in range(200)}
    holders["_topo/0/B/svc"] = ("B",)           # node-scoped: routed to B itself
    conn = SimpleNamespace(internal=False)
    core.set_routes({n: (1, outs[n]) for n in "BCD"}, holders, 2, dict)
    consumers = [core.add_consumer("scoped", conn, "_topo/0/C/x")]     # routed to C from the start
    producers = []
    for step in range(300):
        roll = rng.random()
        if roll < 0.15:
            view = rng.sample("BCD", rng.randint(0, 3))
            core.set_routes({n: (1, outs[n]) for n in view}, holders, 2, dict, batch=rng.choice([None, 7]))
        elif roll < 0.3 and core.routes_pending:
            core.continue_routes(rng.randint(1, 50))
        elif roll < 0.4:
            key = rng.choice(list(holders))
            holders[key] = tuple(rng.sample("BCD", rng.randint(0, 2)))
            core.update_remote_addresses([key], lambda k: holders[k])
        elif roll < 0.6:
            key = rng.choice([*holders, "l/1", "l/2", "_topo/0/C/x"])
            consumers.append(core.add_consumer(f"c{step}", conn, key))
        elif roll < 0.7 and consumers:
            core.remove_consumer(consumers.pop(rng.randrange(len(consumers))))
        elif roll < 0.85:
            producers.append(core.add_producer(f"p{step}", conn, rng.choice([*holders, "l/3"])))
        elif producers:
            core.remove_producer(producers.pop(rng.randrange(len(producers))))
        assert core.remote_count == sum(1 for a in core.addresses.values() if a.remote), step
        expected = by_hand(core, lambda link: False)
        assert {k: core.snapshot()[k] for k in expected} == expected, step
