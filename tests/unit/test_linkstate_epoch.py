"""The origins epoch moves when any node's link state changes, not only this node's paths.

The adapter refreshes the forwarding core's valid origins (for multicast) when that epoch moved, and gives
it a whole new view only when the routes epoch did. A link between two other nodes that comes back leaves
this node's next hops as they were, but changes which origins' trees pass through it: with a stale view a
transit node kept forwarding a restarted node's peer's multicast copies toward it, beside the peer's own
direct copy (every copy arrived twice; found by benchmarks/soak_cycle.py).
"""

from __future__ import annotations

from tests.support.linkstate_sim import SimNetwork


def _full_mesh() -> SimNetwork:
    net = SimNetwork()
    for name in "ABCD":
        net.add_node(name)
    for a, b in ("AB", "AC", "AD", "BC", "BD", "CD"):
        net.connect(a, b)
    return net


def _settle(net: SimNetwork) -> None:
    """Every engine knows every link, and has recomputed its paths since (recomputes are debounced)."""
    net.run_until(lambda: _converged(net), 30)
    net.run_until(lambda: not any(e.in_flux(net.now) for e in net.engines.values()), 30)
    net.run(2.0)


def _converged(net: SimNetwork) -> bool:
    want = {frozenset(pair) for pair in net.edges}
    for engine in net.engines.values():
        seen = {frozenset((node, peer)) for node in "ABCD" for peer in (engine.link_state(node) or {})}
        if seen != want or set(engine.next_hops) != set("ABCD") - {engine.node_id}:
            return False
    return True


def test_a_link_between_two_other_nodes_moves_the_epoch_and_the_valid_origins():
    net = _full_mesh()
    _settle(net)
    b = net.engines["B"]
    assert "D" not in b.valid_origins.get("A", ())     # D reaches A directly

    net.disconnect("A", "D")
    _settle(net)
    hops, routes, epoch = dict(b.next_hops), b.routes_epoch, b.origins_epoch
    transits = [n for n in "BC" if "D" in net.engines[n].valid_origins.get("A", ())]
    assert len(transits) == 1                          # D's tree reaches A through B or through C

    net.connect("A", "D")
    _settle(net)
    assert dict(b.next_hops) == hops and b.routes_epoch == routes   # B's own paths did not change...
    assert b.origins_epoch != epoch                    # ...but the core's valid origins must
    for name in "BC":
        assert "D" not in net.engines[name].valid_origins.get("A", ())


def test_nothing_changed_leaves_the_epoch_alone():
    net = _full_mesh()
    _settle(net)
    epochs = {name: (e.routes_epoch, e.origins_epoch) for name, e in net.engines.items()}
    net.run(5.0)                                       # HELLOs and refreshes only
    assert {name: (e.routes_epoch, e.origins_epoch) for name, e in net.engines.items()} == epochs
