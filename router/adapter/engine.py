"""The node's Proton engine: one collector for every connection, its events dispatched by concern.

The engine owns the Proton objects of one node and wires the parts that handle them:

* `links.LinkEvents`: connections, sessions, attach and detach (the core accepts or refuses each link);
* `deliveries.Deliveries`: complete transfers, outcomes, multicast, deliveries held behind a stream;
* `streams.Streams`: multi-frame transfers passed on chunk by chunk;
* `routerlinks.RouterLinks`: the inter-router links, control messages and the mesh's routes;
* credit (here): FLOW events into the core, the core's grants and drains back onto links.

It never reads the clock or touches sockets: the node's server (router.node.server) owns I/O and time,
feeds bytes into each `Connection` and calls `process()` (through `pump`) after them. The forwarding core
(router.forwarding.core) decides; the parts carry its decisions out on Proton objects and report them at
one hook point, `observer` (router.adapter.observer; None: nothing is reported).
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
    PN_LOCAL_CLOSED,
    PN_REMOTE_CLOSED,
    PN_SESSION_REMOTE_CLOSE,
    PN_SESSION_REMOTE_OPEN,
    PN_TRANSPORT_CLOSED,
    PN_TRANSPORT_ERROR,
    pn_collector,
    pn_condition_is_set,
    pn_connection_close,
    pn_connection_open,
    pn_connection_state,
    pn_event_connection,
    pn_event_transport,
    pn_event_type_name,
    pn_link_credit,
    pn_link_current,
    pn_link_drain,
    pn_link_drained,
    pn_link_flow,
    pn_link_get_drain,
    pn_link_queued,
    pn_session_get_incoming_capacity,
    pn_session_set_incoming_capacity,
    pn_transport_condition,
    pn_transport_connection,
    pn_transport_tick,
)

from router.adapter import hotpath
from router.adapter.connection import Connection
from router.adapter.deliveries import Deliveries
from router.adapter.hotpath import SETTLED
from router.adapter.links import LinkEvents
from router.adapter.observer import Observer
from router.adapter.routerlinks import RouterLink, RouterLinks
from router.adapter.streams import Streams
from router.forwarding.budget import MemoryBudget
from router.forwarding.core import Consumer, Producer, RouterCore

log = logging.getLogger(__name__)


class Engine:
    """Dispatches the Proton events of every connection of one node to the part that handles them."""

    def __init__(self, core: RouterCore, node_id: str, idle_timeout: float) -> None:
        self.core = core
        self.node_id = node_id
        self.idle_timeout = idle_timeout
        self.collector = pn_collector()
        self._event = hotpath.ffi.new("void *[3]")    # next_event's out: event, delivery or link, link
        self.conns: dict[object, Connection] = {}      # pn_connection_t* -> Connection
        self.links: dict[object, Consumer | Producer | RouterLink] = {}  # pn_link_t* -> its record
        self.dirty: set[Connection] = set()            # connections with output to write
        self.dead: list[Connection] = []               # closed connections to tear down
        # transports of connections torn down in the last pump -> their peers, for the events they left
        self.recently_dead: dict[object, str] = {}
        # producers' links whose next transfers arrived while a streamed message held the link: their
        # delivery events found them unreadable (not the link's current delivery) and read nothing
        self.unblocked: list[object] = []
        self._conn_ids = 0                             # the last connection's management identity
        self._observer: Observer | None = None
        core.backlog = pn_link_queued
        self.deliveries = Deliveries(self)
        self.streams = Streams(self)
        self.mesh_links = RouterLinks(self)
        self.attach = LinkEvents(self)
        self.deliveries.streams = self.streams
        self.deliveries.stream_ins = self.streams.active
        self.deliveries.stream_outs = self.streams.outs
        self._rare = {
            PN_CONNECTION_REMOTE_OPEN: self.attach.on_connection_open,
            PN_CONNECTION_REMOTE_CLOSE: self.attach.on_connection_close,
            PN_SESSION_REMOTE_OPEN: self.attach.on_session_open,
            PN_SESSION_REMOTE_CLOSE: self.attach.on_session_close,
            PN_LINK_REMOTE_OPEN: self.attach.on_link_open,
            PN_LINK_REMOTE_CLOSE: self.attach.on_link_close,
            PN_LINK_REMOTE_DETACH: self.attach.on_link_close,
            PN_TRANSPORT_ERROR: self.attach.on_transport_error,
            PN_TRANSPORT_CLOSED: self._on_transport_closed,
        }

    # ---- wiring ----------------------------------------------------------------------------------------
    @property
    def observer(self) -> Observer | None:
        """Where decisions are reported (telemetry), or None."""
        return self._observer

    @observer.setter
    def observer(self, observer: Observer | None) -> None:
        self._observer = observer
        for part in (self.deliveries, self.streams, self.attach):
            part.obs = observer

    @property
    def mesh(self) -> object:
        """The control plane (router.node.mesh.MeshControl) the inter-router links talk to."""
        return self.mesh_links.mesh

    @mesh.setter
    def mesh(self, mesh: object) -> None:
        self.mesh_links.mesh = mesh

    @property
    def budget(self) -> MemoryBudget | None:
        """The node's memory budget (router.forwarding.budget), None: no budget."""
        return self.core.ledger.budget

    @budget.setter
    def budget(self, budget: MemoryBudget | None) -> None:
        self.core.ledger.budget = budget
        if budget is not None:
            budget.size_of = self._delivery_size
            budget.exempt = lambda p: p.conn.internal      # management's agent, the broker gateways
            budget.stalled = self._stalled

    @staticmethod
    def _stalled(c: Consumer) -> bool:
        """For the memory budget: `c` takes nothing at once (a stream is in progress on its link, or its
        socket is full) even if the kernel has just taken its output."""
        return c.busy or c.conn.want_write

    def _delivery_size(self, conn: Connection) -> int:
        """The mean size of what `conn` sent per delivery so far (bytes read over its producers'
        deliveries; frames other than transfers count too, so it errs on the large side), 0: none yet."""
        links = self.links
        n = 0
        for link in conn.links:
            rec = links.get(link)
            if rec is not None and rec.__class__ is Producer:
                n += rec.delivered
        return conn.bytes_in // n if n else 0

    @property
    def paused(self) -> bool:
        """Streamed messages wait for room in their consumers' sessions."""
        return bool(self.streams.paused)

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
        if self._observer is not None:
            self._observer.event("conn_up", None, None, peer)
        log.debug("connection from %s", peer)
        return conn

    def conn_of_transport(self, transport: object) -> Connection | None:
        return self.conns.get(pn_transport_connection(transport))

    def kill(self, conn: Connection) -> None:
        """The connection is gone: fail its links' deliveries and queue it for tear-down."""
        if not conn.alive:
            return
        conn.alive = False
        if self._observer is not None:
            self._observer.event("conn_down", None, None, conn.peer)
        self.mesh_links.router_down(conn)
        for link in list(conn.links):
            self.attach.drop_link(link, conn_alive=False)
        self.dead.append(conn)
        budget = self.core.ledger.budget
        if budget is not None:
            budget.forget(conn)
        log.debug("connection from %s closed", conn.peer)

    def take_dead(self) -> list[Connection]:
        """Connections to unregister and free (the server does the socket part)."""
        dead, self.dead = self.dead, []
        for conn in dead:
            self.conns.pop(conn.pn_conn, None)
            self.dirty.discard(conn)
            self.recently_dead[conn.pn_transport] = conn.peer
        return dead

    def close(self, conn: Connection) -> None:
        """Say goodbye on a live connection (a Close, written now) before the node stops."""
        if conn.alive:
            pn_connection_close(conn.pn_conn)
            conn.flush()

    def tick(self, now_ms: int) -> None:
        """Drive every transport's idle-timeout processing (heartbeats out, silent peers dropped)."""
        for conn in list(self.conns.values()):
            if conn.alive:
                pn_transport_tick(conn.pn_transport, now_ms)
                self.dirty.add(conn)
        self.attach.failures.flush(now_ms / 1000)

    def end_of_input(self, conn: Connection) -> None:
        """The peer stopped sending (or sent something Proton could not decode): close our side."""
        c = conn.pn_conn
        state = pn_connection_state(c)
        if not state & PN_LOCAL_CLOSED:
            # a peer that sent CLOSE before ending its output closed cleanly: no error in our CLOSE
            failed = pn_condition_is_set(pn_transport_condition(conn.pn_transport))
            if not state & PN_REMOTE_CLOSED and not failed:
                conn.set_close_condition(b"amqp:connection:framing-error", b"invalid frame")
            pn_connection_close(c)
        self.dirty.add(conn)

    def answer_echo(self, conn: Connection) -> None:
        """A FLOW with echo=true arrived: make Proton send a FLOW back on every session.

        Proton-C ignores `echo`; re-setting a session's incoming capacity makes it post a flow for that
        session (carrying a receiver link's state when one is pending), which is the answer we can give.
        """
        for ssn in conn.sessions:
            pn_session_set_incoming_capacity(ssn, pn_session_get_incoming_capacity(ssn))
        for link in conn.links:
            rec = self.links.get(link)
            if rec is not None and rec.__class__ is Producer:
                if rec.draining:
                    pn_link_drain(link, 0)
                else:
                    pn_link_flow(link, 0)
        self.dirty.add(conn)

    def _on_transport_closed(self, ev: object) -> None:
        conn = self.conns.get(pn_transport_connection(pn_event_transport(ev)))
        if conn is not None:
            self.kill(conn)

    # ---- the event pump ------------------------------------------------------------------------------
    def process(self) -> None:
        """Handle every pending Proton event (transport events need nothing: `next_event` skips them)."""
        coll = self.collector
        out = self._event
        step = hotpath.next_event
        on_delivery, on_settled = self.deliveries.on_delivery, self.deliveries.on_settled
        on_flow, rare = self._on_flow, self._rare
        t = step(coll, 0, out)
        while t:
            try:
                if t == PN_DELIVERY:
                    on_delivery(out[1], out[2])
                elif t > SETTLED:
                    on_settled(out[1], t - SETTLED)
                elif t == PN_LINK_FLOW:
                    on_flow(out[1])
                else:
                    handler = rare.get(t)
                    if handler is not None:
                        handler(out[0])
            except Exception:           # a bug handling one event closes that connection only
                self._handler_failed(out[0], t if t < SETTLED else PN_DELIVERY)
            t = step(coll, 1, out)
        if self.unblocked:
            self.read_unblocked()
        if self.recently_dead:
            self.recently_dead.clear()          # their events were handled in this pass

    def read_unblocked(self) -> None:
        """Read the transfers that wait on links a streamed message no longer holds.

        While a stream is read (or paused, its consumers' sessions full), the transfers behind it on the
        same link are not the link's current delivery: their events read nothing (`take` answers
        NOT_READABLE) and Proton raises none again once they are complete. When the stream ends, its
        link is listed here and its waiting transfers are read in order, as their events would have,
        until one is still arriving (a new stream: its own frames' events move it on).
        """
        on_delivery = self.deliveries.on_delivery
        unblocked = self.unblocked
        while unblocked:
            link = unblocked.pop(0)
            rec = self.links.get(link)
            if rec is None or rec.__class__ is not Producer:
                continue
            try:
                d = pn_link_current(link)
                while d != ffi.NULL:
                    on_delivery(d, link)
                    if link not in self.links:
                        break
                    after = pn_link_current(link)
                    if after == d:          # still arriving (its events move it on), or held back
                        break
                    d = after
            except Exception:           # a bug reading one link closes that connection only
                log.exception("internal error reading the transfers behind a streamed message")
                self._fail_connection(rec.conn)

    def _handler_failed(self, ev: object, event_type: int) -> None:
        log.exception("internal error handling %s", ffi.string(pn_event_type_name(event_type)).decode())
        conn = self.conns.get(pn_event_connection(ev))
        if conn is not None:
            self._fail_connection(conn)

    def _fail_connection(self, conn: Connection) -> None:
        """Close a connection whose traffic the node failed to handle (a bug): its links are dropped."""
        if conn.alive:
            conn.set_close_condition(b"amqp:internal-error",
                                     b"the router failed to handle this connection's traffic")
            pn_connection_close(conn.pn_conn)
            for link in list(conn.links):
                self.attach.drop_link(link, conn_alive=True)
            conn.input_closed = True    # read nothing more; the socket goes once the close is written
            self.dirty.add(conn)

    def sync_routes(self) -> None:
        """Give the core the control plane's current view when it changed (see RouterLinks)."""
        self.mesh_links.sync_routes()

    def resume_streams(self) -> None:
        """Move paused streamed messages on (called after output was written), then read what waited
        behind those that ended."""
        self.streams.resume()
        if self.unblocked:
            self.read_unblocked()

    # ---- credit ------------------------------------------------------------------------------------------
    def _on_flow(self, link: object) -> None:
        rec = self.links.get(link)
        if rec is None or rec.__class__ is RouterLink:
            return
        if rec.__class__ is Consumer:
            if self.core.consumer_flow(rec, pn_link_credit(link), bool(pn_link_get_drain(link))):
                pn_link_drained(link)      # nothing is waiting for this consumer: answer the drain now
                self.dirty.add(rec.conn)
        else:
            self.core.producer_credit(rec, pn_link_credit(link))

    def apply_credit(self) -> None:
        """Flow the credit the core decided to producers, and drain those that lost their consumers."""
        grants, drains = self.core.take_credit_actions()
        dirty = self.dirty
        obs = self._observer
        for p, n in grants:
            pn_link_flow(p.handle, n)
            dirty.add(p.conn)
            if obs is not None and n and p.credit == n:   # it had none: credit came back
                obs.event("credit_starved_end", p.handle, p.address.key if p.address else None, p.conn.peer)
        for p in drains:
            pn_link_drain(p.handle, 0)
            dirty.add(p.conn)

    # ---- state -------------------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Core tables plus the adapter's own (for logs). The node's in-process clients (management
        agent, broker gateways) are counted apart, as `internal_connections`."""
        snap = self.core.snapshot(hidden=lambda link: link.conn.internal)
        internal = sum(1 for c in self.conns.values() if c.internal)
        links = sum(1 for rec in self.links.values() if not rec.conn.internal)
        snap.update(connections=len(self.conns) - internal, internal_connections=internal, links=links,
                    streams=len(self.streams.active), memos=self.deliveries.memo_sizes())
        return snap

