"""Inter-router connections: their links, the control messages on them, and the mesh's routes.

Between neighbours there is one control link pair (terminus capability `qd.router`) and one data link pair
(`qd.router-data`), as in Qpid Dispatch Router, plus streaming links opened on demand for streamed
messages (router.adapter.streamlinks). The connecting side (a connector) opens a session and the
four links; the listening side recognises them by capability. Control traffic has its own links, so it is
never stuck behind data. The data links become records of the forwarding core: the data-out link a
consumer that every remotely served address can use, the data-in link a producer routed per message.

`RouterLinks` is the glue between the engine and the control plane (router.node.mesh.MeshControl, given
as `mesh`): it tells the control plane when a peer's control links are up or down, hands it the control
messages that arrive, sends the ones it returns, and gives the core the control plane's view of the mesh
(`sync_routes`) once per pump when it changed.
"""

from __future__ import annotations

import logging
import time

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_LOCAL_ACTIVE,
    PN_REMOTE_ACTIVE,
    PN_SND_SETTLED,
    PN_SYMBOL,
    pn_connection_close,
    pn_connection_remote_container,
    pn_connection_remote_offered_capabilities,
    pn_connection_remote_properties,
    pn_data_enter,
    pn_data_exit,
    pn_data_put_array,
    pn_data_put_symbol,
    pn_delivery,
    pn_delivery_partial,
    pn_delivery_pending,
    pn_delivery_readable,
    pn_delivery_settle,
    pn_link_advance,
    pn_link_credit,
    pn_link_flow,
    pn_link_is_sender,
    pn_link_open,
    pn_link_recv,
    pn_link_remote_source,
    pn_link_remote_target,
    pn_link_send,
    pn_link_set_snd_settle_mode,
    pn_link_source,
    pn_link_state,
    pn_link_target,
    pn_receiver,
    pn_sender,
    pn_session,
    pn_session_open,
    pn_session_set_incoming_capacity,
    pn_terminus_capabilities,
)

from router.adapter.endpoints import SESSION_CAPACITY, refuse
from router.adapter.pndata import map_integer, symbols
from router.adapter.streamlinks import STREAM, STREAMING_LINKS, StreamLinks
from router.logs import cut

log = logging.getLogger(__name__)

ROUTER_ROLES = ("inter-router", "edge")    # connections that carry router links (edge: router.node.edges)
CONTROL = "qd.router"
DATA = "qd.router-data"
COST_PROPERTY = "qd.inter-router-cost"
CONTROL_CREDIT = 1000        # control messages are small and never wait for a consumer
ROUTE_BATCH = 100            # changed mobile addresses given to the core per pump (about 0.4 ms)
# One bulk turn (queued MAUs decoded, addresses indexed, the table rescanned after the mesh's view changed)
# works for about this long, then yields the loop: at 20,000 addresses a rescan in one callback held the
# node's other traffic for 30-50 ms of CPU, and turns of 1,000 addresses after a decode step still took
# 7-10 ms, which a node sharing its cores stretched to 40-60 ms of wall time (issue 33, point 3).
BULK_TURN = 0.002
RESCAN_STEP = 100            # addresses rescanned between two looks at the clock (2-5 us each)
# While an address flood is being applied (queued MAUs, changed addresses), bulk turns take at most this
# share of the node's time: between turns the node sleeps or serves data, so on a shared machine it stays
# quick to wake for traffic instead of competing for a core for the whole flood (issue 18, canary p99).
BULK_DUTY = 0.3


class DutyCycle:
    """Paces turns of bulk work so that they take at most `duty` of the time while the work lasts: after a
    turn of d seconds, the next one is due d / duty seconds after the turn began."""

    def __init__(self, duty: float) -> None:
        self.duty = duty
        self.next_turn = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_turn

    def turn_done(self, start: float, end: float) -> None:
        """A turn ran from `start` to `end` and more work is left."""
        self.next_turn = start + (end - start) / self.duty

    def wait(self, now: float) -> float:
        """Seconds until the next turn is due (0: now)."""
        return max(0.0, self.next_turn - now)


class RouterLink:
    """One of the four links of an inter-router connection."""

    __slots__ = ("kind", "outgoing", "conn", "handle")

    def __init__(self, kind: str, outgoing: bool, conn: object, handle: object) -> None:
        self.kind = kind            # CONTROL or DATA
        self.outgoing = outgoing    # we send on it
        self.conn = conn
        self.handle = handle

    def __repr__(self) -> str:
        return f"RouterLink({self.kind}, {'out' if self.outgoing else 'in'})"


class RouterPeer:
    """What a node knows about the peer at the other end of an inter-router connection."""

    __slots__ = ("node_id", "cost", "control_in", "control_out", "data_in", "data_out", "up", "data_consumer",
                 "heard_due", "streaming", "stream_out", "stream_in", "data_seen", "data_at")

    def __init__(self, node_id: str, cost: int) -> None:
        self.node_id = node_id
        self.cost = cost            # max of both ends' configured cost
        self.control_in: object = None
        self.control_out: object = None
        self.data_in: object = None
        self.data_out: object = None
        self.up = False             # both control links open both ways: the control plane uses it
        self.data_consumer: object = None  # the forwarding core's record of our data-out link
        self.heard_due = 0.0        # when input from it next tells the control plane it is alive
        self.streaming = False      # it takes streaming links (router.adapter.streamlinks)
        self.stream_out: list = []  # our streaming links to it (core consumers)
        self.stream_in = 0          # streaming links it opened to us
        self.data_seen = 0          # deliveries seen on its data-in link (StreamLinks.size_window)
        self.data_at = -1e9         # when that count last moved (the core's clock)

    def add(self, rl: RouterLink) -> None:
        if rl.kind == STREAM:
            return                  # streaming links have no slot: see stream_out / stream_in
        slot = ("control" if rl.kind == CONTROL else "data") + ("_out" if rl.outgoing else "_in")
        setattr(self, slot, rl.handle)

    def remove(self, handle: object) -> None:
        """The link `handle` is gone (it is freed next): forget it, so nothing uses a freed link."""
        for slot in ("control_in", "control_out", "data_in", "data_out"):
            if getattr(self, slot) == handle:
                setattr(self, slot, None)
        if self.stream_out:
            self.stream_out = [c for c in self.stream_out if c.handle != handle]

    def control_ready(self) -> bool:
        both = PN_LOCAL_ACTIVE | PN_REMOTE_ACTIVE
        return all(h is not None and pn_link_state(h) & both == both
                   for h in (self.control_in, self.control_out))


def peer_from_open(pn_conn: object, own_cost: int) -> RouterPeer:
    """The peer's node id (its container id) and the link cost: max of both ends' costs."""
    c = pn_connection_remote_container(pn_conn)
    node_id = ffi.string(c).decode(errors="replace") if c != ffi.NULL else ""  # any bytes: no crash
    value = map_integer(pn_connection_remote_properties(pn_conn), COST_PROPERTY)
    peer_cost = value if value is not None and value > 0 else 1
    peer = RouterPeer(node_id, max(own_cost, peer_cost))
    peer.streaming = STREAMING_LINKS in symbols(pn_connection_remote_offered_capabilities(pn_conn))
    return peer


def capabilities(terminus: object) -> set[str]:
    """The capability symbols of a terminus (empty set when none)."""
    return symbols(pn_terminus_capabilities(terminus))


def _set_capability(terminus: object, capability: str) -> None:
    caps = pn_terminus_capabilities(terminus)
    pn_data_put_array(caps, False, PN_SYMBOL)
    pn_data_enter(caps)
    raw = capability.encode()
    keep = ffi.new("char[]", raw)
    pn_data_put_symbol(caps, ffi.new("pn_bytes_t *", (len(raw), keep))[0])
    pn_data_exit(caps)


def open_router_links(pn_conn: object, node_id: str, session_capacity: int) -> list[tuple[RouterLink, bool]]:
    """Connector side: open a session and the control and data link pairs.

    Returns `(RouterLink, is_sender)` for each; the caller registers them and flows credit on receivers.
    """
    ssn = pn_session(pn_conn)
    pn_session_set_incoming_capacity(ssn, session_capacity)
    pn_session_open(ssn)
    made = []
    for kind in (CONTROL, DATA):
        for outgoing in (True, False):
            name = f"qdlink.{node_id}.{kind}.{'out' if outgoing else 'in'}".encode()
            link = pn_sender(ssn, name) if outgoing else pn_receiver(ssn, name)
            terminus = pn_link_source(link) if outgoing else pn_link_target(link)
            _set_capability(terminus, kind)
            # the far end's terminus carries the capability too, so either side can recognise it
            _set_capability(pn_link_target(link) if outgoing else pn_link_source(link), kind)
            if kind == CONTROL and outgoing:
                pn_link_set_snd_settle_mode(link, PN_SND_SETTLED)
            pn_link_open(link)
            made.append((RouterLink(kind, outgoing, None, link), outgoing))
    return made


class RouterLinks:
    """The inter-router side of one engine: peers' links, control messages, and routes for the core."""

    def __init__(self, engine: object) -> None:
        self.engine = engine
        self.core = engine.core
        self.node_id = engine.node_id
        self.links = engine.links
        self.dirty = engine.dirty
        # the control plane (router.node.mesh.MeshControl): told when peers' control links come and go,
        # given the control messages that arrive; None on an engine without one
        self.mesh: object = None
        # edge mode (router.node.edges): an edge's uplinks, or an interior's edges; None: neither
        self.edge: object = None
        self._links_epoch = 0        # bumped when a data link to a peer comes or goes
        self._routes_synced: tuple[int, int] | None = None   # (routes epoch, links epoch) given the core
        self._origins_synced = 0            # the link-state engine's origins epoch the core's cache is of
        # mobile addresses whose holders changed, not yet given to the core: ROUTE_BATCH per pump, so that
        # a flood of 20,000 new addresses does not hold the loop (and other traffic) for 200 ms
        self._route_backlog: set[str] = set()
        self._bulk = DutyCycle(BULK_DUTY)   # turns of applying a flood, on the perf_counter() clock
        self.streams = StreamLinks(engine, _set_capability)   # a link per streamed message to a peer
        self._tagnum = ffi.new("uint64_t *")
        self._tag = ffi.new("pn_bytes_t *", (8, ffi.cast("char *", self._tagnum)))[0]

    # ---- connections and links ---------------------------------------------------------------------------
    def connection_opened(self, conn: object) -> None:
        """The peer's Open arrived on an inter-router connection: learn who it is; a connector opens the
        links."""
        c = conn.pn_conn
        conn.router = peer = peer_from_open(c, conn.cost)
        conn.kind = "inter-router"
        if conn.role == "edge":
            problem = "this node takes no edge connections" if self.edge is None else \
                self.edge.opened(conn, peer)
            if problem is not None:
                log.warning("edge connection %s (id %r) refused: %s", conn.peer, peer.node_id, problem)
                conn.set_close_condition(b"amqp:unauthorized-access", problem.encode())
                pn_connection_close(c)
                conn.router = None
                return
        if peer.node_id == self.node_id:
            log.error("inter-router connection %s leads back to this node (%s): closing it",
                      conn.peer, cut(self.node_id))
            conn.set_close_condition(b"qd:connection-role", b"connected to itself")
            pn_connection_close(c)
            return
        log.info("inter-router connection %s to node %s (cost %d)", conn.peer, cut(peer.node_id), peer.cost)
        if conn.client:
            for rl, is_sender in open_router_links(c, self.node_id, SESSION_CAPACITY):
                self._register(rl, conn, is_sender)

    def attached(self, link: object, conn: object) -> None:
        """The peer node attached one of the inter-router links (we are the listening side)."""
        is_sender = bool(pn_link_is_sender(link))
        caps = capabilities(pn_link_remote_source(link)) | capabilities(pn_link_remote_target(link))
        kind = CONTROL if CONTROL in caps else DATA if DATA in caps else STREAM if STREAM in caps else None
        if kind is None or conn.router is None:
            refuse(link, b"qd:connection-role", b"an inter-router connection carries only inter-router links")
            return
        if kind == STREAM:
            problem = self.streams.admit(conn, is_sender)
            if problem is not None:
                refuse(link, b"amqp:resource-limit-exceeded", problem)
                return
        pn_link_open(link)
        self._register(RouterLink(kind, is_sender, conn, link), conn, is_sender)
        self.up_check(conn)

    def _register(self, rl: RouterLink, conn: object, is_sender: bool) -> None:
        """Control links stay RouterLinks; the data links become a core consumer (out) and producer (in)."""
        rl.conn = conn
        peer = conn.router
        peer.add(rl)
        conn.links.add(rl.handle)
        if rl.kind == CONTROL:
            self.links[rl.handle] = rl
            if not is_sender:
                pn_link_flow(rl.handle, CONTROL_CREDIT)
            return
        if rl.kind == STREAM:           # the peer's streaming link (ours are registered as they open)
            p = self.links[rl.handle] = self.core.add_router_producer(rl.handle, conn, peer.node_id)
            p.streaming = True
            return
        if is_sender:
            self.links[rl.handle] = peer.data_consumer = self.core.add_router_consumer(
                rl.handle, conn, peer.node_id)
        else:
            self.links[rl.handle] = self.core.add_router_producer(rl.handle, conn, peer.node_id)
        self.routes_changed()

    def up_check(self, conn: object) -> None:
        """Both control links of `conn` are open both ways: the control plane may use it."""
        peer = conn.router
        if peer is not None and not peer.up and peer.control_ready():
            peer.up = True
            if conn.role == "edge":
                if self.edge is not None:
                    self.edge.link_up(conn, peer)
            elif self.mesh is not None:
                self.mesh.link_up(conn, peer)

    def router_down(self, conn: object) -> None:
        peer = conn.router
        if peer is not None and peer.up:
            peer.up = False
            if conn.role == "edge":
                if self.edge is not None:
                    self.edge.link_down(conn, peer)
            elif self.mesh is not None:
                self.mesh.link_down(conn, peer)

    # ---- control messages --------------------------------------------------------------------------------
    def send_control(self, conn: object, data: bytes) -> None:
        """Send one encoded control message (pre-settled) to the peer at the end of `conn`."""
        peer = conn.router
        if not conn.alive or peer is None or peer.control_out is None:
            return
        out = peer.control_out
        self._tagnum[0] += 1
        od = pn_delivery(out, self._tag)
        pn_link_send(out, data, len(data))
        pn_link_advance(out)
        pn_delivery_settle(od)
        self.dirty.add(conn)

    def on_delivery(self, d: object, link: object, rl: RouterLink) -> None:
        """A transfer (or an outcome) on a control link."""
        if rl.outgoing:
            pn_delivery_settle(d)
            return
        if not pn_delivery_readable(d) or pn_delivery_partial(d):
            return                                   # control messages are read once complete
        n = pn_delivery_pending(d)
        buf = ffi.new("char[]", max(n, 1))
        n = pn_link_recv(link, buf, n)
        pn_link_advance(link)
        pn_delivery_settle(d)
        if pn_link_credit(link) < CONTROL_CREDIT // 2:
            pn_link_flow(link, CONTROL_CREDIT - max(pn_link_credit(link), 0))
            self.dirty.add(rl.conn)
        if n <= 0:
            return
        if rl.conn.role == "edge":          # edge messages only: an edge never reaches the link-state engine
            if self.edge is not None:
                self.edge.on_control(rl.conn, ffi.buffer(buf, n)[:])
        elif self.mesh is not None:
            self.mesh.on_control(rl.conn, ffi.buffer(buf, n)[:])

    # ---- the mesh's view, given to the core ------------------------------------------------------------
    def _rescan_until(self, until: float) -> None:
        """Rescan the table against the last view in steps of RESCAN_STEP addresses, until the rescan is
        done or time.perf_counter() reaches `until` (one step at least)."""
        core = self.core
        while core.routes_pending:
            core.continue_routes(RESCAN_STEP)
            if time.perf_counter() >= until:
                break

    @property
    def route_backlog(self) -> bool:
        """Changed addresses or queued control messages wait for a later pump (see `bulk_due_in`)."""
        mesh = self.mesh
        return bool(self._route_backlog) or self.core.routes_pending or (
            mesh is not None and (mesh.backlog or bool(mesh.ls.address_updates_pending)))

    def bulk_due_in(self) -> float:
        """Seconds until the next bulk turn may run (0: now)."""
        return self._bulk.wait(time.perf_counter())

    def routes_changed(self) -> None:
        """A data link to a peer came or went: the core's remote destinations need a new look."""
        self._links_epoch += 1

    def sync_routes(self) -> None:
        """Tell the control plane about local addresses gained or lost, let it act, and give the core its
        current view when that changed (cheap when nothing did)."""
        mesh = self.mesh
        edge = self.edge
        if mesh is None:
            if edge is not None:
                edge.sync()                 # an edge node: its uplink gives the core its routes
            return
        if edge is not None:
            edge.sync()                     # an interior's edges: their addresses, merged with ours
        self._sync_routes(mesh, edge)
        if mesh.ls.origins_epoch != self._origins_synced:
            # the topology changed somewhere: multicast's valid origins may differ even where this node's
            # own routes (and so routes_epoch) did not, e.g. a restarted node's link to another peer came up
            self._origins_synced = mesh.ls.origins_epoch
            self.core.origins_changed()

    def _sync_routes(self, mesh: object, edge: object) -> None:
        if self.core.local_changes:
            for key, present in self.core.take_local_address_changes():
                if edge is not None:
                    edge.local_address(key, present)
                else:
                    mesh.local_address(key, present)
        elif not (mesh.backlog or mesh.pending or self._route_backlog or self.core.routes_pending) and \
                self._routes_synced == (mesh.ls.routes_epoch, self._links_epoch) and \
                not mesh.ls.address_changes_pending() and not mesh.ls.address_updates_pending:
            return                      # nothing changed: most pumps
        start = time.perf_counter()
        bulk_turn = self._bulk.due(start)
        until = start + BULK_TURN
        ls = mesh.ls
        if mesh.backlog and bulk_turn:  # large control messages (MAUs), a turn of them
            mesh.handle_backlog(BULK_TURN)
        if mesh.pending:                # act now (paths, address updates), not at the next timer tick
            mesh.tick()
        elif bulk_turn and ls.address_updates_pending:  # a large absolute MAU: the next part of its index
            ls.apply_address_updates()
        changed = ls.take_address_changes()
        epoch = (ls.routes_epoch, self._links_epoch)
        if epoch == self._routes_synced and changed is not None:
            backlog = self._route_backlog   # only mobile addresses changed: O(changed), not a rescan
            backlog |= changed
            rescan = self.core.routes_pending
            if rescan and bulk_turn:        # the rest of the last view's rescan, a turn's worth
                self._rescan_until(until)
            elif backlog and bulk_turn:
                batch = [backlog.pop() for _ in range(min(ROUTE_BATCH, len(backlog)))]
                self.core.update_remote_addresses(batch, ls.holders_of if edge is None else
                                                  edge.holders_of(ls))
            if bulk_turn and (backlog or rescan or mesh.backlog or ls.address_updates_pending):   # more: pace
                self._bulk.turn_done(start, time.perf_counter())
            return
        self._routes_synced = epoch
        self._route_backlog.clear()         # the full view below covers them
        nodes = {}
        for node, cost in ls.costs.items():
            conn = ls.link_to(node)
            peer = getattr(conn, "router", None)
            out = peer.data_consumer if peer is not None else None
            if out is not None and out.alive and conn.alive:
                nodes[node] = (cost, out)
        if edge is not None:
            edge.add_nodes(nodes)
            self.core.set_routes(nodes, edge.holders(ls), ls.radius, lambda: edge.valid_origins(ls), 0)
        else:
            self.core.set_routes(nodes, ls.known_addresses, ls.radius, lambda: ls.valid_origins, 0)
        self._rescan_until(until)
        if self.core.routes_pending:
            self._bulk.turn_done(start, time.perf_counter())
