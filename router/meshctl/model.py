"""A validated mesh topology: its nodes with their ports, the edges between them, the shared settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from router.config import DEFAULT_COST

#: Every listener binds it and every connector dials it, unless the topology names another host.
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class NodeSpec:
    """One node of the mesh: its id, ports and host (None: the topology's host). An edge node
    (docs/EDGE.md) has `uplinks` (interior ids, preferred first) and no inter-router or edge port."""

    node_id: str
    client_port: int
    inter_router_port: int | None = None
    host: str | None = None
    edge_port: int | None = None            # an interior's `role: edge` listener
    uplinks: tuple[str, ...] = ()           # an edge's interiors, cheapest first

    @property
    def is_edge(self) -> bool:
        return bool(self.uplinks)


@dataclass(frozen=True)
class Edge:
    """``source`` dials ``target``'s inter-router listener; the link costs ``cost``."""

    source: str
    target: str
    cost: int = DEFAULT_COST


@dataclass(frozen=True)
class Topology:
    """A validated topology. ``settings`` holds the optional sections shared by every node, as in the file."""

    name: str
    nodes: tuple[NodeSpec, ...]
    edges: tuple[Edge, ...] = ()
    host: str = DEFAULT_HOST
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False)
    source: str = "<memory>"
    # inter-router links over mutual TLS + SASL EXTERNAL: True (``mesh up`` makes the PKI) or the
    # operator's own certificates (router.meshctl.pki.MeshPki)
    tls: Any = False

    def host_of(self, node_id: str) -> str:
        """Where node `node_id` listens and is dialled."""
        return self.node(node_id).host or self.host

    @property
    def node_ids(self) -> list[str]:
        return [n.node_id for n in self.nodes]

    @property
    def interior_ids(self) -> list[str]:
        return [n.node_id for n in self.nodes if not n.is_edge]

    def node(self, node_id: str) -> NodeSpec:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    def client_url(self, node_id: str) -> str:
        host = self.host_of(node_id)
        host = f"[{host}]" if ":" in host else host
        return f"amqp://{host}:{self.node(node_id).client_port}"
