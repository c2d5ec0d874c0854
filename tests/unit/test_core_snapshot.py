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
