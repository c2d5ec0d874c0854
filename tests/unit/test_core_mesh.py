"""The forwarding core with remote destinations: readiness, closest/balanced choice, multicast fan-out,
credit for peers' data links, node-scoped routes, hop limit."""

import random

from router.addressing import AddressRules
from router.amqp.annotations import RouterAnnotations
from router.forwarding.core import RouterCore
from router.forwarding.decisions import PRESETTLED, TO_ONE, TRACKED, UNROUTABLE
from router.forwarding.records import RemoteDest


def make_core(capacity=8):
    rules = AddressRules([("mc", "multicast"), ("near", "closest")], default="balanced")
    return RouterCore("A", rules, capacity, rng=random.Random(1))


def grants(core):
    g, d = core.take_credit_actions()
    return {p.handle: n for p, n in g}, {p.handle for p in d}


def mesh(core, holders, costs=None, origins=None):
    """Peers B and C are neighbours (links outB / outC); D is behind C. `holders`: address -> nodes."""
    outs = getattr(core, "_test_outs", None)
    if outs is None:
        outs = core._test_outs = {p: core.add_router_consumer("out" + p, "conn" + p, p) for p in "BC"}
        for c in outs.values():
            core.consumer_credit(c, 100)
    costs = costs or {"B": 1, "C": 1, "D": 2}
    nodes = {n: (cost, outs["C" if n == "D" else n]) for n, cost in costs.items()}
    core.set_routes(nodes, holders, radius=2, valid_origins=lambda: origins or {})
    return outs


def test_remote_consumer_makes_address_ready_and_its_loss_drains():
    core = make_core()
    p = core.add_producer("p", "conn", "svc")
    assert grants(core) == ({}, set())
    mesh(core, {"svc": ["B"]})
    assert grants(core) == ({"p": 8}, set())
    mesh(core, {})
    assert grants(core) == ({}, {"p"})
    assert p.draining


def test_unreachable_holder_is_not_a_destination():
    core = make_core()
    core.add_producer("p", "conn", "svc")
    mesh(core, {"svc": ["Z"]})                      # Z is known to have it but not reachable
    assert grants(core) == ({}, set())
    assert core.addresses["svc"].remote == []


def test_remote_only_address_is_forgotten_when_its_holders_go():
    core = make_core()
    mesh(core, {"svc": ["B"]})
    assert "svc" in core.addresses
    mesh(core, {})
    assert "svc" not in core.addresses


def test_closest_prefers_local_consumer_with_credit_then_cheapest_remote():
    core = make_core()
    mesh(core, {"near/x": ["B", "D"]})
    a = core.addresses["near/x"]
    assert [d.node for d in a.remote] == ["B", "D"]
    c, rd = core.pick_mesh(a)
    assert (c.peer, rd.node) == ("B", "B")
    local = core.add_consumer("loc", "conn", "near/x")
    core.consumer_credit(local, 1)
    assert core.pick_mesh(a) == (local, None)
    core.consumer_credit(local, 0)                  # no credit: the remote destination wins
    c, rd = core.pick_mesh(a)
    assert rd.node == "B"


def test_closest_round_robins_remote_ties_and_never_sends_back():
    core = make_core()
    mesh(core, {"near/x": ["B", "C"]})
    a = core.addresses["near/x"]
    picked = [core.pick_mesh(a)[1].node for _ in range(4)]
    assert sorted(picked) == ["B", "B", "C", "C"]
    assert {core.pick_mesh(a, came_from="B")[1].node for _ in range(4)} == {"C"}


def test_delivery_from_a_peer_stays_local_when_a_local_consumer_has_credit():
    core = make_core()
    mesh(core, {"svc": ["B"]})
    a = core.addresses["svc"]
    local = core.add_consumer("loc", "conn", "svc")
    core.consumer_credit(local, 5)
    assert all(core.pick_mesh(a, came_from="C") == (local, None) for _ in range(5))


def test_balanced_sequential_calls_reach_every_server():
    """All scores 0: the rotating start gives each destination (local, near, far) a turn."""
    core = make_core()
    mesh(core, {"svc": ["B", "D"]})
    a = core.addresses["svc"]
    local = core.add_consumer("loc", "conn", "svc")
    core.consumer_credit(local, 100)
    seen = []
    for i in range(6):
        c, rd = core.pick_mesh(a)
        seen.append(rd.node if rd else "A")
        p = core.add_producer(f"p{i}", "conn", None)
        core.sent(p, c, f"in{i}", f"out{i}", False, rd)
        core.settle(f"out{i}")                       # strictly sequential: settled before the next
    assert sorted(seen) == ["A", "A", "B", "B", "D", "D"]


def test_balanced_under_load_gives_farther_destinations_less():
    """Two deliveries per tick; a delivery settles after 2 ticks at B (cost 1), 6 at D (cost 2)."""
    core = make_core()
    mesh(core, {"svc": ["B", "D"]})
    a = core.addresses["svc"]
    p = core.add_producer("p", "conn", "svc")
    latency = {"B": 2, "D": 6}
    due: list[tuple[int, str]] = []
    counts = {"B": 0, "D": 0}
    for tick in range(100):
        for od in [od for t, od in due if t <= tick]:
            core.settle(od)
        due = [(t, od) for t, od in due if t > tick]
        for k in range(2):
            c, rd = core.pick_mesh(a)
            od = f"out{tick}.{k}"
            core.sent(p, c, "in", od, False, rd)
            counts[rd.node] += 1
            due.append((tick + latency[rd.node], od))
    assert counts["B"] > 1.5 * counts["D"] and counts["D"] > 20, counts
    for _, od in due:
        core.settle(od)
    assert [d.unsettled for d in a.remote] == [0, 0]


def test_multicast_one_copy_per_next_hop_by_valid_origins_and_trace():
    core = make_core()
    outs = mesh(core, {"mc/news": ["B", "C", "D"]}, origins={"B": frozenset(), "C": frozenset({"B"}),
                                                             "D": frozenset({"B"})})
    a = core.addresses["mc/news"]
    local = core.add_consumer("loc", "conn", "mc/news")
    # from a local client: every local consumer and each next-hop link once (C carries C and D)
    assert core.mesh_fanout(a, False, origin=None) == [local, outs["B"], outs["C"]]
    # entered at B: forward toward C and D only (B's tree passes here), never back to B
    assert core.mesh_fanout(a, False, origin="B", trace=["B"], came_from="B") == [local, outs["C"]]
    # entered at C: this node is on no tree path from C to anyone -> local only
    assert core.mesh_fanout(a, False, origin="C", trace=["C"], came_from="C") == [local]
    # a peer already in the trace never gets another copy
    assert core.mesh_fanout(a, False, origin="B", trace=["B", "C"], came_from="B") == [local]


def test_node_scoped_address_routes_to_that_node_without_advertisement():
    core = make_core()
    mesh(core, {})
    a = core.lookup("amqp:/_topo/0/D/temp.abc")
    assert a is not None and [d.node for d in a.remote] == ["D"]
    assert core.lookup("_topo/0/Z/temp.abc") is None           # unknown node
    assert core.lookup("_topo/0/A/temp.abc") is None           # our own, not attached
    p = core.add_producer("p", "conn", "_topo/0/B/reply")        # a targeted producer gets credit
    assert p.address.ready and grants(core)[0] == {"p": 8}


def test_peer_data_link_window_is_replenished_at_forward_time():
    core = make_core(capacity=8)
    p = core.add_router_producer("in", "conn", "B")
    assert grants(core)[0] == {"in": 8}
    local = core.add_consumer("loc", "conn", "svc")
    core.consumer_credit(local, 100)
    a = local.address
    for i in range(8):
        assert core.route_mesh(p, a, False, "B", RouterAnnotations()) == (TO_ONE, local, None)
        core.sent(p, local, f"in{i}", f"out{i}", False)
    assert p.in_flight == 8
    assert grants(core)[0] == {"in": 8}              # nothing settled, the window is back anyway


def test_losing_a_data_link_leaves_its_deliveries_to_the_adapter_and_counts_clean():
    core = make_core()
    outs = mesh(core, {"svc": ["B"]})
    a = core.addresses["svc"]
    p = core.add_producer("p", "conn", "svc")
    c, rd = core.pick_mesh(a)
    core.sent(p, c, "in1", "out1", False, rd)
    left = core.remove_consumer(outs["B"])
    assert [od for od, _ in left] == ["out1"] and rd.unsettled == 0 and p.in_flight == 0
    assert "svc" in core.addresses                    # the routes, not the link, decide the address


def test_hop_limit():
    core = make_core()
    mesh(core, {"svc": ["B"]})
    p = core.add_router_producer("in", "connB", "B")
    a = core.addresses["svc"]
    assert core.route_mesh(p, a, False, "C", RouterAnnotations(trace=["0/C", "0/D", "0/E"]))[0] == TO_ONE
    assert core.route_mesh(p, a, False, "C", RouterAnnotations(trace=["0/C", "0/D", "0/E", "0/F"])) == (
        UNROUTABLE, None, None)                       # radius 2: at most 3 nodes in the trace
    assert core.counters["hop_limit"] == 1


def _view(core):
    """The core's remote view: address -> (remote nodes, ready)."""
    return {k: ([d.node for d in a.remote], a.ready) for k, a in core.addresses.items()}


def test_incremental_address_updates_match_a_full_rescan():
    """`update_remote_addresses` (O(changed)) leaves the table as `set_routes` with the new holders would,
    credit and drains included."""
    steps = [
        {"svc/1": ["B"], "svc/2": ["D"], "near/x": ["B", "D"], "mc/y": ["B", "C"]},
        {"svc/1": ["B", "C"], "near/x": ["D"], "mc/y": ["C"], "svc/3": ["Z"]},     # svc/2 gone, Z unreachable
        {"svc/3": ["C"], "mc/y": []},
    ]
    full, incremental = make_core(), make_core()
    for core in (full, incremental):
        core.add_producer("p2", "conn", "svc/2")
        mesh(core, {})
    previous: dict = {}
    for holders in steps:
        mesh(full, holders)
        changed = set(holders) | set(previous)
        incremental.update_remote_addresses(changed, lambda k, h=holders: h.get(k, ()))
        assert _view(incremental) == _view(full)
        assert grants(incremental) == grants(full)
        previous = holders


def _ingress_case(seed):
    """A core, a client producer and an address served elsewhere, in a state drawn from `seed`."""
    rnd = random.Random(seed)
    core = make_core()
    key = rnd.choice(["svc", "near/x"])                 # balanced, closest
    holders = rnd.choice([["B"], ["C"], ["D"], ["B", "C"], ["B", "D"], ["C", "D"], ["B", "C", "D"]])
    outs = mesh(core, {key: holders}, costs={"B": rnd.choice([1, 2]), "C": 1, "D": 2})
    for c in outs.values():
        c.alive = rnd.random() < 0.8
        c.busy = rnd.random() < 0.3
    for i in range(rnd.choice([0, 0, 1, 2])):
        local = core.add_consumer(f"loc{i}", "conn", key)
        core.consumer_credit(local, rnd.choice([0, 1, 5]))
        local.busy = rnd.random() < 0.3
    a = core.addresses[key]
    a.rr = rnd.randrange(5)
    for d in a.remote:
        d.unsettled = rnd.choice([0, 0, 3])
    p = core.add_producer("p", "conn", key)
    p.credit = 8
    return core, a, p


def _routing_state(core, a, p, routed):
    kind, c, rd = (TO_ONE, routed.out, routed) if isinstance(routed, RemoteDest) else routed
    c = c if c is None or isinstance(c, list) else (c.handle, c.peer)
    return (kind, c, rd and rd.node, a.rr, a.ingress, a.egress, a.transit, p.credit, dict(core.counters))


def test_route_ingress_agrees_with_route_mesh():
    fast = 0
    for seed in range(400):
        core, a, p = _ingress_case(seed)
        twin, ta, tp = _ingress_case(seed)
        for _ in range(3):                              # the cursor and counters carry over
            got = core.route_ingress(p, a, False)
            want = twin.route_mesh(tp, ta, False)
            assert _routing_state(core, a, p, got) == _routing_state(twin, ta, tp, want), seed
        fast += len(a.remote) == 1 and not a.consumers and a.remote[0].out.alive
    assert fast > 40                                    # the inline case was taken often enough


def _peer_case(seed):
    """A core with a peer's data-in link and addresses in a state drawn from `seed`; a delivery's key,
    the peer it came from and the nodes it crossed."""
    rnd = random.Random(seed)
    core = make_core()
    choices = [[], ["B"], ["C"], ["D"], ["B", "C"], ["C", "D"]]
    holders = {k: rnd.choice(choices) for k in ("svc", "near/x", "mc/x")}
    outs = mesh(core, holders, costs={"B": rnd.choice([1, 2]), "C": 1, "D": 2})
    for c in outs.values():
        c.alive = rnd.random() < 0.8
        c.busy = rnd.random() < 0.2
    for key in ("svc", "near/x", "mc/x"):
        for i in range(rnd.choice([0, 0, 1, 2])):
            local = core.add_consumer(f"{key}-loc{i}", "conn", key)
            core.consumer_credit(local, rnd.choice([0, 1, 5]))
            local.busy = rnd.random() < 0.2
    p = core.add_router_producer("in", "connB", rnd.choice("BC"))
    p.credit = 8
    key = rnd.choice(["svc", "near/x", "mc/x", "unknown", "_topo/0/D/temp", "_topo/0/A/temp"])
    return core, p, key, p.name[len("_router/"):], rnd.choice([1, 2, 3, 4])


def _after(core, p, routed):
    counts = {k: (a.ingress, a.egress, a.transit, a.rr) for k, a in core.addresses.items()}
    return routed, p.credit, p in core._grant, counts, dict(core.counters)


def test_route_from_peer_agrees_with_route_mesh():
    taken = set()
    for seed in range(600):
        core, p, key, came_from, hops = _peer_case(seed)
        twin, tp, _, _, _ = _peer_case(seed)
        core._grant.clear()
        twin._grant.clear()
        got = core.route_from_peer(p, key, hops)         # from p.peer (came_from)
        a = twin.resolve(key)
        if a is not None and a.multicast:
            assert got is None and _after(core, p, None) == _after(twin, tp, None), seed
            continue
        kind, c, rd = twin.route_mesh(tp, a, False, came_from, RouterAnnotations(trace=["0/X"] * hops))
        want = (c, rd) if kind else (None, None)
        names = lambda r: (r[0] and (r[0].handle, r[0].peer), r[1] and r[1].node)  # noqa: E731
        assert names(got) == names(want), seed
        assert _after(core, p, None)[1:] == _after(twin, tp, None)[1:], seed
        taken.add((got[0] is not None and got[0].peer is None, got[1] is not None))
    assert taken == {(True, False), (False, True), (False, False)}   # egress, transit, nowhere


def _sent_state(core, p, e_or_none):
    """What a delivery's routing and `sent` left: its entry's fields, the counters of its producer,
    consumer, destination and address, the credit to grant."""
    entry = None
    if e_or_none is not None:
        e = e_or_none
        entry = (e.in_dlv, e.consumer.handle, e.dest and e.dest.node, e.seq, e.group, e.producer is p)
    links = sorted((c.handle, c.delivered, c.unsettled, c.credit) for c in core.iter_links()
                   if hasattr(c, "unsettled"))
    dests = sorted((rd.node, rd.unsettled) for a in core.addresses.values() for rd in a.remote)
    return entry, links, dests, _after(core, p, None)[1:], (p.in_flight, p.delivered)


def test_forward_from_peer_agrees_with_route_from_peer_and_sent():
    """The one-call path decides, counts and fills the entry as `route_from_peer` then `sent` do, or
    declines with nothing counted."""
    taken = set()
    for seed in range(600):
        core, p, key, _, hops = _peer_case(seed)
        twin, tp, _, _, _ = _peer_case(seed)
        core._grant.clear()
        twin._grant.clear()
        before = _sent_state(core, p, None)
        e = core.forward_from_peer(p, key, hops, "in")
        if e is None:
            assert _sent_state(core, p, None) == before, seed          # declined: nothing counted
            continue
        c, rd = twin.route_from_peer(tp, key, hops)
        assert c is not None and not c.busy and not c.presettle, seed
        mode = twin.sent(tp, c, "in", "out", False, rd, -1, -1)
        assert mode == TRACKED, seed
        core.in_flight["out"] = e                                  # filed by the caller
        want = twin.in_flight["out"]
        assert _sent_state(core, p, e) == _sent_state(twin, tp, want), seed
        assert (e.size, e.route, e.sent_at) == (-1, -1, want.sent_at), seed
        taken.add(rd is None)
    assert taken == {True, False}                                  # egress and transit both taken


def _settled_state(core, p):
    """What a pre-settled delivery's routing and `sent` left: the counters of every link, destination and
    address, the producer's, the credit to grant."""
    links = sorted((c.handle, c.delivered, c.presettled, c.unsettled, c.credit) for c in core.iter_links()
                   if hasattr(c, "unsettled"))
    dests = sorted((rd.node, rd.unsettled) for a in core.addresses.values() for rd in a.remote)
    return links, dests, _after(core, p, None)[1:], (p.in_flight, p.delivered, p.presettled)


def test_forward_settled_from_peer_agrees_with_route_from_peer_and_sent():
    """The one-call path for a pre-settled delivery picks and counts as `route_from_peer` then `sent`
    do, or declines with nothing counted."""
    taken = set()
    for seed in range(600):
        core, p, key, _, hops = _peer_case(seed)
        twin, tp, _, _, _ = _peer_case(seed)
        core._grant.clear()
        twin._grant.clear()
        before = _settled_state(core, p)
        c = core.forward_settled_from_peer(p, key, hops)
        if c is None:
            assert _settled_state(core, p) == before, seed              # declined: nothing counted
            continue
        want, rd = twin.route_from_peer(tp, key, hops)
        assert want is not None and not want.busy, seed
        assert (c.handle, c.peer) == (want.handle, want.peer), seed
        assert twin.sent(tp, want, "in", "out", True, rd, -1, -1) == PRESETTLED, seed
        assert _settled_state(core, p) == _settled_state(twin, tp), seed
        taken.add(rd is None)
    assert taken == {True, False}                                  # egress and transit both taken


def test_multicast_valid_origins_are_asked_again_after_a_topology_change():
    """The core caches the valid origins between route changes; a topology change elsewhere (another node's
    link: no change to this node's own routes) must still reach multicast forwarding (issue 33: copies
    to a restarted node forwarded twice)."""
    core = make_core()
    origins = {"C": frozenset({"B"}), "D": frozenset({"B"})}    # B's tree to C and D crosses this node
    outs = mesh(core, {"mc/news": ["B", "C"]})
    core.set_routes(core.nodes, {"mc/news": ["B", "C"]}, radius=2, valid_origins=lambda: dict(origins))
    a = core.addresses["mc/news"]
    assert core.mesh_fanout(a, False, origin="B", trace=["B"], came_from="B") == [outs["C"]]
    origins["C"] = frozenset()          # B got its own link to C: its tree no longer crosses here
    core.origins_changed()
    assert core.mesh_fanout(a, False, origin="B", trace=["B"], came_from="B") == []
