"""Proton-C event handling for one node: sessions, links, transfers, dispositions, credit.

The engine turns Proton events into calls on the forwarding core (router.forwarding.core) and carries
out the core's decisions on Proton objects. It never reads the clock or touches sockets: the server
(router.node.server) owns I/O and time and calls `process()` after feeding bytes in.

Hot path (a complete single-frame transfer): read it into one reusable buffer, ask the core for a
consumer, send the same bytes on a new outbound delivery, and remember outbound -> inbound. When the
consumer settles, its outcome (with details) is copied back and both deliveries settle. Message bodies
are never decoded; only anonymous-relay transfers are scanned for the `to` property.

Multi-frame transfers are streamed: the consumer is chosen on the first frame and each chunk is passed
on as it arrives, pausing while the consumer's session has more than STREAM_HIGH_WATER bytes waiting,
so memory stays bounded whatever the message size.
"""

from __future__ import annotations

import logging

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_CONNECTION_REMOTE_CLOSE,
    PN_CONNECTION_REMOTE_OPEN,
    PN_DELIVERY,
    PN_LINK_FLOW,
    PN_LINK_REMOTE_CLOSE,
    PN_LINK_REMOTE_DETACH,
    PN_LINK_REMOTE_OPEN,
    PN_LOCAL_ACTIVE,
    PN_LOCAL_CLOSED,
    PN_LOCAL_UNINIT,
    PN_REMOTE_CLOSED,
    PN_SESSION_REMOTE_CLOSE,
    PN_SESSION_REMOTE_OPEN,
    PN_SND_SETTLED,
    PN_TRANSPORT,
    PN_TRANSPORT_CLOSED,
    PN_TRANSPORT_ERROR,
    pn_collector,
    pn_collector_peek,
    pn_collector_pop,
    pn_condition_get_description,
    pn_condition_get_name,
    pn_condition_is_set,
    pn_condition_set_description,
    pn_condition_set_name,
    pn_connection_close,
    pn_connection_condition,
    pn_connection_open,
    pn_connection_state,
    pn_delivery,
    pn_delivery_abort,
    pn_delivery_aborted,
    pn_delivery_link,
    pn_delivery_partial,
    pn_delivery_pending,
    pn_delivery_readable,
    pn_delivery_remote_state,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_delivery_update,
    pn_event_connection,
    pn_event_delivery,
    pn_event_link,
    pn_event_session,
    pn_event_transport,
    pn_event_type,
    pn_event_type_name,
    pn_link_advance,
    pn_link_close,
    pn_link_condition,
    pn_link_credit,
    pn_link_drain,
    pn_link_drained,
    pn_link_flow,
    pn_link_free,
    pn_link_get_drain,
    pn_link_is_sender,
    pn_link_open,
    pn_link_queued,
    pn_link_recv,
    pn_link_remote_snd_settle_mode,
    pn_link_remote_source,
    pn_link_remote_target,
    pn_link_send,
    pn_link_session,
    pn_link_set_snd_settle_mode,
    pn_link_source,
    pn_link_state,
    pn_link_target,
    pn_session_close,
    pn_session_connection,
    pn_session_open,
    pn_session_outgoing_bytes,
    pn_session_set_incoming_capacity,
    pn_session_state,
    pn_terminus_copy,
    pn_terminus_get_address,
    pn_terminus_is_dynamic,
    pn_terminus_set_address,
    pn_transport_condition,
    pn_transport_connection,
)

from router.adapter.connection import Connection
from router.adapter.outcomes import OutcomeSnapshot, copy_outcome, set_modified, set_rejected
from router.adapter.routerlinks import (
    CONTROL,
    CONTROL_CREDIT,
    DATA,
    RouterLink,
    capabilities,
    open_router_links,
    peer_from_open,
)
from router.addressing import address_key
from router.amqp.annotations import (
    AnnotationLayout,
    RouterAnnotations,
    RouterView,
    annotate_ingress,
    router_view,
    trace_nodes,
    with_hop,
)
from router.amqp.codec import IncompleteError, MalformedError, scan_message
from router.forwarding.core import (
    ACCEPTED,
    MODIFIED,
    REJECTED,
    RELEASED,
    TERMINAL,
    Address,
    Consumer,
    McastGroup,
    Producer,
    RemoteDest,
    RouterCore,
)
from router.telemetry.schema import DROPPED, PRESETTLED

log = logging.getLogger(__name__)

SESSION_CAPACITY = 8 * 1024 * 1024   # bytes a peer may have in flight to us per session (bounds memory)
STREAM_HIGH_WATER = 1024 * 1024      # pause a streamed message while its consumer's session holds more
STREAM_CHUNK = 256 * 1024            # bytes moved per step of a streamed message
ANON_SCAN_LIMIT = 64 * 1024          # sections before the body of an anonymous message must fit in this


class NodeOutcome:
    """An outcome made by the node itself (consumer lost), usable where an OutcomeSnapshot is."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: int) -> None:
        self.outcome = outcome

    def apply(self, dst_dlv: object) -> None:
        if self.outcome == MODIFIED:
            set_modified(dst_dlv, failed=True)
        else:
            pn_delivery_update(dst_dlv, self.outcome)


class _RejectNoTo:
    """REJECTED for an anonymous message without a readable `to`."""

    __slots__ = ()
    outcome = REJECTED

    def apply(self, dst_dlv: object) -> None:
        set_rejected(dst_dlv, b"amqp:precondition-failed",
                     b"anonymous relay: the message has no readable 'to' address")


class _RejectOversize:
    """REJECTED for a transfer bigger than its connection's max_message_size (listener limit)."""

    __slots__ = ("limit",)
    outcome = REJECTED

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def apply(self, dst_dlv: object) -> None:
        set_rejected(dst_dlv, b"amqp:link:message-size-exceeded", _oversize_text(self.limit))


def _oversize_text(limit: int) -> bytes:
    return f"message larger than this connection's max-message-size of {limit} bytes".encode()


class _PeerProbe:
    """Stands for 'a consumer on a peer node' when asking for the annotated version of a message."""

    __slots__ = ()
    peer = "?"


_TO_PEER = _PeerProbe()


class Stream:
    """A multi-frame inbound delivery being passed on chunk by chunk."""

    __slots__ = ("in_dlv", "in_link", "producer", "outs", "group", "presettled", "prefix", "routed",
                 "final", "size", "payload", "tel")

    def __init__(self, in_dlv: object, in_link: object, producer: Producer) -> None:
        self.in_dlv = in_dlv
        self.in_link = in_link
        self.producer = producer
        self.outs: list[tuple[Consumer, object]] = []
        self.group: McastGroup | None = None
        self.presettled = False
        self.prefix: bytearray | None = None   # bytes read before an anonymous message was routed
        self.routed = False
        # outcome for the producer decided before the transfer completed (consumer settled early or
        # was lost, or the message could not be routed); applied when the last frame has arrived
        self.final: object = None
        self.size = 0                          # bytes read so far
        self.payload = None                    # mesh: consumer -> its version of the prefix
        # telemetry, once routed: (address, route toward the consumers or None, (ingress, hops, in_link))
        self.tel: tuple | None = None


class Engine:
    """Carries the core's decisions out on Proton objects, for every connection of one node."""

    def __init__(self, core: RouterCore, node_id: str, idle_timeout: float) -> None:
        self.core = core
        self.node_id = node_id
        self.idle_timeout = idle_timeout
        self.collector = pn_collector()
        self.conns: dict[object, Connection] = {}      # pn_connection_t* -> Connection
        self.links: dict[object, Consumer | Producer] = {}  # pn_link_t* -> core record
        self.dirty: set[Connection] = set()            # connections with output to write
        self.dead: list[Connection] = []               # closed connections to tear down
        self.streams: dict[object, Stream] = {}        # inbound pn_delivery_t* -> Stream
        self.stream_outs: dict[object, Stream] = {}    # outbound pn_delivery_t* of a stream -> Stream
        self.paused: set[Stream] = set()
        self._key = ""                                 # routing key of the last anonymous message routed
        # the mesh control plane (router.node.mesh.MeshControl); told when inter-router connections
        # come and go and given the control messages that arrive on them
        self.mesh: object = None
        self.tel: object = None      # router.node.telemetry.NodeTelemetry when telemetry is configured
        self._links_epoch = 0        # bumped when a data link to a peer comes or goes
        self._conn_ids = 0           # the last connection's management identity
        self._routes_synced: tuple[int, int, int] | None = None
        self._bufsize = 64 * 1024
        self._buf = ffi.new("char[]", self._bufsize)
        self._tagnum = ffi.new("uint64_t *")
        self._tag = ffi.new("pn_bytes_t *", (8, ffi.cast("char *", self._tagnum)))[0]
        core.backlog = pn_link_queued
        self._rare = {
            PN_CONNECTION_REMOTE_OPEN: self._on_connection_open,
            PN_CONNECTION_REMOTE_CLOSE: self._on_connection_close,
            PN_SESSION_REMOTE_OPEN: self._on_session_open,
            PN_SESSION_REMOTE_CLOSE: self._on_session_close,
            PN_LINK_REMOTE_OPEN: self._on_link_open,
            PN_LINK_REMOTE_CLOSE: self._on_link_close,
            PN_LINK_REMOTE_DETACH: self._on_link_close,
            PN_TRANSPORT_ERROR: self._on_transport_error,
            PN_TRANSPORT_CLOSED: self._on_transport_closed,
        }

    # ---- connections -----------------------------------------------------------------------------------
    def add_connection(self, sock: object, peer: str, role: str = "normal",
                       echo_detector: object = None, client: bool = False, cost: int = 1) -> Connection:
        conn = Connection(sock, peer, self.node_id, self.idle_timeout, self.collector, role, echo_detector,
                          client=client, cost=cost)
        self._conn_ids += 1
        conn.ident = self._conn_ids
        conn.opened = self.core.now
        self.conns[conn.pn_conn] = conn
        if client:
            pn_connection_open(conn.pn_conn)
        self.dirty.add(conn)
        if self.tel is not None:
            self.tel.event("conn_up", None, None, peer)
        log.debug("connection from %s", peer)
        return conn

    def kill(self, conn: Connection) -> None:
        """The connection is gone: fail its links' deliveries and queue it for tear-down."""
        if not conn.alive:
            return
        conn.alive = False
        if self.tel is not None:
            self.tel.event("conn_down", None, None, conn.peer)
        self._router_down(conn)
        for link in list(conn.links):
            self._drop_link(link, conn_alive=False)
        self.dead.append(conn)
        log.debug("connection from %s closed", conn.peer)

    def take_dead(self) -> list[Connection]:
        """Connections to unregister and free (the server does the socket part)."""
        dead, self.dead = self.dead, []
        for conn in dead:
            self.conns.pop(conn.pn_conn, None)
            self.dirty.discard(conn)
        return dead

    def end_of_input(self, conn: Connection) -> None:
        """The peer stopped sending (or sent something Proton could not decode): close our side."""
        c = conn.pn_conn
        state = pn_connection_state(c)
        if not state & PN_LOCAL_CLOSED:
            # a peer that sent CLOSE before ending its output closed cleanly: no error in our CLOSE
            failed = pn_condition_is_set(pn_transport_condition(conn.pn_transport))
            if not state & PN_REMOTE_CLOSED and not failed:
                cond = pn_connection_condition(c)
                pn_condition_set_name(cond, b"amqp:connection:framing-error")
                pn_condition_set_description(cond, b"invalid frame")
            pn_connection_close(c)
        self.dirty.add(conn)

    def answer_echo(self, conn: Connection) -> None:
        """A FLOW with echo=true arrived: make Proton send a FLOW back on every session.

        Proton-C ignores `echo`; re-setting a session's incoming capacity makes it post a flow for that
        session (carrying a receiver link's state when one is pending), which is the answer we can give.
        """
        for ssn in conn.sessions:
            pn_session_set_incoming_capacity(ssn, SESSION_CAPACITY)
        for link in conn.links:
            rec = self.links.get(link)
            if rec is not None and rec.__class__ is Producer:
                if rec.draining:
                    pn_link_drain(link, 0)
                else:
                    pn_link_flow(link, 0)
        self.dirty.add(conn)

    # ---- the event pump ------------------------------------------------------------------------------
    def process(self) -> None:
        """Handle every pending Proton event."""
        coll = self.collector
        peek, pop, etype = pn_collector_peek, pn_collector_pop, pn_event_type
        on_delivery, on_flow, rare = self._on_delivery, self._on_flow, self._rare
        ev = peek(coll)
        while ev:
            t = etype(ev)
            try:
                if t == PN_DELIVERY:
                    on_delivery(pn_event_delivery(ev))
                elif t == PN_LINK_FLOW:
                    on_flow(pn_event_link(ev))
                elif t != PN_TRANSPORT:
                    handler = rare.get(t)
                    if handler is not None:
                        handler(ev)
            except Exception:           # a bug handling one event closes that connection only
                self._handler_failed(ev, t)
            pop(coll)
            ev = peek(coll)

    def _handler_failed(self, ev: object, event_type: int) -> None:
        log.exception("internal error handling %s", ffi.string(pn_event_type_name(event_type)).decode())
        conn = self.conns.get(pn_event_connection(ev))
        if conn is not None and conn.alive:
            cond = pn_connection_condition(conn.pn_conn)
            pn_condition_set_name(cond, b"amqp:internal-error")
            pn_condition_set_description(cond, b"the router failed to handle this connection's traffic")
            pn_connection_close(conn.pn_conn)
            for link in list(conn.links):
                self._drop_link(link, conn_alive=True)
            conn.input_closed = True    # read nothing more; the socket goes once the close is written
            self.dirty.add(conn)

    def apply_credit(self) -> None:
        """Flow the credit the core decided to producers, and drain those that lost their consumers."""
        grants, drains = self.core.take_credit_actions()
        dirty = self.dirty
        tel = self.tel
        for p, n in grants:
            pn_link_flow(p.handle, n)
            dirty.add(p.conn)
            if tel is not None and p.credit == n:
                tel.event("credit_starved_end", p.handle, p.address.key if p.address else None,
                          p.conn.peer)
        for p in drains:
            pn_link_drain(p.handle, 0)
            dirty.add(p.conn)

    # ---- session / connection events ------------------------------------------------------------------
    def _conn_of(self, ev: object) -> Connection | None:
        return self.conns.get(pn_event_connection(ev))

    def _on_connection_open(self, ev: object) -> None:
        c = pn_event_connection(ev)
        if pn_connection_state(c) & PN_LOCAL_UNINIT:
            pn_connection_open(c)
        conn = self.conns.get(c)
        if conn is None:
            return
        self.dirty.add(conn)
        if conn.role == "inter-router" and conn.router is None:
            conn.router = peer = peer_from_open(c, conn.cost)
            conn.kind = ROUTER_LINK
            if peer.node_id == self.node_id:
                log.error("inter-router connection %s leads back to this node (%s): closing it",
                          conn.peer, self.node_id)
                self._close_connection(conn, b"qd:connection-role", b"connected to itself")
                return
            log.info("inter-router connection %s to node %s (cost %d)", conn.peer, peer.node_id, peer.cost)
            if conn.client:
                for rl, is_sender in open_router_links(c, self.node_id, SESSION_CAPACITY):
                    self._register_router_link(rl, conn, is_sender)

    def _register_router_link(self, rl: RouterLink, conn: Connection, is_sender: bool) -> None:
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
        if is_sender:
            self.links[rl.handle] = peer.data_consumer = self.core.add_router_consumer(
                rl.handle, conn, peer.node_id)
        else:
            self.links[rl.handle] = self.core.add_router_producer(rl.handle, conn, peer.node_id)
        self.routes_changed()

    def _close_connection(self, conn: Connection, name: bytes, description: bytes) -> None:
        cond = pn_connection_condition(conn.pn_conn)
        pn_condition_set_name(cond, name)
        pn_condition_set_description(cond, description)
        pn_connection_close(conn.pn_conn)
        self.dirty.add(conn)

    def _router_up_check(self, conn: Connection) -> None:
        peer = conn.router
        if peer is not None and not peer.up and peer.control_ready():
            peer.up = True
            if self.mesh is not None:
                self.mesh.link_up(conn, peer)

    def _router_down(self, conn: Connection) -> None:
        peer = conn.router
        if peer is not None and peer.up:
            peer.up = False
            if self.mesh is not None:
                self.mesh.link_down(conn, peer)

    def send_control(self, conn: Connection, data: bytes) -> None:
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

    # ---- the mesh's view, given to the core -----------------------------------------------------------
    def routes_changed(self) -> None:
        """A data link to a peer came or went: the core's remote destinations need a new look."""
        self._links_epoch += 1

    def sync_routes(self) -> None:
        """Give the core the control plane's current view when it changed (cheap when it did not)."""
        mesh = self.mesh
        if mesh is None:
            return
        if mesh.pending:                # act now (paths, address updates), not at the next timer tick
            mesh.tick()
        ls = mesh.ls
        epoch = (ls.routes_epoch, ls.addresses_epoch, self._links_epoch)
        if epoch == self._routes_synced:
            return
        self._routes_synced = epoch
        nodes = {}
        for node, cost in ls.costs.items():
            conn = ls.link_to(node)
            peer = getattr(conn, "router", None)
            out = peer.data_consumer if peer is not None else None
            if out is not None and out.alive and conn.alive:
                nodes[node] = (cost, out)
        self.core.set_routes(nodes, ls.known_addresses, ls.radius, lambda: ls.valid_origins)

    def _on_connection_close(self, ev: object) -> None:
        conn = self._conn_of(ev)
        if conn is not None:
            self._router_down(conn)
            for link in list(conn.links):
                self._drop_link(link, conn_alive=True)
            self.dirty.add(conn)
        pn_connection_close(pn_event_connection(ev))

    def _on_session_open(self, ev: object) -> None:
        ssn = pn_event_session(ev)
        if pn_session_state(ssn) & PN_LOCAL_UNINIT:
            pn_session_set_incoming_capacity(ssn, SESSION_CAPACITY)
            pn_session_open(ssn)
        conn = self.conns.get(pn_session_connection(ssn))
        if conn is not None:
            conn.sessions.append(ssn)
            self.dirty.add(conn)

    def _on_session_close(self, ev: object) -> None:
        ssn = pn_event_session(ev)
        conn = self.conns.get(pn_session_connection(ssn))
        if conn is not None:
            for link in [lk for lk in conn.links if pn_link_session(lk) == ssn]:
                self._drop_link(link, conn_alive=True)
                pn_link_close(link)
            if ssn in conn.sessions:
                conn.sessions.remove(ssn)
            self.dirty.add(conn)
        pn_session_close(ssn)

    def _on_transport_error(self, ev: object) -> None:
        t = pn_event_transport(ev)
        cond = pn_transport_condition(t)
        conn = self.conns.get(pn_transport_connection(t))
        peer = conn.peer if conn is not None else "?"
        if pn_condition_is_set(cond):
            name = ffi.string(pn_condition_get_name(cond)).decode(errors="replace")
            d = pn_condition_get_description(cond)
            desc = ffi.string(d).decode(errors="replace") if d != ffi.NULL else ""
            log.info("connection from %s failed: %s %s", peer, name, desc)
        if conn is not None:
            self.dirty.add(conn)

    def _on_transport_closed(self, ev: object) -> None:
        conn = self.conns.get(pn_transport_connection(pn_event_transport(ev)))
        if conn is not None:
            self.kill(conn)

    # ---- link attach / detach --------------------------------------------------------------------------
    def _on_link_open(self, ev: object) -> None:
        link = pn_event_link(ev)
        if not pn_link_state(link) & PN_LOCAL_UNINIT:
            rec = self.links.get(link)          # the peer answered an attach we made
            if rec is not None and rec.__class__ is RouterLink:
                self._router_up_check(rec.conn)
            return
        conn = self.conns.get(pn_session_connection(pn_link_session(link)))
        if conn is None or not conn.alive:
            return
        self.dirty.add(conn)
        refusal = conn.admit_link(link)         # listener limits (max_links); max-message-size
        if refusal is not None:
            self._refuse(link, b"amqp:resource-limit-exceeded", refusal)
            return
        pn_terminus_copy(pn_link_source(link), pn_link_remote_source(link))
        pn_terminus_copy(pn_link_target(link), pn_link_remote_target(link))
        if conn.role == "inter-router":
            self._attach_router_link(link, conn)
        elif pn_link_is_sender(link):
            self._attach_consumer(link, conn)
        else:
            self._attach_producer(link, conn)

    def _attach_router_link(self, link: object, conn: Connection) -> None:
        """The peer node attached one of the inter-router links (we are the listening side)."""
        is_sender = bool(pn_link_is_sender(link))
        caps = capabilities(pn_link_remote_source(link)) | capabilities(pn_link_remote_target(link))
        kind = CONTROL if CONTROL in caps else DATA if DATA in caps else None
        if kind is None or conn.router is None:
            self._refuse(link, b"qd:connection-role",
                         b"an inter-router connection carries only inter-router links")
            return
        pn_link_open(link)
        self._register_router_link(RouterLink(kind, is_sender, conn, link), conn, is_sender)
        self._router_up_check(conn)

    def _on_router_delivery(self, d: object, link: object, rl: RouterLink) -> None:
        """A transfer (or an outcome) on an inter-router link."""
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
            pn_link_flow(link, CONTROL_CREDIT - max(pn_link_credit(link), 0))  # (see _on_flow)
            self.dirty.add(rl.conn)
        if self.mesh is not None and n > 0:
            self.mesh.on_control(rl.conn, ffi.buffer(buf, n)[:])

    def _attach_consumer(self, link: object, conn: Connection) -> None:
        """A client receiver attached: we send to it from its source address."""
        src = pn_link_remote_source(link)
        if pn_terminus_is_dynamic(src):
            name = self.core.new_dynamic_address()
            pn_terminus_set_address(pn_link_source(link), name.encode())
        else:
            name = _terminus_address(src)
            if name is None:
                self._refuse(link, b"amqp:invalid-field", b"the source address is not valid UTF-8")
                return
            if not address_key(name, self.node_id):     # also "/", "amqp:/": no address at all
                self._refuse(link, b"amqp:invalid-field", b"a receiving link needs a source address")
                return
        c = self.core.add_consumer(link, conn, name)
        if pn_link_remote_snd_settle_mode(link) == PN_SND_SETTLED:
            # at-most-once: the consumer wants every delivery pre-settled; an unsettled one from a
            # producer is settled ACCEPTED upstream once it has been handed over settled
            pn_link_set_snd_settle_mode(link, PN_SND_SETTLED)
            c.presettle = True
        self.links[link] = c
        conn.links.add(link)
        pn_link_open(link)
        log.debug("consumer attached to %s from %s", name, conn.peer)
        if self.tel is not None:
            self.tel.event("link_up", link, c.address.key, conn.peer)

    def _attach_producer(self, link: object, conn: Connection) -> None:
        """A client sender attached: it sends to its target address (none: anonymous relay)."""
        tgt = pn_link_remote_target(link)
        if pn_terminus_is_dynamic(tgt):
            self._refuse(link, b"amqp:not-implemented", b"dynamic targets are not supported")
            return
        name = _terminus_address(tgt)
        if name is None:
            self._refuse(link, b"amqp:invalid-field", b"the target address is not valid UTF-8")
            return
        p = self.core.add_producer(link, conn, name or None)
        self.links[link] = p
        conn.links.add(link)
        pn_link_open(link)
        log.debug("producer attached to %s from %s", name or "<anonymous>", conn.peer)
        if self.tel is not None:
            self.tel.event("link_up", link, p.address.key if p.address else None, conn.peer)

    def _refuse(self, link: object, name: bytes, description: bytes) -> None:
        cond = pn_link_condition(link)
        pn_condition_set_name(cond, name)
        pn_condition_set_description(cond, description)
        pn_link_open(link)
        pn_link_close(link)

    def _on_link_close(self, ev: object) -> None:
        link = pn_event_link(ev)
        if link in self.links:
            self._drop_link(link, conn_alive=True)
        if pn_link_state(link) & PN_LOCAL_ACTIVE:
            pn_link_close(link)
        pn_link_free(link)          # Proton sends the detach, then forgets it (no growth per link)
        conn = self._conn_of(ev)
        if conn is not None:
            self.dirty.add(conn)

    def _drop_link(self, link: object, conn_alive: bool) -> None:
        """Forget a link; settle what it leaves behind so nothing stays unsettled anywhere."""
        rec = self.links.pop(link, None)
        if rec is None:
            return
        rec.conn.links.discard(link)
        if self.tel is not None and rec.__class__ is not RouterLink:
            self.tel.event("link_down", link, rec.address.key if rec.address else None, rec.conn.peer)
        if rec.__class__ is Consumer:
            self._drop_consumer(rec, link, conn_alive)
            if rec.peer is not None:
                self.routes_changed()
        elif rec.__class__ is RouterLink:
            self._router_down(rec.conn)
        else:
            self._drop_producer(rec)

    def _drop_consumer(self, c: Consumer, link: object, conn_alive: bool) -> None:
        queued = pn_link_queued(link)
        first_unsent = c.delivered - queued + 1     # sequence numbers >= this never reached the wire
        for od, e in self.core.remove_consumer(c):
            stream = self.stream_outs.pop(od, None)
            if stream is not None:                  # partly sent: the consumer got a broken message
                stream.outs = [(cc, d) for cc, d in stream.outs if d != od]
                if conn_alive:
                    pn_delivery_abort(od)           # aborting settles it too
                if e[3] is not None:
                    self._copy_done(e[3], None, MODIFIED, NodeOutcome(MODIFIED))
                else:
                    stream.final = NodeOutcome(MODIFIED)
                    if self.tel is not None:
                        self.tel.grew(e[0], stream.size)
                        self.tel.settled(e, MODIFIED, c)
                continue
            outcome = RELEASED if e[4] >= first_unsent else MODIFIED
            self._fail(e, outcome)
            if self.tel is not None and e[3] is None:
                self.tel.settled(e, outcome, c)
            if conn_alive:
                pn_delivery_settle(od)
        if c.held:
            for item in c.held:
                self._release_held(item, c)
        c.held = None

    def _drop_producer(self, p: Producer) -> None:
        self.core.remove_producer(p)
        for d, s in [(d, s) for d, s in self.streams.items() if s.producer is p]:
            del self.streams[d]
            self.paused.discard(s)
            for c, od in s.outs:
                self.stream_outs.pop(od, None)
                c.busy = False
                if c.alive:
                    pn_delivery_abort(od)
                    self.dirty.add(c.conn)
                    self.core.settle(od)
                    self._flush_held(c)

    def _fail(self, e: tuple, outcome: int) -> None:
        """An in-flight delivery's consumer is gone: tell the producer RELEASED or MODIFIED(failed)."""
        din, p, g = e[0], e[1], e[3]
        if g is not None:
            self._copy_done(g, None, outcome, NodeOutcome(outcome))
            return
        if p.alive:
            if outcome == MODIFIED:
                set_modified(din, failed=True)
            else:
                pn_delivery_update(din, outcome)
            pn_delivery_settle(din)
            self.core.count_outcome(outcome, p)
            self.dirty.add(p.conn)

    # ---- flow -------------------------------------------------------------------------------------------
    def _on_flow(self, link: object) -> None:
        rec = self.links.get(link)
        if rec is None or rec.__class__ is RouterLink:
            return
        if rec.__class__ is Consumer:
            credit = pn_link_credit(link)
            if credit > 0 and pn_link_get_drain(link):
                pn_link_drained(link)      # nothing is waiting for this consumer: answer the drain now
                credit = 0
                self.dirty.add(rec.conn)
            self.core.consumer_credit(rec, credit)
        else:
            # a sender's FLOW may move delivery-count far ahead, and Proton then reports credit far
            # below zero: bounded, so that the top-up the core computes still fits a FLOW
            self.core.producer_credit(rec, max(pn_link_credit(link), -self.core.capacity))

    # ---- deliveries -------------------------------------------------------------------------------------
    def _on_delivery(self, d: object) -> None:
        link = pn_delivery_link(d)
        rec = self.links.get(link)
        if rec is None:
            return
        if rec.__class__ is Consumer:
            self._on_outcome(d, rec)
            return
        if rec.__class__ is RouterLink:
            self._on_router_delivery(d, link, rec)
            return
        if self.streams:
            s = self.streams.get(d)
            if s is not None:
                self._pump_stream(s)
                return
        if not pn_delivery_readable(d):
            return
        if pn_delivery_partial(d):
            self._start_stream(d, link, rec)
            return
        presettled = pn_delivery_settled(d)
        if presettled and pn_delivery_aborted(d):   # Proton marks aborted transfers settled
            pn_link_advance(link)
            pn_delivery_settle(d)
            rec.credit -= 1
            self.core.unroutable(rec, True)
            return
        n = pn_delivery_pending(d)
        if n > rec.conn.max_message_size:
            self._too_big(d, link, rec, presettled)
            return
        if n > self._bufsize:
            self._bufsize = n * 2
            self._buf = ffi.new("char[]", self._bufsize)
        buf = self._buf
        n = pn_link_recv(link, buf, n)
        pn_link_advance(link)
        rec.credit -= 1
        if n < 0:                       # an empty transfer (PN_EOS): there is no message to pass on
            self._reject(d, rec, presettled, b"amqp:decode-error", b"empty message")
            return
        if self.tel is not None and rec.credit == 0:
            self.tel.event("credit_starved_start", link, rec.address.key if rec.address else None,
                           rec.conn.peer)
        a = rec.address
        if a is None:
            if rec.router:
                self._from_router(d, rec, ffi.buffer(buf, n)[:], presettled)
                return
            a = self._anonymous_target(d, buf, n, presettled, rec)
            if a is None:
                return
            if a.remote:
                self._to_mesh(d, rec, a, self._key, ffi.buffer(buf, n)[:], presettled)
                return
        elif a.remote:
            self._to_mesh(d, rec, a, a.key, ffi.buffer(buf, n)[:], presettled)
            return
        if a.multicast:
            self._multicast(d, rec, a.consumers and self.core.fanout(a, presettled), buf, n, presettled, a=a)
            return
        c = self.core.pick(a)
        if c is None:
            self._unroutable(d, rec, presettled)
            return
        a.ingress += 1
        a.egress += 1
        if c.busy:
            self._hold(c, ffi.buffer(buf, n)[:], d, rec, presettled, None, n)
            return
        out = c.handle                  # _send_whole, inlined: this is the hot path
        self._tagnum[0] += 1
        od = pn_delivery(out, self._tag)
        pn_link_send(out, buf, n)
        pn_link_advance(out)
        self.dirty.add(c.conn)
        if presettled:
            pn_delivery_settle(od)
            pn_delivery_settle(d)
            self.core.sent_presettled(rec, (c,))
            if self.tel is not None:
                if rec.conn.internal or c.conn.internal:
                    self.tel.ended(a.key, n, PRESETTLED, None, 0, rec.conn.kind, c.conn.kind, "")
                else:
                    self.tel.presettled_here(a.key, n)
        elif c.presettle:
            pn_delivery_settle(od)
            self._accept_handed_over(d, rec)
            self.core.sent_presettled(rec, (c,))
            if self.tel is not None:
                self.tel.ended(a.key, n, ACCEPTED, None, 0, rec.conn.kind, c.conn.kind, "")
        else:
            tel = self.tel                              # n (and a route): for telemetry
            if tel is None or not (rec.conn.internal or c.conn.internal):
                self.core.sent(rec, c, d, od, None, n)  # the consumer's address's client route
            else:
                self.core.sent(rec, c, d, od, None, n, self._tel_local_rid(a.key, rec, c))

    def _send_whole(self, c: Consumer, data: object, n: int) -> object:
        """Send a complete message on `c`'s link as a new delivery; returns the delivery."""
        out = c.handle
        self._tagnum[0] += 1
        od = pn_delivery(out, self._tag)
        pn_link_send(out, data, n)
        pn_link_advance(out)
        self.dirty.add(c.conn)
        return od

    def _accept_handed_over(self, d: object, p: Producer) -> None:
        """Settle an unsettled delivery ACCEPTED: it went to an at-most-once (pre-settled) consumer."""
        pn_delivery_update(d, ACCEPTED)
        pn_delivery_settle(d)
        self.core.count_outcome(ACCEPTED, p)
        self.dirty.add(p.conn)

    def _anonymous_target(self, d: object, buf: object, n: int, presettled: bool, p: Producer):
        """Route an anonymous-relay transfer by its `to`; settle it here if that is impossible."""
        try:
            to = scan_message(ffi.buffer(buf, min(n, ANON_SCAN_LIMIT))[:], complete=n <= ANON_SCAN_LIMIT).to
        except MalformedError:
            self._reject(d, p, presettled, b"amqp:decode-error", b"cannot read the message properties")
            return None
        if not to:
            self._reject(d, p, presettled, b"amqp:precondition-failed",
                         b"anonymous relay: the message has no 'to' address")
            return None
        self._key = key = address_key(to, self.node_id)
        a = self.core.lookup_key(key)
        if a is None or not (a.consumers or a.remote):
            self._unroutable(d, p, presettled)
            return None
        return a

    # ---- across the mesh ------------------------------------------------------------------------------
    def _from_router(self, d: object, p: Producer, data: bytes, presettled: bool) -> None:
        """A complete transfer from a peer node: route it by its router annotations."""
        core = self.core
        try:
            layout = router_view(data)          # the common form, read at a fraction of the cost
            if layout is None:
                layout = AnnotationLayout(data)
                ann = layout.read()
            else:
                ann = layout.ann
        except MalformedError:
            self._reject(d, p, presettled, b"amqp:decode-error", b"unreadable message or router annotations")
            return
        core.forwarded(p)
        a, key = self._router_route(layout, ann)
        if a is None or not core.route_hops_ok(len(ann.trace)):
            self._unroutable(d, p, presettled)
            return
        self._to_mesh(d, p, a, key, data, presettled, layout, ann, p.conn.router.node_id)

    def _router_route(self, layout: AnnotationLayout | RouterView, ann: RouterAnnotations
                      ) -> tuple[Address | None, str]:
        """The address a message from a peer goes to (`x-opt-qd.to`, else its `to`), if routable here."""
        key = ann.to or address_key(layout.info.to or "", self.node_id)
        a = self.core.lookup_key(key) if key else None
        if a is not None and not (a.consumers or a.remote):
            a = None
        return a, key

    def _payloads(self, key: str, data: bytes, layout: AnnotationLayout | RouterView | None,
                  ann: RouterAnnotations | None,
                  info: object = None):
        """A function giving the bytes to send to a consumer: stripped for clients, annotated for peers."""
        made: dict[bool, object] = {}
        node = self.node_id

        def payload(c: Consumer) -> object:
            to_peer = c.peer is not None
            out = made.get(to_peer)
            if out is None:
                if to_peer:
                    hop = with_hop(ann, node)
                    if hop.to is None:
                        hop.to = key
                    if layout is not None:
                        out = layout.rewrite(hop)
                    elif info is None:
                        out = annotate_ingress(data, hop)   # a client's complete message
                    else:
                        out = AnnotationLayout(data, info).rewrite(hop)
                else:
                    out = layout.strip() if layout is not None else data
                made[to_peer] = out
            return out
        return payload

    def _to_mesh(self, d: object, p: Producer, a: Address, key: str, data: bytes, presettled: bool,
                 layout: AnnotationLayout | RouterView | None = None, ann: RouterAnnotations | None = None,
                 came_from: str | None = None) -> None:
        """Forward a complete delivery to local consumers and/or peer nodes (the slower, general path)."""
        core = self.core
        payload = self._payloads(key, data, layout, ann)
        try:
            if a.multicast:
                origin = ann.ingress[2:] if ann is not None and ann.ingress else None
                trace = trace_nodes(ann) if ann is not None else ()
                targets = core.mesh_fanout(a, presettled, origin, trace, came_from)
                for c in targets:
                    payload(c)                  # any decoding error happens before a copy is sent
                self._multicast(d, p, targets, data, len(data), presettled, payload, key, ann, a)
                return
            c, rd = core.pick_mesh(a, came_from)
            if c is None:
                self._unroutable(d, p, presettled)
                return
            out = payload(c)
        except MalformedError:
            self._reject(d, p, presettled, b"amqp:decode-error", b"unreadable message or router annotations")
            return
        _count_route(a, p, c)
        n = len(out)
        if c.busy:
            self._hold(c, out, d, p, presettled, None,
                       (key, n, _tel_route(p, c, ann, rd)) if self.tel is not None else None)
            return
        od = self._send_whole(c, out, n)
        if presettled:
            pn_delivery_settle(od)
            pn_delivery_settle(d)
            core.sent_presettled(p, (c,))
            if self.tel is not None:
                self.tel.presettled(key, n, True, *_tel_route(p, c, ann, rd))
        elif c.presettle:
            pn_delivery_settle(od)
            self._accept_handed_over(d, p)
            core.sent_presettled(p, (c,))
            if self.tel is not None:
                self.tel.ended(key, n, ACCEPTED, *_tel_route(p, c, ann, rd))
        else:
            tel = self.tel
            if tel is None:
                core.sent(p, c, d, od, rd)
            else:                                   # the route id rides in the in-flight entry
                rk = (key, ann.ingress if ann is not None else None, len(ann.trace) if ann is not None else 0,
                      p.conn.kind, c.conn.kind, rd.node if rd is not None else None)
                rid = tel.route_ids.get(rk)
                if rid is None:
                    rid = tel.route_id(rk, key, *_tel_route(p, c, ann, rd))
                core.sent(p, c, d, od, rd, n, rid)

    def _reject(self, d: object, p: Producer, presettled: bool, name: bytes, desc: bytes) -> None:
        if not presettled:
            set_rejected(d, name, desc)
            self.core.count_outcome(REJECTED, p)
        pn_delivery_settle(d)
        self.core.credit_back(p)
        self.dirty.add(p.conn)

    def _unroutable(self, d: object, p: Producer, presettled: bool) -> None:
        if self.tel is not None:
            address = p.address.key if p.address else None
            in_link = p.conn.kind
            if presettled:
                self.tel.presettled(address, 0, False, None, 0, in_link)
            else:
                self.tel.unroutable(address, 0, None, 0, in_link)
        if not presettled:
            pn_delivery_update(d, RELEASED)
        pn_delivery_settle(d)
        self.core.unroutable(p, presettled)
        self.dirty.add(p.conn)

    def _multicast(self, d: object, p: Producer, consumers, buf: object, n: int, presettled: bool,
                   payload=None, key: str | None = None, ann: RouterAnnotations | None = None,
                   a: Address | None = None) -> None:
        """One copy per consumer; `payload(consumer)` gives per-consumer bytes (mesh), else `buf`."""
        if not consumers:
            self._unroutable(d, p, presettled)
            return
        if a is not None:
            _count_copies(a, p, consumers)
        core = self.core
        g = None if presettled else core.new_group(d, p)
        if self.tel is not None:
            key = key or consumers[0].address.key
            route = _tel_route(p, consumers[0], ann, copies=consumers)  # out_link: that of the first copy
            if g is not None:
                self.tel.sent_group(g, n, key, *route)
            else:
                self.tel.presettled(key, n, True, *route)
        handed_over = 0                     # unsettled copies sent settled to at-most-once consumers
        data, size = buf, n
        for c in consumers:
            if payload is not None:
                data = payload(c)
                size = len(data)
            if c.busy:
                self._hold(c, data if payload is not None else ffi.buffer(buf, n)[:], d, p, presettled, g)
                continue
            od = self._send_whole(c, data, size)
            if presettled or c.presettle:
                pn_delivery_settle(od)
                if not presettled:
                    handed_over += 1
                    g.pending += 1
                    core.sent_presettled(p, (c,))
            else:
                core.sent_copy(g, c, od)
        if presettled:
            pn_delivery_settle(d)
            core.sent_presettled(p, [c for c in consumers if not c.busy])
        for _ in range(handed_over):
            self._copy_done(g, None, ACCEPTED, NodeOutcome(ACCEPTED))

    def _on_outcome(self, od: object, c: Consumer) -> None:
        """The consumer updated or settled one of our outbound deliveries."""
        outcome = pn_delivery_remote_state(od)
        if outcome not in TERMINAL:
            if not pn_delivery_settled(od):
                return
            outcome = ACCEPTED           # settled without an outcome: the default outcome
        e = self.core.settle(od)
        if e is None:
            pn_delivery_settle(od)
            return
        c.outcomes[outcome - ACCEPTED] += 1
        din, p, g = e[0], e[1], e[3]
        stream = self.stream_outs.pop(od, None) if self.stream_outs else None
        if stream is not None:                   # decided before the whole message was sent to it
            if g is None:
                stream.final = OutcomeSnapshot(od, outcome)
                if self.tel is not None:
                    self.tel.grew(e[0], stream.size)
                    self.tel.settled(e, outcome, c)
            else:
                self._copy_done(g, od, outcome, None)
            self._stop_stream_copy(stream, c, od)   # aborts (and so settles) od: do it last
            self.dirty.add(c.conn)
            return
        if g is not None:
            self._copy_done(g, od, outcome, None)
        elif p.alive:
            copy_outcome(od, din, outcome)
            pn_delivery_settle(din)
            p.outcomes[outcome - ACCEPTED] += 1     # core.count_outcome, inlined
            self.dirty.add(p.conn)
        tel = self.tel
        if tel is not None and g is None:             # router/node/telemetry.py: the hot path
            v = e[7]
            if v >= 0:
                rid = e[8]
                if rid < 0:                             # client to client here: the address's route
                    if outcome != tel.outcome or e[6] is not tel.arrived or c.address is not tel.address:
                        tel.run(outcome, e[6], c.address)
                elif rid != tel.rid or outcome != tel.outcome or e[6] is not tel.arrived:
                    tel.route_run(rid, outcome, e[6])
                tel.sizes.append(v)
            elif tel.mesh:
                tel.settled(e, outcome, c)
        pn_delivery_settle(od)
        self.dirty.add(c.conn)

    def _copy_done(self, g: McastGroup, od: object, outcome: int, made: object) -> None:
        """One multicast copy is terminal; settle upstream when it was the last one."""
        if self.core.copy_outcome(g, outcome):
            g.detail = made if made is not None else OutcomeSnapshot(od, outcome)
        if g.pending == 0:
            p = g.producer
            stream = self.streams.get(g.in_dlv) if self.streams else None
            if stream is not None and stream.producer is p:
                stream.final = g.detail          # answered when the transfer completes
                stream.group = None
            elif p.alive:
                g.detail.apply(g.in_dlv)
                pn_delivery_settle(g.in_dlv)
                self.core.count_outcome(g.outcome, p)
                self.dirty.add(p.conn)
            if self.tel is not None:
                self.tel.group_settled(g, g.outcome)
            self.core.group_done(g)
            g.detail = None

    # ---- consumers busy with a streamed message ---------------------------------------------------------
    def _hold(self, c: Consumer, data: bytes, d: object, p: Producer, presettled: bool,
              g: McastGroup | None = None, tel: int | tuple | None = None) -> None:
        """Keep a delivery for `c` until the message being streamed to it is complete. `tel`: what
        telemetry records of it (not of a multicast copy, whose group it records): its size if it goes
        from a client to a client here, else (address, size, route)."""
        if c.held is None:
            c.held = []
        if g is not None:
            g.pending += 1
        c.held.append((data, d, p, presettled, g, tel))

    def _flush_held(self, c: Consumer) -> None:
        """Send what waited for the stream that just finished on `c`."""
        held, c.held = c.held, None
        if not held:
            return
        tel = self.tel
        for data, d, p, presettled, g, t in held:
            od = self._send_whole(c, data, len(data))
            if presettled:
                pn_delivery_settle(od)
                self.core.sent_presettled(p, (c,))
                if tel is not None and t is not None:
                    self._tel_held(t, p, c, PRESETTLED)
            elif c.presettle:
                pn_delivery_settle(od)
                self.core.sent_presettled(p, (c,))
                if g is not None:
                    self._copy_done(g, None, ACCEPTED, NodeOutcome(ACCEPTED))
                elif p.alive:
                    self._accept_handed_over(d, p)
                    if tel is not None and t is not None:
                        self._tel_held(t, p, c, ACCEPTED)
            elif g is not None:
                g.pending -= 1                      # sent_copy counts it again
                self.core.sent_copy(g, c, od)
            elif p.alive:
                if type(t) is int:                  # client to client here: the size rides in the entry
                    self.core.sent(p, c, d, od, None, t,
                                   self._tel_local_rid(c.address.key, p, c) if tel is not None else -1)
                else:
                    self.core.sent(p, c, d, od)
                    if tel is not None and t is not None:
                        tel.sent(d, t[1], t[0], *t[2])
            else:
                pn_delivery_settle(od)
        self.dirty.add(c.conn)

    def _tel_held(self, t: int | tuple, p: Producer, c: Consumer, outcome: int) -> None:
        """Telemetry of a held delivery that went out settled (pre-settled, or handed over ACCEPTED)."""
        if type(t) is int:
            self.tel.ended(c.address.key, t, outcome, None, 0, p.conn.kind, c.conn.kind, "")
        else:
            self.tel.ended(t[0], t[1], outcome, *t[2])

    def _tel_local_rid(self, address: str, p: Producer, c: Consumer) -> int:
        """The telemetry route id of a delivery from `p` to `c`, both on this node's client (or broker)
        connections; -1 for the common client-to-client route (the consumer's address's)."""
        if p.conn.kind == CLIENT_LINK and c.conn.kind == CLIENT_LINK:
            return -1
        rk = (address, p.conn.kind, c.conn.kind)
        rid = self.tel.route_ids.get(rk)
        if rid is None:
            rid = self.tel.route_id(rk, address, None, 0, p.conn.kind, c.conn.kind, "")
        return rid

    def _release_held(self, item: tuple, c: Consumer) -> None:
        _data, d, p, presettled, g, t = item
        if self.tel is not None and t is not None and (presettled or p.alive):
            # it never went out: dropped (pre-settled) or released back to its producer
            address, size, src = (c.address.key, t, (None, 0, p.conn.kind)) if type(t) is int else \
                (t[0], t[1], t[2][:3])
            self.tel.ended(address, size, DROPPED if presettled else RELEASED, *src, None, None)
        if presettled:
            return
        if g is not None:
            self._copy_done(g, None, RELEASED, NodeOutcome(RELEASED))
        elif p.alive:
            pn_delivery_update(d, RELEASED)
            pn_delivery_settle(d)
            self.core.count_outcome(RELEASED, p)
            self.dirty.add(p.conn)

    # ---- streaming (multi-frame messages) ---------------------------------------------------------------
    def _start_stream(self, d: object, link: object, p: Producer) -> None:
        s = Stream(d, link, p)
        s.presettled = bool(pn_delivery_settled(d))
        p.credit -= 1
        self.streams[d] = s
        if p.address is None or p.router or p.address.remote:
            s.prefix = bytearray()          # routed (and annotated) once the sections before the body are in
        else:
            self._route_stream(s, p.address)
        self._pump_stream(s)

    def _route_stream(self, s: Stream, a: Address, came_from: str | None = None,
                      ann: RouterAnnotations | None = None) -> None:
        """Choose the consumers of a streamed message and open an outbound delivery on each."""
        s.routed = True
        core = self.core
        rd: RemoteDest | None = None
        if a.multicast:
            if a.remote or came_from is not None:
                origin = ann.ingress[2:] if ann is not None and ann.ingress else None
                trace = trace_nodes(ann) if ann is not None else ()
                targets = core.mesh_fanout(a, s.presettled, origin, trace, came_from)
            else:
                targets = core.fanout(a, s.presettled)
            consumers = [c for c in targets if not c.busy]
        else:
            if a.remote or came_from is not None:
                c, rd = core.pick_mesh(a, came_from)
            else:
                c = core.pick(a)
            consumers = [c] if c is not None and not c.busy else []
        if consumers:
            _count_copies(a, s.producer, consumers)
        tel = self.tel
        if tel is not None:
            route = _tel_route(s.producer, consumers[0], ann, rd, consumers if a.multicast else None) \
                if consumers else None
            s.tel = (a.key, route, _tel_source(s.producer, ann))
        if not s.presettled and consumers:
            if a.multicast:
                s.group = core.new_group(s.in_dlv, s.producer)
                if tel is not None:
                    tel.sent_group(s.group, 0, a.key, *route)     # its size: when the stream ends
        for c in consumers:
            self._tagnum[0] += 1
            od = pn_delivery(c.handle, self._tag)
            c.busy = True
            s.outs.append((c, od))
            self.stream_outs[od] = s
            if not s.presettled:
                if s.group is not None:
                    core.sent_copy(s.group, c, od)
                else:
                    core.sent(s.producer, c, s.in_dlv, od, rd)
                    if self.tel is not None:
                        self.tel.sent(s.in_dlv, 0, a.key, *_tel_route(s.producer, c, ann, rd))
            self.dirty.add(c.conn)

    def _pump_stream(self, s: Stream) -> None:
        """Move what has arrived of a streamed message on to its consumers, as far as they can take."""
        d, link = s.in_dlv, s.in_link
        while True:
            if s.outs and any(pn_session_outgoing_bytes(pn_link_session(c.handle)) > STREAM_HIGH_WATER
                              for c, _ in s.outs):
                self.paused.add(s)
                return
            n = pn_delivery_pending(d)
            if n <= 0:
                break
            n = min(n, STREAM_CHUNK)
            if n > self._bufsize:
                self._bufsize = max(n, self._bufsize * 2)
                self._buf = ffi.new("char[]", self._bufsize)
            buf = self._buf
            got = pn_link_recv(link, buf, n)
            if got <= 0:
                break
            s.size += got
            if s.size > s.producer.conn.max_message_size:
                self._stream_too_big(s)             # abort its copies; the rest is read and dropped
                continue
            if not s.routed:
                s.prefix += ffi.buffer(buf, got)[:]
                if not self._route_prefixed_stream(s):
                    if s.in_dlv not in self.streams:
                        return          # settled (rejected / released) already
                    continue
                data = bytes(s.prefix)
                s.prefix = None
                for c, _od in s.outs:
                    out = s.payload(c) if s.payload is not None else data
                    pn_link_send(c.handle, out, len(out))
                    self.dirty.add(c.conn)
                s.payload = None
                continue
            for c, _od in s.outs:
                pn_link_send(c.handle, buf, got)
                self.dirty.add(c.conn)
            self.dirty.add(s.producer.conn)     # reading reopens its session window
        self.paused.discard(s)
        if pn_delivery_aborted(d):
            self._end_stream(s, aborted=True)
        elif not pn_delivery_partial(d) and pn_delivery_pending(d) <= 0:
            self._end_stream(s, aborted=False)

    def _route_prefixed_stream(self, s: Stream) -> bool:
        """Try to route a streamed message from the bytes read so far (anonymous, or crossing the mesh).

        Routing waits until every section before the body is in: that is where `to` and the router
        annotations are, and the part each consumer gets rewritten (annotated for peers, stripped for
        clients).
        """
        prefix = bytes(s.prefix)
        p = s.producer
        core = self.core
        try:
            info = scan_message(prefix)
        except IncompleteError:
            if len(prefix) < ANON_SCAN_LIMIT:
                return False
            info = None
        except MalformedError:
            info = None
        if info is None:
            self._sink_stream(s, REJECTED)
            return False
        layout = ann = came_from = None
        if p.router:
            try:
                layout = AnnotationLayout(prefix, info)
                ann = layout.read()
            except MalformedError:
                self._sink_stream(s, REJECTED)
                return False
            core.forwarded(p)
            came_from = p.conn.router.node_id
            a, key = self._router_route(layout, ann)
            if a is not None and not core.route_hops_ok(len(ann.trace)):
                a = None
        elif p.address is not None:
            a, key = p.address, p.address.key
        else:
            if not info.to:
                self._sink_stream(s, REJECTED)
                return False
            key = address_key(info.to, self.node_id)
            a = core.lookup_key(key)
            if a is not None and not (a.consumers or a.remote):
                a = None
        if a is None:
            self._sink_stream(s, RELEASED, key, ann)
            return False
        if a.remote or layout is not None:
            s.payload = self._payloads(key, prefix, layout, ann, info)
        if a.remote:
            try:
                s.payload(_TO_PEER)                 # any decoding error shows before a byte is sent
            except MalformedError:
                self._sink_stream(s, REJECTED)
                return False
        self._route_stream(s, a, came_from, ann)
        if not s.outs:
            self._sink_stream(s, RELEASED)
            return False
        return True

    def _too_big(self, d: object, link: object, p: Producer, presettled: bool) -> None:
        """A complete transfer over its connection's max_message_size: REJECTED, nothing forwarded."""
        pn_link_advance(link)
        p.credit -= 1
        self._reject(d, p, presettled, b"amqp:link:message-size-exceeded",
                     _oversize_text(p.conn.max_message_size))

    def _stream_too_big(self, s: Stream) -> None:
        """A streamed transfer passed its connection's max_message_size: abort what was sent on, drop
        the rest as it arrives and answer REJECTED when the last frame is in (nothing is buffered)."""
        if s.final.__class__ is _RejectOversize:
            return
        outs, s.outs = s.outs, []
        tel = self.tel
        if tel is not None:
            tel.grew(s.group if s.group is not None else s.in_dlv, s.size)
        for c, od in outs:
            self.stream_outs.pop(od, None)
            c.busy = False
            pn_delivery_abort(od)                   # settles it: the consumer sees an aborted transfer
            e = self.core.settle(od)
            if e is not None and e[3] is not None:
                self._copy_done(e[3], None, MODIFIED, NodeOutcome(MODIFIED))
            elif e is not None and tel is not None:
                tel.settled(e, REJECTED, c)
            self._flush_held(c)
            self.dirty.add(c.conn)
        s.routed = True
        s.prefix = None
        s.payload = None
        s.final = _RejectOversize(s.producer.conn.max_message_size)
        self.core.credit_back(s.producer)

    def _sink_stream(self, s: Stream, outcome: int, key: str | None = None,
                     ann: RouterAnnotations | None = None) -> None:
        """Give up on a streamed message: read and discard the rest, then answer with `outcome`.
        `key`, `ann`: its address and router annotations, where known (for telemetry)."""
        if self.tel is not None and s.tel is None:
            p = s.producer
            s.tel = (key or (p.address.key if p.address else None), None, _tel_source(p, ann))
        s.routed = True
        s.prefix = None
        s.outs = []
        s.final = _RejectNoTo() if outcome == REJECTED else NodeOutcome(outcome)
        self.core.credit_back(s.producer)           # credit back now; the answer comes at the end

    def _end_stream(self, s: Stream, aborted: bool) -> None:
        """The last frame of a streamed message arrived (or the producer aborted it)."""
        d, link, p = s.in_dlv, s.in_link, s.producer
        self.streams.pop(d, None)
        self.paused.discard(s)
        pn_link_advance(link)
        core = self.core
        for c, od in s.outs:
            self.stream_outs.pop(od, None)
            c.busy = False
            if aborted:
                pn_delivery_abort(od)               # settles it as well
                core.settle(od)
            else:
                pn_link_advance(c.handle)
                if self.tel is not None:
                    self.tel.grew(d, s.size)
                if s.presettled:
                    pn_delivery_settle(od)
                elif c.presettle:
                    self._hand_over_stream_copy(s, od)
            self.dirty.add(c.conn)
        if self.tel is not None:
            self._tel_stream_end(s, aborted)
        if aborted:
            if s.group is not None:
                core.group_done(s.group)
            pn_delivery_settle(d)
            core.credit_back(p)
        elif s.presettled:
            pn_delivery_settle(d)
            core.sent_presettled(p, [c for c, _ in s.outs])
        elif s.final is not None:
            s.final.apply(d)
            pn_delivery_settle(d)
            core.count_outcome(s.final.outcome, p)
        elif not s.outs and s.group is None:
            pn_delivery_update(d, RELEASED)          # nobody could take it
            pn_delivery_settle(d)
            core.count_outcome(RELEASED, p)
            core.credit_back(p)
        # otherwise the consumers' outcomes settle it later, as for any delivery
        for c, _od in s.outs:
            self._flush_held(c)
        self.dirty.add(p.conn)

    def _hand_over_stream_copy(self, s: Stream, od: object) -> None:
        """A streamed unsettled delivery went settled to an at-most-once consumer: it counts ACCEPTED."""
        e = self.core.settle(od)
        pn_delivery_settle(od)
        if e is None:
            return
        if e[3] is not None:
            self._copy_done(e[3], None, ACCEPTED, NodeOutcome(ACCEPTED))
        else:
            s.final = NodeOutcome(ACCEPTED)
            if self.tel is not None:
                self.tel.settled(e, ACCEPTED, e[2])

    def _tel_stream_end(self, s: Stream, aborted: bool) -> None:
        """Telemetry of a streamed message whose last frame arrived (what the settlement of an unsettled
        unicast copy records is `sent` at routing, with its size from `grew`)."""
        tel = self.tel
        if aborted:                                 # no delivery to record
            tel.forget(s.group if s.group is not None else s.in_dlv)
            return
        if s.tel is None:
            return
        address, route, src = s.tel
        if s.presettled:
            if route is not None and s.outs:
                tel.presettled(address, s.size, True, *route)
            else:
                tel.presettled(address, s.size, False, *src)
        elif s.group is not None:
            tel.grew(s.group, s.size)
        elif not s.outs and (s.final is None or route is None):     # it went nowhere
            outcome = RELEASED if s.final is None else s.final.outcome
            tel.ended(address, s.size, outcome, *src, None, None)

    def _stop_stream_copy(self, s: Stream, c: Consumer, od: object) -> None:
        """The consumer decided on a streamed delivery before it was complete: stop sending it there.

        Aborting settles `od` (Proton may reuse it), so nothing may touch `od` afterwards.
        """
        s.outs = [(cc, d) for cc, d in s.outs if d != od]
        c.busy = False
        pn_delivery_abort(od)
        self._flush_held(c)

    def resume_streams(self) -> None:
        """Retry paused streams (called after output was written)."""
        if self.paused:
            for s in list(self.paused):
                if s.in_dlv in self.streams:
                    self._pump_stream(s)
                else:
                    self.paused.discard(s)

    def snapshot(self) -> dict:
        """Core tables plus the adapter's own (for tests and logs). The node's in-process clients
        (management agent, broker gateways) are counted apart, as `internal_connections`."""
        snap = self.core.snapshot(hidden=lambda link: link.conn.internal)
        internal = sum(1 for c in self.conns.values() if c.internal)
        links = sum(1 for rec in self.links.values() if not rec.conn.internal)
        snap.update(connections=len(self.conns) - internal, internal_connections=internal, links=links,
                    streams=len(self.streams))
        return snap


CLIENT_LINK = "client"
ROUTER_LINK = "inter-router"


def _count_route(a: Address, p: Producer, c: Consumer) -> None:
    """Count a delivery of address `a` from `p` to `c` as ingress / egress / transit."""
    if p.router:
        if c.peer is None:
            a.egress += 1
        else:
            a.transit += 1
    else:
        a.ingress += 1
        if c.peer is None:
            a.egress += 1


def _count_copies(a: Address, p: Producer, consumers: list[Consumer]) -> None:
    """Count one delivery of `a` from `p` sent to `consumers` (multicast: one copy each)."""
    local = sum(1 for c in consumers if c.peer is None)
    a.egress += local
    if not p.router:
        a.ingress += 1
    elif local < len(consumers):
        a.transit += 1


def _tel_source(p: Producer, ann: RouterAnnotations | None) -> tuple[str | None, int, str]:
    """Telemetry's (ingress, hops, in_link) for a delivery from `p` with router annotations `ann`."""
    ingress = ann.ingress.partition("/")[2] if ann is not None and ann.ingress else None
    return ingress, len(ann.trace) if ann is not None else 0, p.conn.kind


def _tel_route(p: Producer, c: Consumer, ann: RouterAnnotations | None, rd: RemoteDest | None = None,
               copies: list[Consumer] | None = None) -> tuple[str | None, int, str, str, str | None]:
    """Telemetry's (ingress, hops, in_link, out_link, egress) for a delivery from `p` to `c` (toward
    remote destination `rd`; multicast: `copies`). egress "" is this node; None: unknown or several."""
    if copies is not None:
        egress = None if any(x.peer is not None for x in copies) else ""
    else:
        egress = rd.node if rd is not None else None if c.peer is not None else ""
    return (*_tel_source(p, ann), c.conn.kind, egress)


def _terminus_address(terminus: object) -> str | None:
    """The terminus address ("" when it has none, None when it is not valid UTF-8)."""
    p = pn_terminus_get_address(terminus)
    if p == ffi.NULL:
        return ""
    try:
        return ffi.string(p).decode()
    except UnicodeDecodeError:
        return None
