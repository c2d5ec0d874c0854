"""What a link-state engine knows, read-only: next hops, costs, addresses, neighbours, epochs.

A mixin of router.linkstate.engine.LinkStateEngine; every view is a property or a lookup
with no effect, except `take_address_changes`, which hands over (and clears) what changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from router.linkstate.config import within
from router.linkstate.envelope import LinkId
from router.linkstate.paths import to_networkx, valid_origins

if TYPE_CHECKING:        # networkx is imported only when a graph is exported
    import networkx as nx


class EngineViews:
    """What a link-state engine knows, read-only: next hops, costs, addresses, neighbours, epochs."""

    # == views ============================================================================================
    @property
    def next_hops(self) -> Mapping[str, str]:
        """Reachable node -> the neighbour to send to (a neighbour maps to itself on its direct link)."""
        return MappingProxyType(self._routes.next_hop)

    @property
    def costs(self) -> Mapping[str, int]:
        """Reachable node -> path cost."""
        return MappingProxyType(self._routes.cost)

    @property
    def radius(self) -> int:
        return self._routes.radius

    @property
    def reachable(self) -> frozenset[str]:
        return frozenset(self._routes.next_hop)

    @property
    def valid_origins(self) -> Mapping[str, frozenset[str]]:
        """Reachable node D -> origins whose shortest-path tree reaches D through this node (lazy)."""
        if self._valid_origins is None:
            self._valid_origins = valid_origins(self._topology.adjacency, self.node_id, self._routes.next_hop)
        return MappingProxyType(self._valid_origins)

    @property
    def known_addresses(self) -> Mapping[str, frozenset[str]]:
        """Mobile address -> ids of the *other* nodes having it (reachable or not: check ``reachable``); a
        read-only view of the engine's index, not a copy."""
        return self._remote.index()

    def addresses_of(self, node: str) -> Mapping[str, int | None]:
        """The mobile addresses ``node`` has, as held here (a copy): address -> hint."""
        return self._remote.addresses_of(node)

    def holders_of(self, address: str) -> tuple[str, ...]:
        """Ids of the other nodes that have mobile ``address`` (reachable or not)."""
        return self._remote.holders(address)

    def address_changes_pending(self) -> bool:
        """Whether `take_address_changes` would give anything (cheap: no set is made)."""
        return self._remote.changes_pending()

    def take_address_changes(self) -> set[str] | None:
        """Mobile addresses whose holders changed since the last call (None on the first call: all), so
        that a route table follows in O(changed addresses)."""
        return self._remote.take_changed()

    @property
    def address_updates_pending(self) -> int:
        """Addresses of other nodes whose entry in ``known_addresses`` still lags behind the node's last
        MAU (a large absolute one is indexed in steps: `apply_address_updates`); 0 once all are in."""
        return self._remote.pending()

    @property
    def address_steps(self) -> int:
        """Steps taken so far to index large absolute MAUs and forgotten nodes' sets (management)."""
        return self._remote.steps

    def address_hint(self, address: str) -> int | None:
        """The MAU hint (treatment) other nodes gave ``address``."""
        return self._remote.hint(address)

    @property
    def local_addresses(self) -> Mapping[str, int]:
        """Our mobile addresses -> hint."""
        return MappingProxyType(self._local.addresses)

    @property
    def neighbors(self) -> Mapping[str, LinkId]:
        """Bidirectional neighbour -> the link it is bound to."""
        return MappingProxyType(self._neighbors.bound_links())

    def link_to(self, node: str) -> LinkId | None:
        """The link to ``node``'s next hop on its computed path (a neighbour: its own link), else None."""
        route = self._hops().get(node)
        return None if route is None else route[1]

    @property
    def routes_epoch(self) -> int:
        """Bumped when next hops, costs or neighbour links change."""
        return self._routes_epoch

    @property
    def origins_epoch(self) -> int:
        """Bumped when the topology changed anywhere: `valid_origins` may differ even where this node's own
        routes did not (another node's link came up)."""
        return self._origins_epoch

    @property
    def addresses_epoch(self) -> int:
        """Bumped when ``known_addresses`` or hints change."""
        return self._remote.epoch

    @property
    def ls_seq(self) -> int:
        return self._lsdb.ls_seq

    @property
    def mobile_seq(self) -> int:
        return self._local.seq

    def graph(self) -> nx.DiGraph:
        """The link-state graph as a networkx ``DiGraph`` (edge attribute ``cost``), built on each call."""
        return to_networkx(self._topology.adjacency)

    def remote_nodes(self) -> list[dict[str, Any]]:
        """Every other node the link-state database knows: id, instance, ls_seq, mobile_seq, addresses."""
        return [{"id": node.id, "instance": node.instance, "ls_seq": node.ls_seq,
                 "mobile_seq": self._remote.seq_of(node.id),
                 "addresses": self._remote.count_of(node.id)}
                for node in sorted(self._lsdb.nodes.values(), key=lambda n: n.id)]

    @property
    def last_change(self) -> float:
        """The clock time of the last topology change (-inf before the first)."""
        return self._last_change

    def link_state(self, node: str) -> Mapping[str, int] | None:
        """The link state held for ``node`` (own included), None if unknown."""
        peers = self._lsdb.peers_of(node)
        return None if peers is None else MappingProxyType(peers)

    def in_flux(self, now: float) -> bool:
        """True within ``2 * ra_interval_flux`` of the last topology change."""
        return within(now, self._last_change, self.config.flux_window)
