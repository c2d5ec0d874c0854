"""Connections, sessions and links coming and going: attach, detach, and what a lost link leaves behind.

The core decides whether a link is accepted (`RouterCore.attach_consumer` / `attach_producer` return the
link's record or a `Refusal`) and what happens to the deliveries a lost consumer leaves
(`RouterCore.detach_consumer`: RELEASED if never on the wire, else MODIFIED); this module reads the
attach from Proton, applies the listener's link limits and carries the decisions out.

Authorization (router.policy) is decided by the core's policy and applied here: a client connection's
Open is answered only once its group is resolved (`Policy.open`: its `Access` is kept on the connection,
or the Open is answered with a Close `amqp:unauthorized-access`); a Begin beyond the group's
`max_sessions` is ended with that condition; every attach passes the connection's access to the core,
and the link counts the core compares with `max_senders` / `max_receivers` are kept as links come and go.
The node's in-process clients (`conn.internal`) are trusted; inter-router connections are peers.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_LOCAL_ACTIVE,
    PN_LOCAL_CLOSED,
    PN_LOCAL_UNINIT,
    PN_SND_SETTLED,
    pn_condition_get_description,
    pn_condition_get_name,
    pn_condition_is_set,
    pn_condition_set_description,
    pn_condition_set_name,
    pn_connection_close,
    pn_connection_open,
    pn_connection_state,
    pn_delivery_abort,
    pn_delivery_settle,
    pn_event_connection,
    pn_event_link,
    pn_event_session,
    pn_event_transport,
    pn_link_close,
    pn_link_free,
    pn_link_is_sender,
    pn_link_open,
    pn_link_queued,
    pn_link_remote_snd_settle_mode,
    pn_link_remote_source,
    pn_link_remote_target,
    pn_link_session,
    pn_link_set_snd_settle_mode,
    pn_link_source,
    pn_link_state,
    pn_link_target,
    pn_session_close,
    pn_session_condition,
    pn_session_connection,
    pn_session_open,
    pn_session_set_incoming_capacity,
    pn_session_state,
    pn_terminus_copy,
    pn_terminus_is_dynamic,
    pn_terminus_set_address,
    pn_transport_condition,
    pn_transport_connection,
)

from router.adapter.endpoints import SESSION_CAPACITY, refuse, terminus_address
from router.adapter.outcomes import NodeOutcome
from router.adapter.routerlinks import ROUTER_ROLES, RouterLink
from router.amqp.frames import refusal
from router.forwarding.decisions import Refusal
from router.forwarding.records import MODIFIED, Consumer, Producer
from router.logs import LogEvery, cut
from router.policy.access import TRUSTED
from router.policy.engine import Peer

POLICY_ERROR = "amqp:connection:policy-error"

UNAUTHORIZED = b"amqp:unauthorized-access"
FAILURE_LOG_INTERVAL = 10.0     # seconds: one line per remote host and error about failed connections

log = logging.getLogger(__name__)


def _failure_line(key: object, count: int, detail: object) -> tuple:
    (_host, name), (peer, desc) = key, detail
    name, desc = cut(name), cut(desc, 400)        # the peer's close condition, if it sent one
    if count == 1:
        return "connection from %s failed: %s %s", peer, name, desc
    return "%d connections from %s failed: %s %s (the last from %s)", count, key[0], name, desc, peer

class LinkEvents:
    """Connection, session and link lifecycle events of one engine."""

    def __init__(self, engine: object) -> None:
        self.engine = engine
        self.core = engine.core
        self.links = engine.links
        self.conns = engine.conns
        self.dirty = engine.dirty
        self.obs = None
        self.failures = LogEvery(log, FAILURE_LOG_INTERVAL, _failure_line, logging.INFO)

    # ---- connections and sessions ----------------------------------------------------------------------
    def on_connection_open(self, ev: object) -> None:
        c = pn_event_connection(ev)
        conn = self.conns.get(c)
        if pn_connection_state(c) & PN_LOCAL_UNINIT:
            if conn is not None and conn.role == "normal" and not self._admit(conn):
                return
            pn_connection_open(c)
        if conn is not None:
            self.dirty.add(conn)
            if conn.role in ROUTER_ROLES and conn.router is None:
                self.engine.mesh_links.connection_opened(conn)

    def _admit(self, conn: object) -> bool:
        """Resolve a client connection's access at its Open (SASL is done); False: refused, closing."""
        if conn.internal:
            conn.access = TRUSTED
            return True
        result = self.core.policy.open(Peer(conn.user, conn.sasl_mechanism, conn.peer, conn.listener,
                                            conn.remote_hostname, conn.policy_vhost))
        if result.__class__ is str:
            conn.refuse(UNAUTHORIZED, result.encode())
            conn.input_closed = True        # read nothing more; the socket goes once the Close is written
            self.dirty.add(conn)
            return False
        conn.access = result
        g = result.group
        if g is not None and g.max_message_size is not None and g.max_message_size < conn.max_message_size:
            conn.max_message_size = g.max_message_size
        return True

    def on_connection_close(self, ev: object) -> None:
        conn = self.conns.get(pn_event_connection(ev))
        if conn is not None:
            self.engine.mesh_links.router_down(conn)
            for link in list(conn.links):
                self.drop_link(link, conn_alive=True)
            self.dirty.add(conn)
        pn_connection_close(pn_event_connection(ev))

    def on_session_open(self, ev: object) -> None:
        ssn = pn_event_session(ev)
        conn = self.conns.get(pn_session_connection(ssn))
        if pn_session_state(ssn) & PN_LOCAL_UNINIT:
            access = conn.access if conn is not None else None
            if access is not None and access.group is not None:
                problem = self.core.policy.session(access, len(conn.sessions))
                if problem is not None:
                    cond = pn_session_condition(ssn)
                    pn_condition_set_name(cond, UNAUTHORIZED)
                    pn_condition_set_description(cond, problem.encode())
                    pn_session_open(ssn)
                    pn_session_close(ssn)
                    self.dirty.add(conn)
                    return
            # a peer node's (or an edge's, or an edge's interior's) sessions after its first carry one
            # streaming link each (streamlinks.py)
            stream = conn is not None and conn.role in ROUTER_ROLES and bool(conn.sessions)
            streams = self.engine.mesh_links.streams
            pn_session_set_incoming_capacity(ssn, streams.capacity(conn, streams.window) if stream
                                             else SESSION_CAPACITY)
            pn_session_open(ssn)
        if conn is not None:
            conn.sessions.append(ssn)
            self.dirty.add(conn)

    def on_session_close(self, ev: object) -> None:
        ssn = pn_event_session(ev)
        conn = self.conns.get(pn_session_connection(ssn))
        if conn is not None:
            for link in [lk for lk in conn.links if pn_link_session(lk) == ssn]:
                self.drop_link(link, conn_alive=True)
                pn_link_close(link)
            if ssn in conn.sessions:
                conn.sessions.remove(ssn)
            self.dirty.add(conn)
        pn_session_close(ssn)

    def on_transport_error(self, ev: object) -> None:
        """A connection failed (framing, TLS, SASL...): logged once per remote host and error per interval,
        with the count (a flood of failing connections makes a few lines, each naming the peer)."""
        t = pn_event_transport(ev)
        cond = pn_transport_condition(t)
        conn = self.conns.get(pn_transport_connection(t))
        peer = conn.peer if conn is not None else self.engine.recently_dead.get(t, "?")
        if pn_condition_is_set(cond):
            name = ffi.string(pn_condition_get_name(cond)).decode(errors="replace")
            d = pn_condition_get_description(cond)
            desc = ffi.string(d).decode(errors="replace") if d != ffi.NULL else ""
            self.failures.note((peer.rsplit(":", 1)[0], name), self.core.now, (peer, desc))
            if conn is not None and name == POLICY_ERROR and "skipped" in desc:
                self._say_sasl_required(conn)
        if conn is not None:
            self.dirty.add(conn)

    def _say_sasl_required(self, conn: Any) -> None:
        """A client skipped the SASL exchange its listener requires: Proton closes without a word, so
        the node writes header, Open and Close(policy-error) itself, in clear (not over TLS or WebSocket:
        there Proton or the stream owns the bytes)."""
        if conn.ssl is not None or conn.framed:
            return
        why = "this listener requires SASL authentication; the client skipped it (connect with SASL)"
        with contextlib.suppress(OSError):
            conn.sock.send(refusal(self.core.node_id, POLICY_ERROR, why))

    # ---- attach -----------------------------------------------------------------------------------------
    def on_link_open(self, ev: object) -> None:
        link = pn_event_link(ev)
        if not pn_link_state(link) & PN_LOCAL_UNINIT:
            rec = self.links.get(link)          # the peer answered an attach we made
            if rec is not None and rec.__class__ is RouterLink:
                self.engine.mesh_links.up_check(rec.conn)
            return
        ssn = pn_link_session(link)
        conn = self.conns.get(pn_session_connection(ssn))
        if conn is None or not conn.alive or pn_session_state(ssn) & PN_LOCAL_CLOSED:
            return                              # (a session the node refused: nothing attaches on it)
        self.dirty.add(conn)
        refusal = conn.admit_link(link)         # listener limits (max_links); max-message-size
        if refusal is not None:
            refuse(link, b"amqp:resource-limit-exceeded", refusal)
            return
        pn_terminus_copy(pn_link_source(link), pn_link_remote_source(link))
        pn_terminus_copy(pn_link_target(link), pn_link_remote_target(link))
        if conn.role in ROUTER_ROLES:
            self.engine.mesh_links.attached(link, conn)
        elif pn_link_is_sender(link):
            self._attach_consumer(link, conn)
        else:
            self._attach_producer(link, conn)

    def _attach_consumer(self, link: object, conn: object) -> None:
        """A client receiver attached: we send to it from its source address."""
        src = pn_link_remote_source(link)
        dynamic = bool(pn_terminus_is_dynamic(src))
        rec = self.core.attach_consumer(link, conn, None if dynamic else terminus_address(src), dynamic,
                                        pn_link_remote_snd_settle_mode(link) == PN_SND_SETTLED, conn.access)
        if rec.__class__ is Refusal:
            refuse(link, rec.condition.encode(), rec.description.encode())
            return
        if dynamic:
            pn_terminus_set_address(pn_link_source(link), rec.name.encode())
        if rec.presettle:
            # at-most-once: the consumer wants every delivery pre-settled; an unsettled one from a
            # producer is settled ACCEPTED upstream once it has been handed over settled
            pn_link_set_snd_settle_mode(link, PN_SND_SETTLED)
        self._opened(link, conn, rec, rec.address.key)

    def _attach_producer(self, link: object, conn: object) -> None:
        """A client sender attached: it sends to its target address (none: anonymous relay)."""
        tgt = pn_link_remote_target(link)
        dynamic = bool(pn_terminus_is_dynamic(tgt))
        rec = self.core.attach_producer(link, conn, None if dynamic else terminus_address(tgt), dynamic,
                                        conn.access)
        if rec.__class__ is Refusal:
            refuse(link, rec.condition.encode(), rec.description.encode())
            return
        self._opened(link, conn, rec, rec.address.key if rec.address else None)

    def _opened(self, link: object, conn: object, rec: Consumer | Producer, key: str | None) -> None:
        self.links[link] = rec
        conn.links.add(link)
        access = conn.access
        if access is not None and access.group is not None:
            access.link_opened(rec.__class__ is Consumer)
        pn_link_open(link)
        log.debug("%s attached to %s from %s", "consumer" if rec.__class__ is Consumer else "producer",
                  key or "<anonymous>", conn.peer)
        if self.obs is not None:
            self.obs.event("link_up", link, key, conn.peer)

    # ---- detach -----------------------------------------------------------------------------------------
    def on_link_close(self, ev: object) -> None:
        link = pn_event_link(ev)
        if link in self.links:
            self.drop_link(link, conn_alive=True)
        if pn_link_state(link) & PN_LOCAL_ACTIVE:
            pn_link_close(link)
        pn_link_free(link)          # Proton sends the detach, then forgets it (no growth per link)
        conn = self.conns.get(pn_event_connection(ev))
        if conn is not None:
            self.dirty.add(conn)

    def drop_link(self, link: object, conn_alive: bool) -> None:
        """Forget a link; settle what it leaves behind so nothing stays unsettled anywhere."""
        rec = self.links.get(link)
        if rec is None:
            return
        if rec.__class__ is Producer:
            self.engine.streams.deliver_arrived(link, rec)     # still a producer while it does
        del self.links[link]
        rec.conn.links.discard(link)
        if rec.conn.router is not None:
            rec.conn.router.remove(link)            # an inter-router link: freed after this (on_link_close)
        cls = rec.__class__
        if cls is RouterLink:
            self.engine.mesh_links.router_down(rec.conn)
            return
        if self.obs is not None:
            self.obs.event("link_down", link, rec.address.key if rec.address else None, rec.conn.peer)
        access = rec.conn.access
        if access is not None and access.group is not None:
            access.link_closed(cls is Consumer)
        if cls is Consumer:
            self._drop_consumer(rec, link, conn_alive)
            if rec.peer is not None:
                self.engine.mesh_links.routes_changed()
        else:
            self._drop_producer(rec)

    def _drop_consumer(self, c: Consumer, link: object, conn_alive: bool) -> None:
        """The core says what each delivery left behind becomes; streams in progress are aborted."""
        deliveries, streams = self.engine.deliveries, self.engine.streams
        for od, e, outcome in self.core.detach_consumer(c, pn_link_queued(link)):
            stream = streams.outs.pop(od, None)
            if stream is not None:                  # partly sent: the consumer got a broken message
                stream.outs = [(cc, d) for cc, d in stream.outs if d != od]
                if conn_alive:
                    pn_delivery_abort(od)           # aborting settles it too
                if e.group is not None:
                    deliveries.copy_settled(e.group, None, MODIFIED, NodeOutcome(MODIFIED))
                else:
                    stream.final = NodeOutcome(MODIFIED)
                    if self.obs is not None:
                        self.obs.grew(e.in_dlv, stream.size)
                        self.obs.settled(e, MODIFIED)
                continue
            deliveries.fail(e, outcome)
            if conn_alive:
                pn_delivery_settle(od)
        for item in self.core.take_held(c):
            deliveries.release_held(item, c)

    def _drop_producer(self, p: Producer) -> None:
        self.core.remove_producer(p)
        self.engine.streams.producer_lost(p)

