"""The address table of one node: addresses and the links using them, node-scoped routes, the mesh view.

Part of the forwarding core (router.forwarding.core.RouterCore extends it). Keys are routing keys
(router.addressing.address_key); `_topo/0/<other node>/...` resolves to that node's route. The table
also collects what others follow: mobile addresses that gained their first or lost their last local
consumer (for the control plane) and changes of watched addresses (for services such as the broker
gateway), both taken once per pump.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping

from router.addressing import AddressRules, address_key, dynamic_address, topo_prefix
from router.forwarding.credit import CreditLedger
from router.forwarding.records import Address, Consumer, RemoteDest

TOPO = "_topo/0/"
EDGE_PREFIX = "_edge/"    # the mobile address an interior advertises for each edge attached to it
OSLO_PREFIX = "openstack.org/om/"     # oslo.messaging's AMQP 1.0 driver: its fanout needs a multicast rule

log = logging.getLogger(__name__)


class RouteRescan:
    """The keys to look at again after a new view of the mesh, in order: `first`, then the addresses the
    table `had`, then the keys of `holders` (a live mapping) it had not (listed when their turn comes, and
    sifted as they are taken: no step looks at more than its share of the table)."""

    def __init__(self, first: list[str], had: Mapping[str, object], holders: Mapping[str, Iterable[str]]
                 ) -> None:
        self.keys = first + list(had)
        self.at = 0
        self.had: Mapping[str, object] | None = had     # None: the holders' keys are listed
        self.skip: Mapping[str, object] | None = None   # while the holders' keys are taken: those it had
        self.holders = holders

    @property
    def done(self) -> bool:
        return self.had is None and self.at >= len(self.keys)

    def take(self, n: int) -> tuple[list[str], int]:
        """The next keys among the next `n` listed (fewer at the end; some may be sifted out), and how many
        were looked at (0 only when done)."""
        if self.at >= len(self.keys) and self.had is not None:
            self.skip, self.had = self.had, None
            self.keys, self.at = list(self.holders), 0
        keys = self.keys[self.at:self.at + n]
        self.at += len(keys)
        skip = self.skip
        return (keys if skip is None else [k for k in keys if k not in skip]), len(keys)

    def rest(self) -> list[str]:
        """The keys listed and not yet taken (those the table had sifted out)."""
        rest, skip = self.keys[self.at:], self.skip
        return rest if skip is None else [k for k in rest if k not in skip]


class AddressTable:
    """Addresses by routing key, with their local links and remote destinations."""

    def __init__(self, node_id: str, rules: AddressRules, ledger: CreditLedger,
                 rng: random.Random | None = None) -> None:
        self.node_id = node_id
        self.rules = rules
        self.ledger = ledger
        self.rng = rng or random.Random()
        self._warned_oslo = False       # the warning about oslo.messaging addresses without rules: once
        self.addresses: dict[str, Address] = {}
        # ingress / egress / transit of addresses no longer in the table (node totals add them)
        self.retired = [0, 0, 0]
        self.remote_count = 0           # addresses in the table with a remote destination (the state line's)
        # the mesh (set by `set_routes`): reachable node -> (path cost, next-hop data-out link), the
        # mesh radius (hop limit) and, for multicast, node -> origins whose tree passes through us
        self.nodes: dict[str, tuple[int, Consumer]] = {}
        self.radius = 0
        self.hop_limit = 1
        self._valid_origins: Callable[[], Mapping[str, frozenset[str]]] = dict
        self._origins_cache: Mapping[str, frozenset[str]] | None = None
        self._node_addresses: dict[str, Address] = {}   # node -> its `_topo/0/<node>/` route
        # (data-out link, nodes behind it) entries of Address.links, one per distinct route: thousands of
        # addresses held by the same nodes share them (fewer objects for the collector to scan)
        self._link_entries: dict[tuple[Consumer, frozenset[str]], tuple[Consumer, frozenset[str]]] = {}
        self._topo = topo_prefix(node_id)
        # mobile addresses that got their first local consumer (True) or lost their last (False), in order
        self.local_changes: list[tuple[str, bool]] = []
        # addresses whose consumers someone watches (key -> watchers), and those changed since last asked
        self._watched: dict[str, int] = {}
        self._watch_changed: set[str] = set()
        # edge mode (router.edge): on an edge, the interior of its active uplink, which gets every delivery
        # for an address no one here has (`default_address`); on an interior, the edges attached to it
        self.default_node: str | None = None
        self.default_address: Address | None = None
        self._rescan: RouteRescan | None = None     # the addresses left to look at after `set_routes`
        self.edge_nodes: set[str] = set()

    # ---- lookup ------------------------------------------------------------------------------------
    def lookup(self, name: str) -> Address | None:
        """The address for a message `to` (anonymous relay); None when nothing uses it here."""
        return self.lookup_key(address_key(name, self.node_id))

    def lookup_key(self, key: str) -> Address | None:
        """The address for a routing key; `_topo/0/<other>/...` resolves to that node's route."""
        a = self.addresses.get(key)
        if a is None and key.startswith(TOPO) and not key.startswith(self._topo):
            node = key[8:key.find("/", 8)]
            a = self._node_addresses.get(node)
            if a is None:
                a = self._edge_route(node)
        if a is None and self.default_address is not None and not key.startswith(self._topo):
            return self.default_address         # an edge: up to its interior
        return a

    def _edge_route(self, node: str) -> Address | None:
        """The route to edge `node` attached to another interior: the `_edge/<node>` address it holds."""
        a = self.addresses.get(EDGE_PREFIX + node)
        return a if a is not None and a.remote else None

    def _scoped_nodes(self, node: str) -> list[str]:
        """The nodes through which a `_topo/0/<node>/...` address is reached."""
        if node in self.nodes:
            return [node]
        if self.default_node is not None and self.default_node in self.nodes:
            return [self.default_node]
        a = self._edge_route(node)
        return [d.node for d in a.remote[:1]] if a is not None else []

    def origin_node(self, origin: str) -> str:
        """The interior a multicast delivery's origin stands for: an edge's is its interior's."""
        if origin in self.edge_nodes:
            return self.node_id
        if origin in self.nodes or origin == self.node_id:
            return origin
        a = self._edge_route(origin)
        return a.remote[0].node if a is not None else origin

    def resolve(self, key: str) -> Address | None:
        """The address a delivery for routing key `key` goes to, if anyone here or beyond can take it."""
        a = self.lookup_key(key) if key else None
        if a is not None and not (a.consumers or a.remote):
            return None
        return a

    def _address(self, name: str) -> Address:
        key = address_key(name, self.node_id)
        a = self.addresses.get(key)
        if a is None:
            a = self.addresses[key] = Address(key, self.rules.distribution(key))
            if key.startswith(OSLO_PREFIX) and not self._warned_oslo and not self.rules.has_rule_for(key):
                self._warned_oslo = True
                log.warning("address %s (oslo.messaging's driver) matches no address rule, so it is %s; "
                            "oslo's fanout (openstack.org/om/rpc/multicast/...) needs a multicast rule: see "
                            "addresses.rules in config/node.yaml", key, a.distribution)
            node = self._scoped_node(key)
            if node is not None:
                a.remote = self._node_route(node)
                a.ready = bool(a.remote)
                self.remote_count += bool(a.remote)
        return a

    def _scoped_node(self, key: str) -> str | None:
        """The other node a `_topo/0/<node>/...` key names (None: not node-scoped, or scoped to us)."""
        if key.startswith(TOPO) and not key.startswith(self._topo):
            end = key.find("/", 8)
            return key[8:end] if end > 8 else None
        return None

    def _node_route(self, node: str) -> list[RemoteDest]:
        via = self._scoped_nodes(node)
        route = self.nodes.get(via[0]) if via else None
        return [RemoteDest(via[0], route[0], route[1])] if route is not None else []

    def _forget_if_unused(self, a: Address) -> None:
        if not a.consumers and not a.producers and not a.remote and self.addresses.get(a.key) is a:
            del self.addresses[a.key]
            self._retire(a)

    def _retire(self, a: Address) -> None:
        r = self.retired
        r[0] += a.ingress
        r[1] += a.egress
        r[2] += a.transit

    def new_dynamic_address(self) -> str:
        """A fresh, unused node-scoped reply address."""
        while True:
            name = dynamic_address(self.node_id, self.rng)
            if address_key(name, self.node_id) not in self.addresses:
                return name

    # ---- what others follow: mobile addresses (control plane), watched addresses (services) ---------------
    def take_local_address_changes(self) -> list[tuple[str, bool]]:
        """Mobile addresses that gained their first local consumer (True) or lost their last (False)."""
        changes, self.local_changes = self.local_changes, []
        return changes

    def watch(self, key: str) -> None:
        """Report changes of the consumers (local or remote) of routing key `key` from now on."""
        self._watched[key] = self._watched.get(key, 0) + 1

    def unwatch(self, key: str) -> None:
        n = self._watched.get(key, 0) - 1
        if n > 0:
            self._watched[key] = n
        else:
            self._watched.pop(key, None)
            self._watch_changed.discard(key)

    def take_watched_changes(self) -> set[str]:
        """Watched keys whose local consumers or remote destinations changed since the last call."""
        changed, self._watch_changed = self._watch_changed, set()
        return changed

    def consumers_of(self, key: str, exclude_conn: object = None) -> int:
        """Local consumers of `key` not on connection `exclude_conn`, plus its remote destinations."""
        a = self.addresses.get(key)
        if a is None:
            return 0
        return sum(1 for c in a.consumers if c.conn is not exclude_conn) + len(a.remote)

    # ---- the mesh -----------------------------------------------------------------------------------------
    def set_routes(self, nodes: Mapping[str, tuple[int, Consumer]], holders: Mapping[str, Iterable[str]],
                   radius: int, valid_origins: Callable[[], Mapping[str, frozenset[str]]],
                   batch: int | None = None) -> None:
        """Take a new view of the mesh (after the control plane changed it).

        `nodes`: each reachable node -> (path cost, data-out link of the next hop toward it);
        `holders`: each mobile address -> the other nodes that have consumers for it (reachable or not;
        a live view: read again as the rescan goes on); `valid_origins` computes, when multicast needs it,
        node -> origins whose shortest-path tree reaches it through this node. Addresses gain or lose
        remote destinations; producers of an address that becomes ready get credit, those of one left with
        no destination are drained.

        `batch`: rescan at most that many addresses now and leave the rest to `continue_routes` (None: all
        now). Addresses with local producers go first; those left from an earlier view's rescan next.
        Until its turn an address keeps its old destinations, which the forwarder treats as it treats a
        route to a link that just died: it skips dead next hops (RELEASED), and a live old next hop still
        routes the delivery on.
        """
        self.nodes = dict(nodes)
        self._link_entries.clear()      # they hold data-out links of the old view
        self.radius = radius
        self.hop_limit = radius + 1     # more nodes crossed than any shortest path has: a loop
        self._valid_origins = valid_origins
        self._origins_cache = None
        for old in self._node_addresses.values():
            self._retire(old)
        self._node_addresses = {}
        for node, (cost, out) in self.nodes.items():
            a = self._node_addresses[node] = Address(TOPO + node + "/", "closest")
            a.remote = [RemoteDest(node, cost, out)]
            a.ready = True
        self.default_address = None
        if self.default_node is not None and self.default_node in self.nodes:
            cost, out = self.nodes[self.default_node]
            a = self.default_address = Address("_uplink/" + self.default_node, "closest")
            a.remote = [RemoteDest(self.default_node, cost, out)]
            a.ready = True
        addresses = self.addresses
        first = self._produced_keys()
        if self._rescan is not None:
            first += self._rescan.rest()   # an earlier view's rescan, not finished: before the others
        self._rescan = RouteRescan(first, addresses.copy(), holders)
        self.continue_routes(1 << 62 if batch is None else batch)

    def _produced_keys(self) -> list[str]:
        """Keys of the addresses with local producers (rescanned first). RouterCore, which keeps its
        producers, lists them without a scan of the table (at 20,000 addresses the scan was ~1.5 ms)."""
        return [k for k, a in self.addresses.items() if a.producers]

    @property
    def routes_pending(self) -> bool:
        """Addresses are left to rescan since the last `set_routes` (see `continue_routes`)."""
        return self._rescan is not None

    def continue_routes(self, batch: int) -> None:
        """Rescan the next `batch` addresses of the last `set_routes` against its view."""
        rescan = self._rescan
        if rescan is None:
            return
        holders = rescan.holders
        nodes = self.nodes
        addresses = self.addresses
        while batch > 0 and not rescan.done:
            keys, looked_at = rescan.take(batch)
            batch -= looked_at
            for key in keys:
                where = holders.get(key)
                reachable = [n for n in where if n in nodes] if where else []
                a = addresses.get(key)
                if a is None:
                    if not reachable:
                        continue
                    a = addresses[key] = Address(key, self.rules.distribution(key))
                node = self._scoped_node(key)
                if node is not None:
                    self._set_remote(a, self._scoped_nodes(node))
                elif a.remote or reachable:
                    self._set_remote(a, reachable)
        if rescan.done:
            self._rescan = None

    def update_remote_addresses(self, keys: Iterable[str],
                                holders_of: Callable[[str], Iterable[str]]) -> None:
        """Mobile addresses `keys` changed holders (the mesh's nodes and paths did not): follow them in
        O(len(keys)). `holders_of(key)`: the other nodes that have consumers for `key`."""
        nodes = self.nodes
        for key in keys:
            if self._scoped_node(key) is not None:
                continue
            reachable = [n for n in holders_of(key) if n in nodes]
            a = self.addresses.get(key)
            if a is None:
                if not reachable:
                    continue
                a = self.addresses[key] = Address(key, self.rules.distribution(key))
            if a.remote or reachable:
                self._set_remote(a, reachable)

    def _set_remote(self, a: Address, nodes: list[str]) -> None:
        old = {d.node: d for d in a.remote}
        remote = []
        for node in nodes:
            cost, out = self.nodes[node]
            d = old.get(node)
            if d is None:
                d = RemoteDest(node, cost, out)
            else:
                d.cost, d.out = cost, out
            remote.append(d)
        remote.sort(key=lambda d: (d.cost, d.node))
        if a.key in self._watched and [d.node for d in remote] != [d.node for d in a.remote]:
            self._watch_changed.add(a.key)
        if bool(remote) != bool(a.remote) and self.addresses.get(a.key) is a:
            self.remote_count += 1 if remote else -1
        a.remote = remote
        by_link: dict[Consumer, set[str]] = {}
        for d in remote:
            by_link.setdefault(d.out, set()).add(d.node)
        entries = self._link_entries
        links = []
        for out, behind in by_link.items():
            entry = (out, frozenset(behind))
            links.append(entries.setdefault(entry, entry))  # shared by every address with the same route
        a.links = links
        self.ledger.update_ready(a)
        if not a.remote:
            self.ledger.lost_destinations(a)
            self._forget_if_unused(a)

    def origins_changed(self) -> None:
        """The mesh's topology changed: the valid origins are asked for again at the next multicast."""
        self._origins_cache = None

    def valid_origins(self) -> Mapping[str, frozenset[str]]:
        """Node -> origins whose tree reaches it through this node (computed once per route change)."""
        if self._origins_cache is None:
            self._origins_cache = self._valid_origins()
        return self._origins_cache

    def delivery_totals(self) -> tuple[int, int, int]:
        """Node totals (ingress, egress, transit): every address now in the table plus retired ones."""
        ingress, egress, transit = self.retired
        for a in self.addresses.values():
            ingress += a.ingress
            egress += a.egress
            transit += a.transit
        for a in self._node_addresses.values():
            ingress += a.ingress
            transit += a.transit
        return ingress, egress, transit

