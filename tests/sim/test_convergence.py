"""Random meshes converge to the routes networkx computes on the global graph."""

from __future__ import annotations

import networkx as nx
import pytest

from tests.support.linkstate_sim import SimNetwork, build, random_mesh
from tests.support.route_reference import chosen_path, reference_routes, route_mismatches


def converge(net: SimNetwork, graph: nx.Graph, timeout: float) -> tuple[float, dict]:
    """Run until every engine's routes equal the reference: ``(simulated time it took, references)``."""
    refs = {node: reference_routes(graph, node) for node in graph}
    took = net.run_until(lambda: not route_mismatches(net, graph, refs), timeout)
    return took, refs


@pytest.mark.parametrize(("nodes", "extra", "seed", "transit"), [
    (100, 100, 11, "engine"),
    (500, 500, 5, "adapter"),
])
def test_random_mesh_converges_to_networkx_routes(no_gc, nodes, extra, seed, transit):
    graph = random_mesh(nodes, extra, seed)
    net = build(graph, transit=transit)
    took, refs = converge(net, graph, timeout=5.0)
    assert took <= 1.0, f"converged after {took} simulated seconds"
    # the same check, explicitly: next hop and cost of every node for every destination
    for node, engine in net.engines.items():
        hops, costs = refs[node]
        assert dict(engine.next_hops) == hops
        assert dict(engine.costs) == costs
        assert engine.reachable == frozenset(graph) - {node}
    # converged means quiet: one more second carries HELLOs only (no RA is due in flux before 4 s)
    before = dict(net.delivered)
    net.run(1.0)
    assert {op: n - before.get(op, 0) for op, n in net.delivered.items() if n != before.get(op, 0)} \
        == {"HELLO": 2 * graph.number_of_edges()}


def test_engine_and_adapter_transit_agree():
    graph = random_mesh(40, 30, seed=3)
    results = []
    for transit in ("engine", "adapter"):
        net = build(graph, transit=transit)
        converge(net, graph, timeout=5.0)
        results.append({node: (dict(e.next_hops), dict(e.costs)) for node, e in net.engines.items()})
    assert results[0] == results[1]


def test_equal_cost_paths_break_ties_by_lower_id():
    # a square with equal costs: from A, C is reachable via B or D at cost 2; B (lower id) wins everywhere
    graph = nx.Graph()
    graph.add_edge("A", "B", cost=1)
    graph.add_edge("B", "C", cost=1)
    graph.add_edge("C", "D", cost=1)
    graph.add_edge("D", "A", cost=1)
    net = build(graph)
    converge(net, graph, timeout=3.0)
    assert net.engines["A"].next_hops["C"] == "B"
    assert net.engines["C"].next_hops["A"] == "B"
    assert net.engines["B"].next_hops["D"] == "A"
    assert net.engines["D"].next_hops["B"] == "A"


def test_valid_origins_match_brute_force():
    graph = random_mesh(14, 10, seed=21, max_cost=2)  # small costs: many equal-cost ties
    net = build(graph)
    converge(net, graph, timeout=3.0)
    paths = {(o, d): chosen_path(graph, o, d) for o in graph for d in graph if o != d}
    for here, engine in net.engines.items():
        expected: dict[str, frozenset[str]] = {}
        for dest in graph:
            if dest == here:
                continue
            origins = frozenset(o for o in graph if o not in (here, dest) and here in paths[(o, dest)][1:-1])
            if origins:
                expected[dest] = origins
        assert dict(engine.valid_origins) == expected, here


def test_radius_is_the_hop_count_to_the_farthest_node():
    graph = nx.path_graph(["A", "B", "C", "D"])
    nx.set_edge_attributes(graph, 1, "cost")
    net = build(graph)
    converge(net, graph, timeout=3.0)
    assert net.engines["A"].radius == 3
    assert net.engines["B"].radius == 2
