"""Paths: tie-broken Dijkstra checked against networkx, stubs, valid origins, incremental topology."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from router.linkstate.paths import Topology, compute_routes, shortest_tree, to_networkx, valid_origins


def random_graph(seed: int, n: int = 18, p: float = 0.25, max_cost: int = 3) -> nx.Graph:
    rng = random.Random(seed)
    g = nx.gnp_random_graph(n, p, seed=seed)
    g = nx.relabel_nodes(g, {i: f"r{i}" for i in g})
    for a, b in g.edges:
        g[a][b]["cost"] = rng.randint(1, max_cost)
    return g


def topology_of(graph: nx.Graph, root: str) -> Topology:
    topo = Topology(root)
    for node in graph:
        topo.set_link_state(node, {peer: graph[node][peer]["cost"] for peer in graph[node]})
    return topo


def brute_force_path(graph: nx.Graph, source: str, dest: str) -> list[str]:
    """All shortest paths by networkx; the tie-break keeps the lowest (cost, id) predecessor, hop by hop
    from the destination back, i.e. the minimum of the reversed (cost, id) sequences."""
    dist = nx.single_source_dijkstra_path_length(graph, source, weight="cost")
    paths = nx.all_shortest_paths(graph, source, dest, weight="cost")
    return min(paths, key=lambda p: [(dist[n], n) for n in reversed(p[:-1])])


@pytest.mark.parametrize("seed", range(8))
def test_routes_match_networkx_with_id_tie_break(seed):
    graph = random_graph(seed)
    for root in list(graph)[:6]:
        routes = compute_routes(topology_of(graph, root).adjacency, root)
        reach = nx.node_connected_component(graph, root) - {root}
        assert set(routes.next_hop) == reach
        assert routes.cost == {d: c for d, c in nx.single_source_dijkstra_path_length(
            graph, root, weight="cost").items() if d != root}
        for dest in reach:
            path = brute_force_path(graph, root, dest)
            assert routes.next_hop[dest] == path[1], (root, dest, path)
            assert routes.hops[dest] == len(path) - 1
        assert routes.radius == max(routes.hops.values(), default=0)


def test_ties_go_to_the_lower_id_even_when_networkx_would_pick_otherwise():
    # two equal-cost paths S->a->T and S->b->T; edges added so that insertion order favours "b"
    graph = nx.Graph()
    graph.add_edge("S", "b", cost=1)
    graph.add_edge("b", "T", cost=1)
    graph.add_edge("S", "a", cost=1)
    graph.add_edge("a", "T", cost=1)
    assert compute_routes(topology_of(graph, "S").adjacency, "S").next_hop["T"] == "a"
    assert compute_routes(topology_of(graph, "T").adjacency, "T").next_hop["S"] == "a"


def test_predecessor_with_the_lower_cost_wins_before_the_lower_id():
    # T reachable at cost 3 via z (cost 1 to z, 2 to T) or via a (cost 2 to a, 1 to T): z settles first
    graph = nx.Graph()
    graph.add_edge("S", "z", cost=1)
    graph.add_edge("z", "T", cost=2)
    graph.add_edge("S", "a", cost=2)
    graph.add_edge("a", "T", cost=1)
    parent, dist = shortest_tree(topology_of(graph, "S").adjacency, "S")
    assert parent["T"] == "z" and dist["T"] == 3
    assert brute_force_path(graph, "S", "T") == ["S", "z", "T"]


def test_edges_are_directed_by_who_advertises_them():
    topo = Topology("A")
    topo.set_link_state("A", {"B": 1})
    topo.set_link_state("B", {"A": 1, "C": 1})
    topo.set_link_state("C", {})  # C no longer lists B (link lost on C's side): C stays reachable, no transit
    routes = compute_routes(topo.adjacency, "A")
    assert routes.next_hop == {"B": "B", "C": "B"}
    topo.set_link_state("B", {"A": 1})  # B dropped C too: C is gone
    assert compute_routes(topo.adjacency, "A").next_hop == {"B": "B"}


def test_stub_nodes_get_back_edges_with_the_advertised_cost():
    topo = Topology("A")
    topo.set_link_state("A", {"B": 2})
    topo.set_link_state("B", {"A": 2, "S": 3})  # S's own link state is not known yet
    assert topo.adjacency["S"] == {"B": 3}
    routes = compute_routes(topo.adjacency, "A")
    assert routes.next_hop["S"] == "B" and routes.cost["S"] == 5
    parent, dist = shortest_tree(topo.adjacency, "S")  # S's tree exists (valid origins need it)
    assert dist == {"S": 0, "B": 3, "A": 5}
    topo.set_link_state("S", {"B": 3, "Q": 1})  # S's link state arrives: real edges replace the stub
    assert topo.adjacency["S"] == {"B": 3, "Q": 1} and topo.adjacency["Q"] == {"S": 1}
    topo.set_link_state("S", None)  # cleared again (aged): back to a stub, Q is forgotten
    assert topo.adjacency["S"] == {"B": 3} and "Q" not in topo.adjacency
    topo.set_link_state("B", {"A": 2})
    assert "S" not in topo.adjacency


@pytest.mark.parametrize("seed", range(4))
def test_incremental_topology_equals_a_fresh_one(seed):
    rng = random.Random(seed)
    graph = random_graph(seed, n=12, p=0.35)

    def states() -> dict[str, dict[str, int]]:
        return {n: {p: graph[n][p]["cost"] for p in graph[n]} for n in graph}

    topo = topology_of(graph, "r0")
    held = states()
    for _ in range(40):  # random link changes; some nodes' link states get cleared (unknown) too
        a, b = rng.sample(list(graph), 2)
        if graph.has_edge(a, b):
            graph.remove_edge(a, b)
        else:
            graph.add_edge(a, b, cost=rng.randint(1, 4))
        now = states()
        for node in graph:
            if now[node] != held[node]:
                topo.set_link_state(node, now[node])
        if rng.random() < 0.2:
            victim = rng.choice(list(graph)[1:])
            topo.set_link_state(victim, None)
            topo.set_link_state(victim, now[victim])
        held = now
    assert topo.adjacency == topology_of(graph, "r0").adjacency


@pytest.mark.parametrize("seed", range(4))
def test_valid_origins_match_brute_force(seed):
    graph = random_graph(seed + 100, n=10, p=0.4, max_cost=2)
    for here in graph:
        topo = topology_of(graph, here)
        reach = nx.node_connected_component(graph, here) - {here}
        result = valid_origins(topo.adjacency, here, reach)
        for dest in reach:
            expected = {o for o in reach if o != dest and here in brute_force_path(graph, o, dest)[1:-1]}
            assert result.get(dest, frozenset()) == expected, (here, dest)


def test_unknown_root_and_export():
    topo = Topology("A")
    assert compute_routes(topo.adjacency, "A").next_hop == {}
    assert shortest_tree({}, "A") == ({}, {})
    topo.set_link_state("A", {"B": 4})
    g = to_networkx(topo.adjacency)
    assert isinstance(g, nx.DiGraph) and g["A"]["B"]["cost"] == 4 and g["B"]["A"]["cost"] == 4
