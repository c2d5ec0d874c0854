"""Mobile-address sync across a mesh: propagation, loss, duplication, gaps."""

from __future__ import annotations

from collections import Counter
from typing import Any

import networkx as nx

from router.linkstate.mobile import HINT_CLOSEST, HINT_MULTICAST
from tests.support.linkstate_sim import SimNetwork, build, random_mesh

ADDR_A = "M0openstack.org/om/rpc/anycast/nova/compute"
ADDR_B = "M0openstack.org/om/rpc/multicast/nova/compute"


def converged_mesh(nodes: int = 30, extra: int = 25, seed: int = 4) -> SimNetwork:
    net = build(random_mesh(nodes, extra, seed))
    net.run_until(lambda: all(len(e.reachable) == nodes - 1 for e in net.engines.values()), 5.0)
    return net


def everyone_else_knows(net: SimNetwork, address: str, holders: set[str]) -> bool:
    return all(e.known_addresses.get(address, frozenset()) == frozenset(holders - {node})
               for node, e in net.engines.items())


def is_diff_mau(message: dict[str, Any], origin: str) -> bool:
    return message["opcode"] == "MAU" and message["body"]["id"] == origin and "exist" not in message["body"]


def test_addresses_added_on_some_nodes_reach_all_and_removal_too():
    net = converged_mesh()
    nodes = sorted(net.engines)
    net.engines[nodes[0]].add_local_address(ADDR_A, HINT_CLOSEST)
    net.engines[nodes[7]].add_local_address(ADDR_A, HINT_CLOSEST)
    net.engines[nodes[7]].add_local_address(ADDR_B, HINT_MULTICAST)
    took = net.run_until(lambda: everyone_else_knows(net, ADDR_A, {nodes[0], nodes[7]})
                         and everyone_else_knows(net, ADDR_B, {nodes[7]}), 3.0)
    assert took <= 0.2  # one tick: the diff MAU is flooded at once
    assert net.engines[nodes[3]].address_hint(ADDR_B) == HINT_MULTICAST
    assert net.delivered["MAR"] == 0  # diffs arrived in order: no requests needed

    net.engines[nodes[7]].remove_local_address(ADDR_A)
    net.run_until(lambda: everyone_else_knows(net, ADDR_A, {nodes[0]}), 3.0)
    assert everyone_else_knows(net, ADDR_B, {nodes[7]})
    assert net.engines[nodes[7]].mobile_seq == 2


def test_node_joining_later_learns_existing_addresses():
    net = converged_mesh(12, 8)
    holder = sorted(net.engines)[2]
    net.engines[holder].add_local_address(ADDR_A)
    net.run(0.5)
    newcomer = net.add_node("late")
    net.connect("late", sorted(net.engines)[5], cost=2)
    took = net.run_until(lambda: newcomer.known_addresses.get(ADDR_A) == frozenset({holder}), 10.0)
    assert took <= 1.0  # via the RAs of the topology change, then MAR -> absolute MAU


def test_lost_diff_mau_recovers_via_mar_and_absolute_mau():
    net = converged_mesh()
    nodes = sorted(net.engines)
    origin, victim = nodes[1], nodes[9]
    net.drop = lambda src, dst, m: dst == victim and is_diff_mau(m, origin)  # every copy toward the victim
    seen: list[tuple[str, str, str]] = []
    net.observers.append(lambda src, dst, m: seen.append((m["opcode"], m["body"]["id"], dst))
                         if m["opcode"] in ("MAR", "MAU") and dst in (origin, victim) else None)
    net.engines[origin].add_local_address(ADDR_A)
    net.run_until(lambda: everyone_else_knows(net, ADDR_A, {origin}), 3.0)
    assert net.dropped["MAU"] >= 1
    assert ("MAR", victim, origin) in seen  # the RA showed a newer mobile_seq: the victim asked
    assert ("MAU", origin, victim) in seen  # ... and got the absolute MAU
    assert net.engines[victim].counters["mau_applied"] == 1


def test_duplicated_mau_is_ignored():
    net = converged_mesh()
    nodes = sorted(net.engines)
    origin = nodes[4]
    net.duplicate = lambda src, dst, m: is_diff_mau(m, origin)
    net.engines[origin].add_local_address(ADDR_A)
    net.run_until(lambda: everyone_else_knows(net, ADDR_A, {origin}), 3.0)
    net.engines[origin].remove_local_address(ADDR_A)
    net.run_until(lambda: everyone_else_knows(net, ADDR_A, set()), 3.0)
    assert net.delivered["MAR"] == 0
    for node, engine in net.engines.items():
        if node != origin:
            assert engine.counters["mau_applied"] == 2  # each diff applied exactly once
            assert engine.counters["mau_gap"] == 0


def test_gap_is_never_closed_by_a_too_new_diff_while_a_mar_is_pending():
    net = converged_mesh(10, 6)
    nodes = sorted(net.engines)
    origin, victim = nodes[0], nodes[5]
    blocked = {"on": True}
    # the victim misses diff 1 and cannot get an answer to its MAR for now
    net.drop = lambda src, dst, m: blocked["on"] and (
        (dst == victim and is_diff_mau(m, origin) and m["body"]["mobile_seq"] == 1)
        or (m["opcode"] == "MAU" and "exist" in m["body"] and m["body"]["id"] == origin))
    net.engines[origin].add_local_address(ADDR_A)
    net.step()
    assert net.engines[victim].known_addresses.get(ADDR_A) is None
    net.engines[origin].add_local_address(ADDR_B)  # diff 2 arrives while the MAR is outstanding
    net.step()
    victim_engine = net.engines[victim]
    assert victim_engine.counters["mau_gap"] >= 1
    assert victim_engine.known_addresses.get(ADDR_B) is None  # not admitted: A would be lost for good
    blocked["on"] = False
    net.run_until(lambda: victim_engine.known_addresses.get(ADDR_A) == frozenset({origin})
                  and victim_engine.known_addresses.get(ADDR_B) == frozenset({origin}), 5.0)


def test_mar_from_an_unknown_node_is_answered_once_it_is_reachable():
    net = converged_mesh(6, 3)
    nodes = sorted(net.engines)
    holder = net.engines[nodes[0]]
    holder.add_local_address(ADDR_A)
    net.run(0.3)
    mar = {"to": f"_topo/0/{nodes[0]}/qdrouter.ma", "opcode": "MAR", "trace": ["ghost"],
           "body": {"id": "ghost", "pv": 1, "area": "0", "instance": 7, "have_seq": 0}}
    link = next(iter(holder.neighbors.values()))
    assert holder.handle(mar, net.now, link) == []  # no way to reach "ghost": the answer waits
    ghost = net.add_node("ghost", instance=7)
    net.connect("ghost", nodes[3], cost=1)
    net.run_until(lambda: ghost.known_addresses.get(ADDR_A) == frozenset({nodes[0]}), 5.0)


def test_flooded_updates_reach_each_node_once_in_a_full_mesh_and_still_cross_chains():
    """The origin sends its diff MAUs and RAs to its neighbours itself; they flood them on only to the
    nodes the origin does not reach directly: in a full mesh every node receives one copy (it used to
    decode one per neighbour), along a chain the far end still learns the address."""
    full = nx.complete_graph(["A", "B", "C", "D"])
    nx.set_edge_attributes(full, 1, "cost")
    full = build(full)
    full.run_until(lambda: all(len(e.reachable) == 3 for e in full.engines.values()), 5.0)
    duplicates = {n: e.counters["flood_duplicate"] for n, e in full.engines.items()}
    copies = Counter()
    full.observers.append(lambda src, dst, m: copies.update([dst]) if is_diff_mau(m, "A") else None)
    full.engines["A"].add_local_address(ADDR_A)
    full.run_until(lambda: everyone_else_knows(full, ADDR_A, {"A"}), 3.0)
    assert copies == {"B": 1, "C": 1, "D": 1}
    assert {n: e.counters["flood_duplicate"] for n, e in full.engines.items()} == duplicates

    chain = nx.path_graph(["A", "B", "C", "D"])
    nx.set_edge_attributes(chain, 1, "cost")
    chain = build(chain)
    chain.run_until(lambda: all(len(e.reachable) == 3 for e in chain.engines.values()), 5.0)
    chain.engines["A"].add_local_address(ADDR_A)
    took = chain.run_until(lambda: everyone_else_knows(chain, ADDR_A, {"A"}), 3.0)
    assert took <= 0.2                  # flooded hop by hop at once, not learnt through a MAR
    assert chain.delivered["MAR"] == 0
