"""The link-state engine: wires HELLO, link-state db, paths and mobile-address sync of one node.

Sans-IO: the adapter passes time and events in and carries out the returned :class:`Outgoing`.
See the package docstring for how control messages are flooded and routed.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from router.linkstate.admission import Admission
from router.linkstate.config import LinkStateConfig, due
from router.linkstate.envelope import MOBILE_ALL, LinkId, Outgoing, Scope, unpack
from router.linkstate.flood import FloodFilter, flood_key
from router.linkstate.lsdb import LinkStateDb
from router.linkstate.messages import (
    HELLO,
    LSR,
    LSU,
    MAR,
    MAU,
    RA,
    ControlMessageError,
    Hello,
    LinkStateRequest,
    LinkStateUpdate,
    MobileAddressRequest,
    MobileAddressUpdate,
    RouterAdvertisement,
    parse,
)
from router.linkstate.mobile import HINT_BALANCED, MAU_CHUNK, Applied, LocalAddresses, RemoteAddresses
from router.linkstate.neighbors import NeighborChange, NeighborTable
from router.linkstate.paths import Routes, Topology, compute_routes
from router.linkstate.sending import Sending
from router.linkstate.views import EngineViews
from router.logs import LogOnce

if TYPE_CHECKING:        # networkx is imported only when a graph is exported (saves ~80 ms of start-up)
    pass

log = logging.getLogger("router.linkstate")
_IN = {opcode: f"in_{opcode}" for opcode in (HELLO, RA, LSR, LSU, MAU, MAR)}
_CARRY_LS_SEQ = (RA, LSU)  # their handlers request the link state themselves, with the right seq


class LinkStateEngine(EngineViews, Admission, Sending):
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
        self._origins_epoch = 0         # bumped when any node's link state changed: others' trees may have
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
        self._remote.step()     # a large absolute MAU's index, a bounded part of it (the adapter may do more)
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

    def flood_duplicate(self, to: object, opcode: str, key: Hashable, now: float) -> bool:
        """Whether a flooded message of `key` (read from its bytes, router.node.controlpeek) is a copy that
        `handle` would drop: then it is counted as one, and need not be decoded. The first copy is
        remembered by `handle`, as before."""
        if not isinstance(to, str):
            return False
        scope, _target = self._scopes.get(to) or self._classify(to)
        if scope is not Scope.ALL or not self._flood.seen(key, now, self._windows.get(opcode, 0.0)):
            return False
        self.counters["flood_duplicate"] += 1
        return True

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

    def apply_address_updates(self, limit: int = MAU_CHUNK) -> bool:
        """Bring up to ``limit`` more addresses of large absolute MAUs (and of forgotten nodes) into
        ``known_addresses``; True if some are still pending. ``tick`` does one such step; an adapter runs
        more, one per loop turn, so that no turn applies thousands of addresses."""
        return self._remote.step(limit)
























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
        topology_changed = False
        for node in self._lsdb.take_changes():
            if self._topology.set_link_state(node, self._lsdb.peers_of(node)):
                topology_changed = True
        routes = compute_routes(self._topology.adjacency, self.node_id)
        if routes.next_hop != self._routes.next_hop or routes.cost != self._routes.cost:
            self._routes_epoch += 1
        self._routes = routes
        self._hop_table = None
        self._valid_origins = None
        if topology_changed:
            # valid origins depend on every origin's tree, not only on our paths: a link between two other
            # nodes that comes back (a restarted node's) leaves our next hops as they were, but a multicast
            # copy from one of them must stop being forwarded toward the other (it gets its own)
            self._origins_epoch += 1
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













