"""Routes computed from the global graph, independently of router.linkstate.paths."""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

if TYPE_CHECKING:
    from tests.support.linkstate_sim import SimNetwork


def reference_routes(graph: nx.Graph, source: str) -> tuple[dict[str, str], dict[str, int]]:
    """``(next hop, cost)`` from ``source``: the parent of v on a shortest path is the candidate u with the
    lowest ``(dist(u), u)`` (qdrouterd's settle order), computed here from plain distances."""
    dist = nx.single_source_dijkstra_path_length(graph, source, weight="cost")
    next_hop: dict[str, str] = {}
    for v in sorted(dist, key=lambda n: (dist[n], n)):
        if v == source:
            continue
        parent = min((u for u in graph[v] if u in dist and dist[u] + graph[u][v]["cost"] == dist[v]),
                     key=lambda u: (dist[u], u))
        next_hop[v] = v if parent == source else next_hop[parent]
    return next_hop, {v: d for v, d in dist.items() if v != source}


def chosen_path(graph: nx.Graph, source: str, dest: str) -> list[str]:
    """Brute force: among all shortest paths, the one the tie-break picks (compare from the end)."""
    dist = nx.single_source_dijkstra_path_length(graph, source, weight="cost")
    paths = list(nx.all_shortest_paths(graph, source, dest, weight="cost"))
    return min(paths, key=lambda p: [(dist[n], n) for n in reversed(p[:-1])])


def route_mismatches(net: SimNetwork, graph: nx.Graph,
                     refs: dict[str, tuple[dict[str, str], dict[str, int]]] | None = None) -> list[str]:
    """Where an engine's next hops or costs differ from the reference (empty when converged)."""
    problems = []
    for node, engine in net.engines.items():
        hops, costs = refs[node] if refs else reference_routes(graph, node)
        if dict(engine.next_hops) != hops or dict(engine.costs) != costs:
            wrong = sorted(d for d in set(hops) | set(engine.next_hops)
                           if engine.next_hops.get(d) != hops.get(d) or engine.costs.get(d) != costs.get(d))
            problems.append(f"{node}: {len(wrong)} wrong, e.g. {wrong[:3]}")
    return problems
