"""One client connection driven through ``cproton_ffi`` on an :class:`~router.rpc.loop.EventLoop`.

The node drives Proton-C the same way (router.adapter): a socket of our own, a ``pn_transport`` fed with
the bytes read and drained into the socket, a ``pn_collector`` whose events are dispatched by type. Here
one :class:`Wire` is one connection with one session; links are :class:`Link` objects. What Proton
reports is turned into calls on a :class:`WireHandler` (``ConnectionCore`` in
:mod:`router.rpc.connection`): links opened, credit, outcomes of sent deliveries, complete incoming
messages (as bytes), links and the connection closed. Everything here runs on the loop thread.

Connection set-up: ``amqp://host:port`` (``amqp://user:password@host:port`` authenticates with SASL
PLAIN; otherwise SASL ANONYMOUS, as python-qpid-proton's container did), TCP_NODELAY, no automatic
reconnect, idle-timeout heartbeats from ``pn_transport_tick``. ``amqps://`` adds TLS as python-qpid-proton's
client default did: the server's certificate must be trusted by OpenSSL's default CAs (``SSL_CERT_FILE``
/ ``SSL_CERT_DIR`` name others) and match the URL's host name; the default port is then 5671.
"""

from __future__ import annotations

import itertools
import logging
import selectors
import socket
import time
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_CONNECTION_REMOTE_CLOSE,
    PN_DELIVERY,
    PN_LINK_FLOW,
    PN_LINK_REMOTE_CLOSE,
    PN_LINK_REMOTE_DETACH,
    PN_LINK_REMOTE_OPEN,
    PN_LOCAL_ACTIVE,
    PN_REMOTE_ACTIVE,
    PN_SESSION_REMOTE_CLOSE,
    PN_SSL_MODE_CLIENT,
    PN_SSL_VERIFY_PEER_NAME,
    PN_TRANSPORT,
    PN_TRANSPORT_CLOSED,
    PN_TRANSPORT_ERROR,
    pn_collector,
    pn_collector_free,
    pn_collector_peek,
    pn_collector_pop,
    pn_condition_get_description,
    pn_condition_get_name,
    pn_condition_is_set,
    pn_connection,
    pn_connection_close,
    pn_connection_collect,
    pn_connection_open,
    pn_connection_release,
    pn_connection_remote_condition,
    pn_connection_set_container,
    pn_connection_set_hostname,
    pn_connection_set_password,
    pn_connection_set_user,
    pn_connection_state,
    pn_decref,
    pn_delivery,
    pn_delivery_aborted,
    pn_delivery_link,
    pn_delivery_partial,
    pn_delivery_pending,
    pn_delivery_readable,
    pn_delivery_remote,
    pn_delivery_remote_state,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_delivery_update,
    pn_delivery_updated,
    pn_disposition_condition,
    pn_disposition_is_failed,
    pn_disposition_is_undeliverable,
    pn_event_delivery,
    pn_event_link,
    pn_event_session,
    pn_event_type,
    pn_link_advance,
    pn_link_close,
    pn_link_credit,
    pn_link_drain,
    pn_link_drained,
    pn_link_flow,
    pn_link_get_drain,
    pn_link_open,
    pn_link_recv,
    pn_link_remote_condition,
    pn_link_remote_source,
    pn_link_send,
    pn_link_source,
    pn_link_state,
    pn_link_target,
    pn_receiver,
    pn_sasl,
    pn_sasl_allowed_mechs,
    pn_sasl_set_allow_insecure_mechs,
    pn_sender,
    pn_session,
    pn_session_open,
    pn_session_remote_condition,
    pn_ssl,
    pn_ssl_domain,
    pn_ssl_domain_set_peer_authentication,
    pn_ssl_init,
    pn_ssl_present,
    pn_ssl_set_peer_hostname,
    pn_terminus_get_address,
    pn_terminus_set_address,
    pn_terminus_set_dynamic,
    pn_transport,
    pn_transport_bind,
    pn_transport_capacity,
    pn_transport_close_head,
    pn_transport_close_tail,
    pn_transport_condition,
    pn_transport_peek,
    pn_transport_pop,
    pn_transport_push,
    pn_transport_tick,
    pn_transport_unbind,
)

from router.adapter.pnbuffers import BUSY_BUFFER, grow_input, pending

from .loop import EventLoop, Timer

log = logging.getLogger(__name__)

IO_CHUNK = 64 * 1024
LAZY_FLUSH = 0.002      # seconds a lazy disposition may wait for other output
QUIET = frozenset((PN_DELIVERY, PN_LINK_FLOW, PN_TRANSPORT))   # events whose output may wait (if lazy)
ACCEPTED, REJECTED, RELEASED, MODIFIED = 0x24, 0x25, 0x26, 0x27    # as proton.Delivery's constants
OUTCOMES = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))

Condition = tuple[str, str | None]
"""An AMQP error condition: (name, description)."""


_tls_domain: Any = None


def _client_tls_domain() -> Any:
    """One client SSL domain for the process: OpenSSL's default CAs, the peer's name checked."""
    global _tls_domain
    if _tls_domain is None:
        if not pn_ssl_present():
            raise ValueError("this Proton build has no TLS")
        domain = pn_ssl_domain(PN_SSL_MODE_CLIENT)
        if domain == ffi.NULL or pn_ssl_domain_set_peer_authentication(domain, PN_SSL_VERIFY_PEER_NAME,
                                                                       ffi.NULL) != 0:
            raise ValueError("cannot make a TLS client context")
        _tls_domain = domain
    return _tls_domain


def _condition(cond: Any) -> Condition | None:
    if cond == ffi.NULL or not pn_condition_is_set(cond):
        return None
    name = pn_condition_get_name(cond)
    desc = pn_condition_get_description(cond)
    return (ffi.string(name).decode("utf-8", "replace") if name != ffi.NULL else "",
            ffi.string(desc).decode("utf-8", "replace") if desc != ffi.NULL else None)


def describe(cond: Condition | None) -> str:
    """``name: description`` of an AMQP error condition (or "" for none)."""
    if cond is None:
        return ""
    return f"{cond[0]}: {cond[1]}" if cond[1] else cond[0]


class Outcome:
    """The terminal state the peer gave one of our deliveries."""

    __slots__ = ("state", "failed", "undeliverable", "condition")

    def __init__(self, state: int, failed: bool, undeliverable: bool, condition: Condition | None) -> None:
        self.state = state
        self.failed = failed
        self.undeliverable = undeliverable
        self.condition = condition


_ACCEPTED = Outcome(ACCEPTED, False, False, None)


class WireHandler(Protocol):
    """What a :class:`Wire` reports (loop thread)."""

    def on_link_opened(self, link: Link) -> None: ...
    def on_link_flow(self, link: Link) -> None: ...
    def on_outcome(self, link: Link, delivery: Any, outcome: Outcome) -> None: ...
    def on_message(self, link: Link, delivery: Any, data: bytes, settled: bool) -> None: ...
    def on_link_closed(self, link: Link, condition: Condition | None) -> None: ...
    def lost(self, why: str) -> None: ...


class Link:
    """One sender or receiver link (loop thread only)."""

    __slots__ = ("pn", "name", "is_sender", "target", "wire")

    def __init__(self, wire: Wire, pn: Any, name: str, is_sender: bool, target: str | None) -> None:
        self.wire = wire
        self.pn = pn
        self.name = name
        self.is_sender = is_sender
        self.target = target            # the address we attached to (None: anonymous relay / dynamic)

    @property
    def is_receiver(self) -> bool:
        return not self.is_sender

    @property
    def credit(self) -> int:
        return pn_link_credit(self.pn) if self.pn is not None else 0

    @property
    def remote_active(self) -> bool:
        return self.pn is not None and bool(pn_link_state(self.pn) & PN_REMOTE_ACTIVE)

    @property
    def active(self) -> bool:
        """Open on both ends."""
        if self.pn is None:
            return False
        state = pn_link_state(self.pn)
        return bool(state & PN_LOCAL_ACTIVE and state & PN_REMOTE_ACTIVE)

    @property
    def local_active(self) -> bool:
        return self.pn is not None and bool(pn_link_state(self.pn) & PN_LOCAL_ACTIVE)

    @property
    def drain_mode(self) -> bool:
        return self.pn is not None and bool(pn_link_get_drain(self.pn))

    @property
    def remote_source_address(self) -> str | None:
        addr = pn_terminus_get_address(pn_link_remote_source(self.pn))
        return ffi.string(addr).decode() if addr != ffi.NULL else None

    def flow(self, n: int) -> None:
        pn_link_flow(self.pn, n)
        self.wire.dirty = True

    def drain(self, n: int) -> None:
        pn_link_drain(self.pn, n)
        self.wire.dirty = True

    def drained(self) -> None:
        pn_link_drained(self.pn)
        self.wire.dirty = True

    def send(self, tag: bytes, payload: bytes) -> Any:
        """Send one whole message; the delivery pointer (the key of its outcome)."""
        pn = self.pn
        dlv = pn_delivery(pn, (len(tag), ffi.from_buffer(tag)))
        pn_link_send(pn, ffi.from_buffer(payload), len(payload))
        pn_link_advance(pn)
        self.wire.dirty = True
        return dlv

    def close(self) -> None:
        if self.pn is not None and pn_link_state(self.pn) & PN_LOCAL_ACTIVE:
            pn_link_close(self.pn)
            self.wire.dirty = True

    def __repr__(self) -> str:
        return f"<{'sender' if self.is_sender else 'receiver'} {self.name} {self.target}>"


class Wire:
    """Socket + Proton transport, connection, session and links of one client connection."""

    def __init__(self, loop: EventLoop, handler: WireHandler, url: str, container_id: str) -> None:
        self.loop = loop
        self.handler = handler
        self.url = url
        self.container_id = container_id
        self.sock: socket.socket | None = None
        self.links: dict[Any, Link] = {}          # pn_link_t* -> Link
        self.dirty = False                         # output to write at once
        self.lazy = False                          # output that may wait up to LAZY_FLUSH s
        self._lazy_timer: Timer | None = None
        self.want_write = False
        self.closed = False                        # the transport is done (socket closed)
        self._collector = pn_collector()
        self._conn: Any = None
        self._transport: Any = None
        self._session: Any = None
        self._names = itertools.count(1)
        self._tick_timer: Timer | None = None
        self._rbuf = bytearray(IO_CHUNK)
        self._rbuf_c = ffi.from_buffer(self._rbuf)
        self._wbuf = bytearray(IO_CHUNK)
        self._wbuf_c = ffi.from_buffer(self._wbuf)
        self._wbuf_mv = memoryview(self._wbuf)
        self._recv_buf = bytearray(4096)
        self._recv_buf_c = ffi.from_buffer(self._recv_buf)
        self._transport_error = ""
        loop.before_sleep = self.pump

    # ---- opening
    def open(self, connect_timeout: float) -> None:
        """Connect the socket and open the AMQP connection and its session (loop thread, blocking for the
        TCP connect). Raises ``OSError`` or ``ValueError`` if it cannot."""
        parts = urlsplit(self.url if "://" in self.url else f"amqp://{self.url}")
        if parts.scheme not in ("amqp", "amqps"):
            raise ValueError(f"{self.url}: only amqp:// and amqps:// URLs are supported")
        tls = parts.scheme == "amqps"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (5671 if tls else 5672)
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self.sock = sock
        c = self._conn = pn_connection()
        t = self._transport = pn_transport()
        if tls:
            ssl = pn_ssl(t)
            if pn_ssl_init(ssl, _client_tls_domain(), ffi.NULL) != 0:
                raise ValueError(f"{self.url}: TLS is not available in this Proton build")
            pn_ssl_set_peer_hostname(ssl, host.encode())
        sasl = pn_sasl(t)
        if parts.username:
            pn_connection_set_user(c, unquote(parts.username).encode())
            pn_connection_set_password(c, unquote(parts.password or "").encode())
            pn_sasl_allowed_mechs(sasl, b"PLAIN")
            pn_sasl_set_allow_insecure_mechs(sasl, True)
        else:
            pn_sasl_allowed_mechs(sasl, b"ANONYMOUS")
        pn_connection_set_container(c, self.container_id.encode())
        pn_connection_set_hostname(c, host.encode())
        pn_connection_collect(c, self._collector)
        pn_transport_bind(t, c)
        pn_connection_open(c)
        self._session = pn_session(c)
        pn_session_open(self._session)
        self.loop.selector.register(sock, selectors.EVENT_READ, self._on_io)
        self.dirty = True

    def _link(self, target: str | None, is_sender: bool, dynamic: bool = False) -> Link:
        name = f"{self.container_id}-{'s' if is_sender else 'r'}{next(self._names)}"
        pn = (pn_sender if is_sender else pn_receiver)(self._session, name.encode())
        if is_sender:
            if target is not None:
                pn_terminus_set_address(pn_link_target(pn), target.encode())
        else:
            src = pn_link_source(pn)
            if dynamic:
                pn_terminus_set_dynamic(src, True)
            elif target is not None:
                pn_terminus_set_address(src, target.encode())
            pn_terminus_set_address(pn_link_target(pn), name.encode())
        pn_link_open(pn)
        link = Link(self, pn, name, is_sender, target)
        self.links[pn] = link
        self.dirty = True
        return link

    def open_sender(self, target: str | None) -> Link:
        """A sender to ``target`` (None: the anonymous relay)."""
        return self._link(target, True)

    def open_receiver(self, source: str | None, dynamic: bool = False) -> Link:
        """A receiver from ``source``, or from a dynamic address the router assigns."""
        return self._link(source, False, dynamic)

    def close(self) -> bool:
        """Close the connection politely. False if it was not open (nothing to wait for)."""
        if self._conn is None or self.closed or not pn_connection_state(self._conn) & PN_LOCAL_ACTIVE:
            return False
        pn_connection_close(self._conn)
        self.dirty = True
        return True

    def settle(self, delivery: Any, state: int | None, lazy: bool = False) -> None:
        """Settle an incoming delivery with ``state`` (ACCEPTED, RELEASED, ...; None: no state, for a
        delivery the peer settled already). ``lazy``: the disposition may wait a little for other output
        (a client's replies: nobody waits for their outcome)."""
        if state is not None:
            pn_delivery_update(delivery, state)
        pn_delivery_settle(delivery)
        if lazy:
            self.lazy = True
        else:
            self.dirty = True

    # ---- I/O
    def _on_io(self, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self._read()
        if mask & selectors.EVENT_WRITE:
            self.dirty = True

    def _read(self) -> None:
        t = self._transport
        if t is None:
            return
        cap = pn_transport_capacity(t)
        if cap <= 0:
            if cap < 0:
                self._unwatch_read()
            return
        try:
            n = self.sock.recv_into(self._rbuf, min(cap, IO_CHUNK))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._transport_error = self._transport_error or str(exc)
            n = 0
        if n == 0:
            pn_transport_close_tail(t)
            self._unwatch_read()
            self.dirty = True
        else:
            if n == cap < BUSY_BUFFER:    # the read filled Proton's buffer: a busy connection's is larger
                grow_input(t)
            pn_transport_push(t, self._rbuf_c, n)

    def _unwatch_read(self) -> None:
        if self.sock is not None:
            try:
                self.loop.selector.modify(self.sock, selectors.EVENT_WRITE if self.want_write else 0,
                                          self._on_io)
            except (KeyError, ValueError):
                pass

    def _flush(self) -> None:
        t, sock = self._transport, self.sock
        p = pending(t)
        blocked = False
        while p > 0:
            k = pn_transport_peek(t, self._wbuf_c, min(p, IO_CHUNK))
            if k <= 0:
                break
            try:
                s = sock.send(self._wbuf_mv[:k])
            except (BlockingIOError, InterruptedError):
                s = 0
            except OSError as exc:
                self._transport_error = self._transport_error or str(exc)
                pn_transport_close_head(t)
                pn_transport_close_tail(t)
                return
            if s > 0:
                pn_transport_pop(t, s)
            if s < k:
                blocked = True
                break
            p = pending(t)
        if p < 0 and not blocked:
            pn_transport_close_head(t)
        if blocked != self.want_write:
            self.want_write = blocked
            try:
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if blocked else 0)
                self.loop.selector.modify(sock, events, self._on_io)
            except (KeyError, ValueError):
                pass

    def pump(self) -> None:
        """Handle Proton's events and write its output (the loop's ``before_sleep``).

        Output is written at once unless all it holds is lazy (settlements of replies, see
        :meth:`settle`): that waits up to ``LAZY_FLUSH`` s for something urgent to go with it (a caller's
        next request, usually), which saves a write here and a wake-up in the router and the server."""
        if self._transport is None:
            return
        for _ in range(8):          # writing can raise events (e.g. transport closed): go round again
            self._process()
            if self._transport is None:
                return
            if self.lazy and not self.dirty:
                if self._lazy_timer is None:
                    self._lazy_timer = self.loop.call_later(LAZY_FLUSH, self._lazy_flush)
            else:
                self.dirty = self.lazy = False      # (an armed lazy timer finds nothing to do)
                self._flush()
            if pn_collector_peek(self._collector) == ffi.NULL:
                break
        if self._tick_timer is None and self._transport is not None:
            self._tick()

    def _lazy_flush(self) -> None:
        self._lazy_timer = None
        if self.lazy:
            self.dirty = True

    def _tick(self) -> None:
        """Idle-timeout processing: heartbeats out, a silent peer detected."""
        self._tick_timer = None
        t = self._transport
        if t is None:
            return
        now = int(time.monotonic() * 1000)
        nxt = pn_transport_tick(t, now)
        self.dirty = True
        if nxt > 0:
            self._tick_timer = self.loop.call_later(max(0.001, (nxt - now) / 1000), self._tick)

    def _process(self) -> None:
        coll = self._collector
        handler = self.handler
        links = self.links
        while True:
            ev = pn_collector_peek(coll)
            if ev == ffi.NULL:
                return
            typ = pn_event_type(ev)
            if typ not in QUIET:
                self.dirty = True       # anything but messages, outcomes and credit: answer at once
            if typ == PN_DELIVERY:
                dlv = pn_event_delivery(ev)
                link = links.get(pn_delivery_link(dlv))
                if link is not None:
                    if link.is_sender:
                        self._outcome(link, dlv)
                    else:
                        self._incoming(link, dlv)
            elif typ == PN_LINK_FLOW:
                link = links.get(pn_event_link(ev))
                if link is not None and link.is_sender:
                    handler.on_link_flow(link)
            elif typ == PN_LINK_REMOTE_OPEN:
                link = links.get(pn_event_link(ev))
                if link is not None:
                    handler.on_link_opened(link)
            elif typ == PN_LINK_REMOTE_CLOSE or typ == PN_LINK_REMOTE_DETACH:
                pn = pn_event_link(ev)
                link = links.pop(pn, None)
                if link is not None:
                    cond = _condition(pn_link_remote_condition(pn))
                    if pn_link_state(pn) & PN_LOCAL_ACTIVE:
                        pn_link_close(pn)
                    handler.on_link_closed(link, cond)
            elif typ == PN_SESSION_REMOTE_CLOSE:
                cond = _condition(pn_session_remote_condition(pn_event_session(ev)))
                handler.lost(f"session closed by the router: {describe(cond)}")
                self.close()
            elif typ == PN_CONNECTION_REMOTE_CLOSE:
                cond = _condition(pn_connection_remote_condition(self._conn))
                if cond is not None:
                    handler.lost(f"connection closed by the router: {describe(cond)}")
                elif pn_connection_state(self._conn) & PN_LOCAL_ACTIVE:
                    handler.lost("connection closed by the router")
                else:
                    handler.lost("connection closed")
                if pn_connection_state(self._conn) & PN_LOCAL_ACTIVE:
                    pn_connection_close(self._conn)
            elif typ == PN_TRANSPORT_ERROR:
                cond = _condition(pn_transport_condition(self._transport))
                self._transport_error = describe(cond) or "transport error"
            elif typ == PN_TRANSPORT_CLOSED:
                pn_collector_pop(coll)
                handler.lost(f"{self.url}: {self._transport_error or 'disconnected'}")
                self.free()
                return
            pn_collector_pop(coll)

    def _outcome(self, link: Link, dlv: Any) -> None:
        if not pn_delivery_updated(dlv):
            return
        state = pn_delivery_remote_state(dlv)
        if state == ACCEPTED:
            self.handler.on_outcome(link, dlv, _ACCEPTED)
            pn_delivery_settle(dlv)
        elif state in OUTCOMES:
            disp = pn_delivery_remote(dlv)
            outcome = Outcome(state, bool(pn_disposition_is_failed(disp)),
                              bool(pn_disposition_is_undeliverable(disp)),
                              _condition(pn_disposition_condition(disp)))
            self.handler.on_outcome(link, dlv, outcome)
            pn_delivery_settle(dlv)
        elif pn_delivery_settled(dlv):
            pn_delivery_settle(dlv)

    def _incoming(self, link: Link, dlv: Any) -> None:
        if pn_delivery_aborted(dlv):
            pn_delivery_settle(dlv)
            link.flow(1)                # an aborted transfer used a credit for nothing
            return
        if not pn_delivery_readable(dlv) or pn_delivery_partial(dlv):
            return
        n = pn_delivery_pending(dlv)
        if len(self._recv_buf) < n:
            self._recv_buf = bytearray(max(n, 2 * len(self._recv_buf)))
            self._recv_buf_c = ffi.from_buffer(self._recv_buf)
        got = pn_link_recv(link.pn, self._recv_buf_c, n) if n > 0 else 0
        data = bytes(self._recv_buf[:got]) if got > 0 else b""
        pn_link_advance(link.pn)
        self.handler.on_message(link, dlv, data, bool(pn_delivery_settled(dlv)))

    # ---- the end
    def free(self) -> None:
        """Close the socket and release the Proton objects (loop thread, once the transport is done or
        the loop ended)."""
        for timer in (self._tick_timer, self._lazy_timer):
            if timer is not None:
                timer.cancel()
        self._tick_timer = self._lazy_timer = None
        if self.sock is not None and not self.closed:
            if self._transport is not None:
                try:
                    self._flush()          # a last Close on its way, if the socket takes it
                except Exception:          # noqa: BLE001 - best effort on the way out
                    pass
            try:
                self.loop.selector.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            self.sock.close()
        self.closed = True
        for link in self.links.values():
            link.pn = None
        self.links.clear()
        if self._transport is not None:
            pn_transport_unbind(self._transport)
            pn_decref(self._transport)
            pn_connection_release(self._conn)
            pn_decref(self._conn)
            self._transport = self._conn = self._session = None
        if self._collector is not None:
            pn_collector_free(self._collector)
            self._collector = None
