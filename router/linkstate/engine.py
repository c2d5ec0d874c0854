"""The link-state engine: wires HELLO, link-state db, paths and mobile-address sync of one node.

Sans-IO: the adapter passes time and events in and carries out the returned :class:`Outgoing`.
See the package docstring for how control messages are flooded and routed.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Container, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from router.linkstate.config import LinkStateConfig, due, within
from router.linkstate.envelope import (
    HELLO_ADDRESS,
    MOBILE_ALL,
    ROUTER_ALL,
    LinkId,
    Outgoing,
    Scope,
    classify,
    mobile_address,
    outgoing,
    router_address,
    unpack,
)
from router.linkstate.flood import FloodFilter, flood_key
from router.linkstate.lsdb import LinkStateDb, RemoteNode, Verdict
from router.linkstate.messages import (
    HELLO,
    LSR,
    LSU,
    MAR,
    MAU,
    RA,
    ControlMessage,
    ControlMessageError,
    Hello,
    LinkStateRequest,
    LinkStateUpdate,
    MobileAddressRequest,
    MobileAddressUpdate,
    RouterAdvertisement,
    UnsupportedVersionError,
    parse,
    short,
)
from router.linkstate.mobile import HINT_BALANCED, MAU_CHUNK, Applied, LocalAddresses, RemoteAddresses
from router.linkstate.neighbors import NeighborChange, NeighborTable
from router.linkstate.paths import Routes, Topology, compute_routes, to_networkx, valid_origins
from router.logs import LogOnce

if TYPE_CHECKING:        # networkx is imported only when a graph is exported (saves ~80 ms of start-up)
    import networkx as nx

log = logging.getLogger("router.linkstate")
_IN = {opcode: f"in_{opcode}" for opcode in (HELLO, RA, LSR, LSU, MAU, MAR)}
_CARRY_LS_SEQ = (RA, LSU)  # their handlers request the link state themselves, with the right seq


class LinkStateEngine:
    """The control plane of one node: ``tick``/``handle``/``link_up``/``link_down`` return what to send."""

    def __init__(self, node_id: str, instance: int, config: LinkStateConfig | None = None) -> None:
        if not isinstance(node_id, str) or not node_id or "/" in node_id or node_id == "all":
            raise ValueError(f"invalid node id {node_id!r}")
        self.node_id = node_id
        self.instance = instance
        self.config = config or LinkStateConfig()
        self.counters: Counter[str] = Counter()
        # links whose peer claims the id of a node alive elsewhere with another instance: everything on
        # them is ignored, and the adapter closes them (take_impostors); bounded by the links
        self._impostor_links: dict[LinkId, str] = {}
        self._impostors_to_close: list[LinkId] = []
        self._neighbors = NeighborTable(node_id, instance, self.config)
        self._lsdb = LinkStateDb(node_id, self.config)
        self._topology = Topology(node_id)
        self._routes = Routes(node_id)
        self._valid_origins: dict[str, frozenset[str]] | None = {}
        self._local = LocalAddresses()
        self._remote = RemoteAddresses()
        self._flood = FloodFilter()
        # origin -> (neighbour, link) its last new flooded message came from: the reverse path to it
        self._flood_parent: dict[str, tuple[str, LinkId]] = {}
        self._hop_table: dict[str, tuple[str, LinkId]] | None = None  # node -> (next hop, link), lazy
        self._want_lsr: dict[str, int] = {}  # node -> ls_seq wanted, waiting until reachable
        self._want_mar: set[str] = set()
        self._awaiting_lsu: set[str] = set()  # LSR sent, no LSU yet: asked again after request_retry
        self._awaiting_mau: set[str] = set()  # MAR sent, not caught up yet: asked again after request_retry
        self._owe_lsu: set[str] = set()  # LSR senders we could not answer yet
        self._owe_mau: set[str] = set()  # MAR senders we could not answer yet
        self._wants_due = False  # something became reachable since the wants were last tried
        self._last_ra = -math.inf
        self._last_mau = -math.inf      # the last diff MAU: the next waits `mobile_interval`
        self._last_scan = -math.inf
        self._last_retry = -math.inf
        self._last_change = -math.inf
        self._routes_epoch = 0
        self._warn = LogOnce(log)
        self._scopes: dict[str | None, tuple[Scope, str | None]] = {}
        self._lsr_body = LinkStateRequest(node_id, instance).to_map()
        self._lsu_cache: tuple[int, dict[str, Any]] | None = None
        self._windows = {RA: self.config.ra_dedup_window, MAU: self.config.ls_max_age}  # flood dedup
        self._handlers = {HELLO: self._on_hello, RA: self._on_ra, LSR: self._on_lsr, LSU: self._on_lsu,
                          MAU: self._on_mau, MAR: self._on_mar}

    # == events ===========================================================================================
    def link_up(self, link_id: LinkId, cost: int, now: float) -> list[Outgoing]:
        """An inter-router control link is open; ``cost`` = max of both ends' configured cost (so both ends
        agree). Called again for an open link, it changes the link's cost (published at the next tick)."""
        known = link_id in self._neighbors.links
        changes = self._neighbors.link_up(link_id, cost)
        out: list[Outgoing] = []
        self._apply(changes, now, out)
        if not known:
            out.append(self._hello_on((link_id,)))
        return out

    def link_down(self, link_id: LinkId, now: float) -> list[Outgoing]:
        """The link (or its connection) closed: routes change now, not after a timer."""
        out: list[Outgoing] = []
        self._warn.reset(("malformed", ("link", link_id)))
        self._impostor_links.pop(link_id, None)
        for origin in [o for o, (_, link) in self._flood_parent.items() if link == link_id]:
            del self._flood_parent[origin]
        self._apply(self._neighbors.link_down(link_id), now, out)
        if self._lsdb.commit_own():
            self._last_change = now
            self._recompute(now)
            self._send_ra(now, out)
        self._flush_wants(now, out)
        return out

    def tick(self, now: float) -> list[Outgoing]:
        """Timers: HELLO, expiries, LS commit and path computation, pending requests, MAU diff, RA.

        Cheap when nothing is due, so it may be called often; paths are recomputed here, at most once per
        call and only after a link state changed, so convergence speed follows the tick rate.
        """
        out: list[Outgoing] = []
        self._apply(self._neighbors.expire(now), now, out)
        if self._neighbors.hello_due(now):
            self._neighbors.hello_sent(now)
            if self._neighbors.links:
                out.append(self._hello_on(tuple(self._neighbors.links)))
        if due(now, self._last_scan, self.config.hello_interval):
            self._scan(now)
        if due(now, self._last_retry, self.config.request_retry / 2):
            self._retry_requests(now)
        send_ra = self._lsdb.commit_own()
        if send_ra:
            self._last_change = now
        if self._lsdb.has_changes:
            self._recompute(now)
        if self._wants_due:
            self._flush_wants(now, out)
        if due(now, self._last_mau, self.config.mobile_interval):
            while (diff := self._local.take_diff(MAU_CHUNK)) is not None:   # a burst: several in order
                self._last_mau = now
                seq, added, deleted = diff
                body = MobileAddressUpdate(self.node_id, self.instance, seq, add=tuple(added),
                                           delete=tuple(deleted), hints=tuple(added.values())).to_map()
                self._flood_out(MOBILE_ALL, MAU, body, out)
                send_ra = True  # advertise the seq only after the diff went out
        interval = self.config.ra_interval_flux if self.in_flux(now) else self.config.ra_interval
        if send_ra or due(now, self._last_ra, interval):
            self._send_ra(now, out)
        return out

    def handle(self, message: Mapping[str, Any], now: float, link_id: LinkId) -> list[Outgoing]:
        """A control message received on ``link_id`` (map: see ``envelope``); bad input is logged, not raised.

        Messages for another node are forwarded toward it; flooded ones are processed and flooded on once.
        """
        try:
            to, opcode, body, trace = unpack(message)
        except ControlMessageError as err:
            self._reject(err, link_id)
            return []
        scope, target = self._scopes.get(to) or self._classify(to)
        if scope is Scope.NODE and target != self.node_id:
            return self._forward(message, target, trace)
        if scope is Scope.ALL:
            key = flood_key(opcode, body)
            if key is not None and not self._flood.first(key, now, self._windows.get(opcode, 0.0)):
                self.counters["flood_duplicate"] += 1
                return []
        try:
            msg = parse(opcode, body)
        except ControlMessageError as err:
            self._reject(err, link_id)
            return []
        if msg.id == self.node_id:
            self._own_id_seen(msg)
            return []
        if link_id in self._impostor_links:
            self.counters["impostor_dropped"] += 1
            return []
        if (opcode == HELLO or (trace and trace[-1] == msg.id)) and self._impostor(msg, link_id):
            return []
        out: list[Outgoing] = []
        if not self._admit(msg, now, out, request_ls=opcode not in _CARRY_LS_SEQ):
            return out
        if scope is Scope.ALL and (opcode == RA or (opcode == MAU and not msg.is_absolute)):
            if trace:
                self._flood_parent[msg.id] = trace[-1], link_id
            # the origin sent it to its own neighbours itself: flood on only to the others (in a full mesh,
            # nobody), so that each node decodes one copy rather than one per neighbour
            links = self._flood_links(exclude=link_id, trace=trace, covered=self._lsdb.peers_of(msg.id))
            if links:
                out.append(Outgoing({"to": to, "opcode": opcode, "body": body,
                                     "trace": [*trace, self.node_id]}, links))
        self.counters[_IN[opcode]] += 1
        self._handlers[opcode](msg, now, link_id, out)
        return out

    def heard(self, link_id: LinkId, now: float) -> None:
        """Bytes arrived on ``link_id`` (any frame, data or control): its neighbour counts as heard now."""
        self._neighbors.heard(link_id, now)

    def route_control(self, target: str, trace: Sequence[str]) -> LinkId | None:
        """The link to forward a control message for node ``target`` on (None: drop it).

        For an adapter that forwards transit control messages itself, without decoding their body (what
        :meth:`handle` does for a message addressed to another node): send it on the returned link with our
        id appended to its trace. Follows the computed path, else, while none is computed yet, the reverse
        path of ``target``'s last flooded message; never to a node already in ``trace``.
        """
        if self.node_id in trace:
            self.counters["dropped_loop"] += 1
            return None
        route = self._control_route(target)
        if route is None or route[0] in trace:
            self.counters["dropped_no_route"] += 1
            return None
        self.counters["forwarded"] += 1
        return route[1]

    def add_local_address(self, address: str, hint: int = HINT_BALANCED) -> None:
        """``address`` got its first local destination (advertised at the next tick)."""
        if not isinstance(address, str) or not address:
            raise ValueError(f"invalid address {address!r}")
        self._local.add(address, hint)

    def remove_local_address(self, address: str) -> None:
        """``address`` lost its last local destination."""
        self._local.remove(address)

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

    # == message handlers =================================================================================
    def _on_hello(self, msg: Hello, now: float, link_id: LinkId, out: list[Outgoing]) -> None:
        if link_id not in self._neighbors.links:
            self.counters["hello_unknown_link"] += 1
            return
        newly_heard, changes = self._neighbors.receive(msg, now, link_id)
        if newly_heard:
            out.append(self._hello_on((link_id,)))  # answer at once: bidirectional in one round trip
        self._apply(changes, now, out)

    def _on_ra(self, msg: RouterAdvertisement, now: float, link_id: LinkId, out: list[Outgoing]) -> None:
        node = self._lsdb.nodes[msg.id]
        self._lsdb.refresh(node, now)
        if msg.ls_seq > node.ls_seq:
            self._request_ls(node, msg.ls_seq, now, out)
        self._remote.advertised(msg.id, msg.mobile_seq)
        if msg.mobile_seq > self._remote.seq_of(msg.id):
            self._request_ma(msg.id, now, out)

    def _on_lsr(self, msg: LinkStateRequest, now: float, link_id: LinkId, out: list[Outgoing]) -> None:
        self._send_lsu(msg.id, out, via=link_id)

    def _on_lsu(self, msg: LinkStateUpdate, now: float, link_id: LinkId, out: list[Outgoing]) -> None:
        node = self._lsdb.nodes[msg.id]
        node.lsr_at = -math.inf  # answered: a later RA may ask again
        self._awaiting_lsu.discard(msg.id)
        created = self._lsdb.update_ls(msg.ls, now)
        if created is None:
            return
        for peer in created:
            self._request_ls(self._lsdb.nodes[peer], 1, now, out)
        if not self._remote.heard_of(msg.id):  # its RA did not reach us yet (we joined late): ask now
            self._remote.advertised(msg.id, 0)
            self._send_mar(msg.id, now, out)

    def _on_mau(self, msg: MobileAddressUpdate, now: float, link_id: LinkId, out: list[Outgoing]) -> None:
        result = self._remote.apply(msg)
        self.counters[f"mau_{result.value}"] += 1
        if result is Applied.GAP:
            self._request_ma(msg.id, now, out)

    def _on_mar(self, msg: MobileAddressRequest, now: float, link_id: LinkId, out: list[Outgoing]) -> None:
        if msg.have_seq < self._local.seq:
            self._send_absolute(msg.id, out, via=link_id)

    # == internals ========================================================================================
    def _classify(self, to: str | None) -> tuple[Scope, str | None]:
        result = classify(to)
        if len(self._scopes) < 1024:    # `to` comes from peers: a bounded cache of the usual ones
            self._scopes[to] = result
        return result

    def _admit(self, msg: ControlMessage, now: float, out: list[Outgoing], request_ls: bool) -> bool:
        """Learn the sender; check its instance (restart, stale message, duplicate id)."""
        node = self._lsdb.nodes.get(msg.id)
        if node is not None and node.instance == msg.instance:
            return True  # the usual case
        node, created = self._lsdb.learn(msg.id, now)
        verdict = Verdict.SAME if node.instance == msg.instance else \
            self._lsdb.observe_instance(node, msg.instance, now)
        if verdict is Verdict.SAME and not created:
            return True
        if verdict is Verdict.STALE:
            self.counters["stale_instance"] += 1
            return False
        if verdict is Verdict.DUPLICATE:
            self.counters["duplicate_id"] += 1
            self._warn.once(("duplicate", msg.id), logging.CRITICAL,
                            "duplicate node id %s: instances %s and %s are both active", msg.id,
                            node.instance, msg.instance)
            return False
        if verdict is Verdict.RESTART:
            log.info("node %s restarted (instance %s)", msg.id, msg.instance)
            self._lsdb.restart(node)
            self._remote.flush(msg.id)
            self._want_mar.discard(msg.id)
            self._request_ls(node, 1, now, out)
        elif created and request_ls:
            self._request_ls(node, 1, now, out)
        return True

    def _impostor(self, msg: ControlMessage, link_id: LinkId) -> bool:
        """The peer on `link_id` speaks for itself as node `msg.id`, with an instance other than the one of
        node `msg.id` that is alive elsewhere (reachable through another neighbour, or a neighbour on
        another link): an impostor (or a second process with the same id). Never a neighbour, never
        routed to: its link is ignored from now on and closed by the adapter; logged once per id. A node
        that really restarted lost its old links first, so it is not alive elsewhere any more (at most
        one hello_max_age after, when it was reached through another node)."""
        node = self._lsdb.nodes.get(msg.id)
        if node is None or node.instance is None or node.instance == msg.instance:
            return False
        hop = self._routes.next_hop.get(msg.id)
        if hop is None or (hop == msg.id and self._neighbors.link_of(msg.id) == link_id):
            return False
        self._impostor_links[link_id] = msg.id
        self._impostors_to_close.append(link_id)
        self.counters["impostor"] += 1
        self._warn.once(("impostor", msg.id), logging.CRITICAL,
                        "refusing a neighbour claiming to be node %s (instance %s): node %s is alive with "
                        "instance %s; closing that inter-router connection", msg.id, msg.instance, msg.id,
                        node.instance)
        return True

    def take_impostors(self) -> list[LinkId]:
        """Links found to lead to an impostor since the last call: the adapter closes them."""
        out, self._impostors_to_close = self._impostors_to_close, []
        return out

    def _own_id_seen(self, msg: ControlMessage) -> None:
        if msg.instance == self.instance:
            self.counters["own_echo"] += 1
            return
        self.counters["duplicate_id"] += 1
        self._warn.once(("duplicate", self.node_id, msg.instance), logging.CRITICAL,
                        "duplicate node id %s: another node (instance %s) uses our id (instance %s)",
                        self.node_id, msg.instance, self.instance)

    def _reject(self, err: ControlMessageError, link_id: LinkId) -> None:
        if isinstance(err, UnsupportedVersionError):
            self.counters["newer_version"] += 1
            self._warn.once(("version", err.sender), logging.WARNING,
                            "dropping control messages from %s: %s", _shown(err.sender), _cut(err.reason))
            return
        self.counters["malformed"] += 1
        who = err.sender if err.sender is not None else ("link", link_id)
        self._warn.once(("malformed", who), logging.WARNING,
                        "dropping malformed control message from %s: %s",
                        _shown(err.sender) if err.sender is not None else f"link {link_id!r}",
                        _cut(err.reason))

    def _apply(self, changes: list[NeighborChange], now: float, out: list[Outgoing]) -> None:
        """Neighbour changes go into our own link state (published by the next commit)."""
        for change in changes:
            self._routes_epoch += 1
            self._wants_due = True
            self._hop_table = None
            if change.cost is None:
                log.info("neighbour %s lost", change.node)
                self._lsdb.del_own_peer(change.node)
                continue
            self._lsdb.set_own_peer(change.node, change.cost)
            if change.new:
                log.info("neighbour %s up (cost %s)", change.node, change.cost)
                node, _ = self._lsdb.learn(change.node, now)
                self._request_ls(node, node.ls_seq + 1, now, out)

    def _scan(self, now: float) -> None:
        """Once per hello interval: age link states, delete forgotten nodes, prune the flood filter."""
        self._last_scan = now
        aged, deleted = self._lsdb.expire(now, self._neighbors.is_neighbor)
        for node in aged:
            log.info("link state of %s aged out", node)
        for node in deleted:
            log.debug("node %s forgotten", node)
            self._remote.flush(node)
            self._flood_parent.pop(node, None)
            self._want_lsr.pop(node, None)
            self._want_mar.discard(node)
            self._awaiting_lsu.discard(node)
            self._awaiting_mau.discard(node)
            self._owe_lsu.discard(node)
            self._owe_mau.discard(node)
        self._flood.prune(now, self.config.ls_max_age)
        self._wants_due = True

    def _retry_requests(self, now: float) -> None:
        """LSR/MAR lost on the way (e.g. a transit node without a route yet) are asked again."""
        self._last_retry = now
        retry = self.config.request_retry
        for node_id in list(self._awaiting_lsu):
            node = self._lsdb.get(node_id)
            if node is None or node.ls_seq >= node.lsr_seq:
                self._awaiting_lsu.discard(node_id)
            elif due(now, node.lsr_at, retry):
                self._awaiting_lsu.discard(node_id)
                self._want_lsr[node_id] = max(node.lsr_seq, self._want_lsr.get(node_id, 0))
                self._wants_due = True
        for node_id in list(self._awaiting_mau):
            if not self._remote.behind(node_id):
                self._awaiting_mau.discard(node_id)
            elif not self._remote.request_outstanding(node_id, now, retry):
                self._awaiting_mau.discard(node_id)
                self._want_mar.add(node_id)
                self._wants_due = True

    def _recompute(self, now: float) -> None:
        for node in self._lsdb.take_changes():
            self._topology.set_link_state(node, self._lsdb.peers_of(node))
        routes = compute_routes(self._topology.adjacency, self.node_id)
        if routes.next_hop != self._routes.next_hop or routes.cost != self._routes.cost:
            self._routes_epoch += 1
        self._routes = routes
        self._hop_table = None
        self._valid_origins = None
        self._last_change = now
        self._wants_due = True
        self.counters["recompute"] += 1

    def _hops(self) -> dict[str, tuple[str, LinkId]]:
        """Node -> (next hop, link) by the computed paths, neighbours on their own link as a fallback."""
        table = self._hop_table
        if table is None:
            bound = self._neighbors.bound_links()
            table = {dest: (hop, bound[hop]) for dest, hop in self._routes.next_hop.items() if hop in bound}
            for node, link in bound.items():
                table.setdefault(node, (node, link))
            self._hop_table = table
        return table

    def _control_route(self, node: str) -> tuple[str, LinkId] | None:
        """(next hop, link) for a control message to ``node``: the computed path, else the reverse path of
        its last flooded message (first-arrival tree, so loop-free) while no path is computed yet."""
        return (self._hop_table or self._hops()).get(node) or self._flood_parent.get(node)

    def _forward(self, message: Mapping[str, Any], target: str, trace: Sequence[str]) -> list[Outgoing]:
        """Transit: pass a message for ``target`` to our next hop toward it."""
        link = self.route_control(target, trace)
        if link is None:
            return []
        return [Outgoing({"to": message["to"], "opcode": message["opcode"], "body": message["body"],
                          "trace": [*trace, self.node_id]}, (link,))]

    def _flood_links(self, exclude: LinkId | None = None, trace: Sequence[str] = (),
                     covered: Container[str] | None = None) -> tuple[LinkId, ...]:
        """Links to flood on: every bound one but `exclude`'s and those to nodes in `trace` or `covered`.

        `covered`: the neighbours of the message's origin, as its link state says. The origin floods to
        them itself; if its link to one of them just went down, that node misses this update and catches
        up through the sequence gap (MAR) or the next RA, as after a lost message."""
        covered = covered or ()
        return tuple([link for node, link in self._neighbors.bound_links().items()
                      if link != exclude and node not in trace and node not in covered])

    def _flood_out(self, address: str, opcode: str, body: dict[str, Any], out: list[Outgoing]) -> None:
        links = self._flood_links()
        if links:
            out.append(outgoing(address, opcode, body, [self.node_id], links))

    def _hello_on(self, links: tuple[LinkId, ...]) -> Outgoing:
        return outgoing(HELLO_ADDRESS, HELLO, self._neighbors.hello().to_map(), [self.node_id], links)

    def _send_ra(self, now: float, out: list[Outgoing]) -> None:
        self._last_ra = now
        body = RouterAdvertisement(self.node_id, self.instance, self._lsdb.ls_seq, self._local.seq).to_map()
        self._flood_out(ROUTER_ALL, RA, body, out)

    def _to_node(self, node: str, address: str, opcode: str, body: dict[str, Any], out: list[Outgoing],
                 via: LinkId | None = None) -> bool:
        route = self._control_route(node)
        if route is not None:
            link = route[1]
        elif via is not None and self._neighbors.peer_on(via) == node:
            link = via  # the requester is the peer on the link its request came on
        else:
            return False
        message = {"to": address, "opcode": opcode, "body": body, "trace": [self.node_id]}
        out.append(Outgoing(message, (link,)))
        return True

    def _request_ls(self, node: RemoteNode, want: int, now: float, out: list[Outgoing]) -> None:
        """Send ``node`` an LSR (once per ``request_retry``), or wait until it is reachable."""
        if self._want_lsr:
            want = max(want, self._want_lsr.pop(node.id, 0))
        if node.ls_seq >= want:
            return
        if node.lsr_seq >= want and not due(now, node.lsr_at, self.config.request_retry):
            return
        if self._to_node(node.id, router_address(node.id), LSR, self._lsr_body, out):
            node.lsr_at, node.lsr_seq = now, want
            self._awaiting_lsu.add(node.id)
        else:
            self._want_lsr[node.id] = want

    def _request_ma(self, node: str, now: float, out: list[Outgoing]) -> None:
        """Send ``node`` a MAR if we are behind it and none is outstanding, or wait until reachable."""
        self._want_mar.discard(node)
        if not self._remote.behind(node) or \
                self._remote.request_outstanding(node, now, self.config.request_retry):
            return
        if not self._send_mar(node, now, out):
            self._want_mar.add(node)

    def _send_mar(self, node: str, now: float, out: list[Outgoing]) -> bool:
        body = MobileAddressRequest(self.node_id, self.instance, self._remote.seq_of(node)).to_map()
        if not self._to_node(node, mobile_address(node), MAR, body, out):
            return False
        self._remote.requested(node, now)
        self._awaiting_mau.add(node)
        return True

    def _send_lsu(self, node: str, out: list[Outgoing], via: LinkId | None = None) -> None:
        seq = self._lsdb.ls_seq
        if self._lsu_cache is None or self._lsu_cache[0] != seq:
            self._lsu_cache = seq, LinkStateUpdate(self.node_id, self.instance, self._lsdb.own_ls()).to_map()
        if self._to_node(node, router_address(node), LSU, self._lsu_cache[1], out, via):
            self._owe_lsu.discard(node)
        else:
            self._owe_lsu.add(node)

    def _send_absolute(self, node: str, out: list[Outgoing], via: LinkId | None = None) -> None:
        published = self._local.published()
        body = MobileAddressUpdate(self.node_id, self.instance, self._local.seq, exist=tuple(published),
                                   hints=tuple(published.values())).to_map()
        if self._to_node(node, mobile_address(node), MAU, body, out, via):
            self._owe_mau.discard(node)
        else:
            self._owe_mau.add(node)

    def _flush_wants(self, now: float, out: list[Outgoing]) -> None:
        """Send the requests and answers that waited for their node to become reachable."""
        self._wants_due = False
        for node_id in list(self._want_lsr):
            node = self._lsdb.get(node_id)
            if node is None:
                del self._want_lsr[node_id]
            else:
                self._request_ls(node, 0, now, out)
        for node_id in list(self._want_mar):
            self._request_ma(node_id, now, out)
        for node_id in list(self._owe_lsu):
            self._send_lsu(node_id, out)
        for node_id in list(self._owe_mau):
            self._send_absolute(node_id, out)


def _shown(sender: object) -> str:
    """A peer-sent node id for a log line (ids of valid messages are short; a bad one may not be)."""
    return sender if isinstance(sender, str) and len(sender) <= 80 else short(sender)


def _cut(reason: str, limit: int = 300) -> str:
    return reason if len(reason) <= limit else f"{reason[:limit]}... ({len(reason)} characters)"
