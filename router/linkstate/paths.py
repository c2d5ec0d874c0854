"""Shortest paths over the link states: next hops, costs, radius and valid origins.

The graph is directed: node ``u`` has an edge to ``v`` of cost ``c`` when ``u``'s link state lists ``v`` with
cost ``c``. A node named by others whose own link state we do not hold (a *stub*) gets back edges to the
nodes naming it, with the cost they advertise (links are symmetric), so it can still be reached and its
tree computed.

Every node must compute the same trees, so ties are broken as in qdrouterd's Dijkstra: nodes are settled in
``(cost, id)`` order and a node's parent only changes on a strictly lower cost, so the parent of ``v`` is the
shortest-path predecessor ``u`` with the lowest ``(cost(u), u)``.

The Dijkstra here runs on plain dicts kept up to date one link state at a time: at 500 nodes it costs a
fifth of maintaining a networkx graph and running networkx's Dijkstra (whose tie-break would need
post-processing anyway). :func:`to_networkx` exports the graph; the tests check these trees against
networkx on random graphs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:        # networkx is imported only when a graph is exported (saves ~80 ms of start-up)
    import networkx as nx

COST = "cost"


class Topology:
    """The directed cost graph: link states plus stub back edges, as ``node -> {peer: cost}``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._ls: dict[str, dict[str, int]] = {}  # nodes whose link state is held
        self._named_by: dict[str, dict[str, int]] = {}  # node -> {namer: cost the namer advertises}
        self.adjacency: dict[str, Mapping[str, int]] = {root: {}}  # out-edges (do not modify)

    def set_link_state(self, node: str, peers: Mapping[str, int] | None) -> bool:
        """Replace ``node``'s link state (None: unknown, the node becomes a stub if named); True if it
        differs from the one it replaces."""
        known = self._ls.pop(node, None)
        old = known or {}
        new = dict(peers) if peers is not None else None
        for peer in old:
            if new is None or peer not in new:
                namers = self._named_by[peer]
                del namers[node]
                if not namers:
                    del self._named_by[peer]
                self._place(peer)
        for peer, cost in (new or {}).items():
            self._named_by.setdefault(peer, {})[node] = cost
            self._place(peer)
        if new is not None:
            self._ls[node] = new
        self._place(node)
        return known != new

    def _place(self, node: str) -> None:
        """Point ``adjacency[node]`` at its link state, else its namers (stub), else drop it."""
        edges = self._ls.get(node)
        if edges is None:
            edges = self._named_by.get(node)
        if edges is not None:
            self.adjacency[node] = edges
        elif node == self.root:
            self.adjacency[node] = {}
        else:
            self.adjacency.pop(node, None)


def shortest_tree(adjacency: Mapping[str, Mapping[str, int]], source: str) \
        -> tuple[dict[str, str], dict[str, int]]:
    """``(parent, cost)`` of the tie-broken shortest-path tree from ``source`` (parent lacks ``source``)."""
    if source not in adjacency:
        return {}, {}
    dist = {source: 0}
    parent: dict[str, str] = {}
    done: set[str] = set()
    heap = [(0, source)]
    pop, push, empty = heapq.heappop, heapq.heappush, {}
    while heap:
        d, u = pop(heap)  # (cost, id) order: equal costs settle by lower id
        if u in done:
            continue
        done.add(u)
        for v, c in adjacency.get(u, empty).items():
            if v in done:
                continue
            alt = d + c
            old = dist.get(v)
            if old is None or alt < old:  # strictly lower: the first settled predecessor keeps v
                dist[v] = alt
                parent[v] = u
                push(heap, (alt, v))
    return parent, dist


@dataclass(frozen=True)
class Routes:
    """Paths from one root: next hop (the neighbour to send to), cost and hop count per reachable node."""

    root: str
    next_hop: dict[str, str] = field(default_factory=dict)
    cost: dict[str, int] = field(default_factory=dict)
    hops: dict[str, int] = field(default_factory=dict)

    @property
    def radius(self) -> int:
        """Hops to the farthest reachable node."""
        return max(self.hops.values(), default=0)


def compute_routes(adjacency: Mapping[str, Mapping[str, int]], root: str) -> Routes:
    """Next hops, costs and hop counts from ``root`` to every node it reaches."""
    parent, dist = shortest_tree(adjacency, root)
    next_hop: dict[str, str] = {}
    hops: dict[str, int] = {}
    for node in parent:
        chain = []
        while node not in next_hop and parent[node] != root:  # climb to a known node or a root child
            chain.append(node)
            node = parent[node]
        if node not in next_hop:
            next_hop[node], hops[node] = node, 1
        first, count = next_hop[node], hops[node]
        for below in reversed(chain):
            count += 1
            next_hop[below], hops[below] = first, count
    del dist[root]
    return Routes(root, next_hop, dist, hops)


def valid_origins(adjacency: Mapping[str, Mapping[str, int]], root: str, origins: Iterable[str]) \
        -> dict[str, frozenset[str]]:
    """For each destination D reachable from ``root``: the origins whose tree reaches D through ``root``.

    A delivery that entered the mesh at origin O is forwarded here toward D only if O is valid for D, so
    each copy follows O's own tree. Costs one Dijkstra per origin.
    """
    found: dict[str, set[str]] = {}
    for origin in origins:
        if origin == root:
            continue
        parent, _ = shortest_tree(adjacency, origin)
        if root not in parent:
            continue
        children: dict[str, list[str]] = {}
        for node, up in parent.items():
            children.setdefault(up, []).append(node)
        stack = list(children.get(root, ()))
        while stack:
            node = stack.pop()
            found.setdefault(node, set()).add(origin)
            stack.extend(children.get(node, ()))
    return {dest: frozenset(o) for dest, o in found.items()}


def to_networkx(adjacency: Mapping[str, Mapping[str, int]]) -> nx.DiGraph:
    """The graph as a networkx ``DiGraph`` with ``cost`` on each edge (for management and analysis)."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(adjacency)
    graph.add_weighted_edges_from(
        ((u, v, c) for u, edges in adjacency.items() for v, c in edges.items()), weight=COST)
    return graph
