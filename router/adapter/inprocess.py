"""The node's in-process AMQP 1.0 client: Proton-C driven through its cffi layer, over a socketpair.

One end of an in-process socketpair is handed to the node exactly like an accepted client socket
(``attach(sock, peer)``); the other end is driven here, on the node's own asyncio loop, by a Proton
connection, transport and collector, without python-qpid-proton's wrapper objects: events, links and
deliveries are raw ``pn_*`` pointers, message bytes are read into one reused buffer, and the socket is
read and written through reused buffers, the way the node's engine does it. To the node this is an
ordinary client, so forwarding, credit and outcomes need no special case.

This is the one in-process client of the node. The broker gateway (``router.gateway``) uses it for its
bridge links; it also offers what the management agent needs. What a user gets:

* :meth:`NodeConnection.receiver`: a consumer of an address; the owner grants credit
  (:meth:`NodeLink.flow`), gets each whole message as ``bytes`` (``on_message``; multi-frame transfers
  are assembled, aborted ones dropped) and gives it its outcome, with an optional error condition
  (:meth:`NodeConnection.settle`).
* :meth:`NodeConnection.sender`: a producer to an address, or with ``None`` an anonymous sender (no
  target: the node routes each message by its ``to``). :meth:`NodeConnection.send` sends whole
  encoded messages (``bytes`` or ``bytearray``), unsettled; ``on_outcome`` reports each terminal
  outcome (ACCEPTED, REJECTED, RELEASED, MODIFIED, or 0 when settled without one; its error condition
  from :meth:`NodeConnection.condition`), then :meth:`NodeConnection.forget` settles it.
* ``on_flow`` when a link's credit or drain state changes, ``on_link_closed`` when the node detaches
  a link or the connection goes (:attr:`NodeLink.error` holds the node's error condition, if any).

It encodes and decodes no message: owners bring their own codec. Everything runs on the loop it was
given; nothing here blocks or starts threads. Its one timer is Proton's idle-timeout tick (heartbeats
to the node). It imports Proton's cffi layer and nothing of the router: it is part of the adapter.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Protocol

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_CONNECTION_REMOTE_CLOSE,
    PN_DELIVERY,
    PN_LINK_FLOW,
    PN_LINK_REMOTE_CLOSE,
    PN_LINK_REMOTE_DETACH,
    PN_LOCAL_ACTIVE,
    PN_TRANSPORT_CLOSED,
    pn_collector,
    pn_collector_free,
    pn_collector_peek,
    pn_collector_pop,
    pn_condition_get_description,
    pn_condition_get_name,
    pn_condition_is_set,
    pn_condition_set_description,
    pn_condition_set_name,
    pn_connection,
    pn_connection_collect,
    pn_connection_open,
    pn_connection_release,
    pn_connection_set_container,
    pn_decref,
    pn_delivery,
    pn_delivery_aborted,
    pn_delivery_link,
    pn_delivery_local,
    pn_delivery_partial,
    pn_delivery_pending,
    pn_delivery_readable,
    pn_delivery_remote,
    pn_delivery_remote_state,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_delivery_update,
    pn_disposition_condition,
    pn_disposition_is_undeliverable,
    pn_event_delivery,
    pn_event_link,
    pn_event_type,
    pn_link_advance,
    pn_link_close,
    pn_link_credit,
    pn_link_drain,
    pn_link_drained,
    pn_link_flow,
    pn_link_free,
    pn_link_get_drain,
    pn_link_open,
    pn_link_recv,
    pn_link_remote_condition,
    pn_link_send,
    pn_link_source,
    pn_link_state,
    pn_link_target,
    pn_receiver,
    pn_sender,
    pn_session,
    pn_session_open,
    pn_session_set_incoming_capacity,
    pn_terminus_set_address,
    pn_transport,
    pn_transport_bind,
    pn_transport_capacity,
    pn_transport_close_tail,
    pn_transport_peek,
    pn_transport_pop,
    pn_transport_push,
    pn_transport_tick,
    pn_transport_unbind,
)

from router.adapter.pnbuffers import BUSY_BUFFER, grow_input, pending

log = logging.getLogger(__name__)

IO_CHUNK = 256 * 1024
SESSION_CAPACITY = 8 * 1024 * 1024   # bytes the node may have in flight to this client
TICK_INTERVAL = 1.0                  # seconds between idle-timeout checks (heartbeats to the node)
ACCEPTED, REJECTED, RELEASED, MODIFIED = 0x24, 0x25, 0x26, 0x27
TERMINAL = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))


class ReceiverEvents(Protocol):
    """What the owner of a receiver link is told."""

    def on_message(self, dlv: object, data: bytes, settled: bool) -> None:
        """A whole message; give it an outcome with :meth:`NodeConnection.settle` (also when
        ``settled``: the node sent it pre-settled, settle it with no outcome)."""

    def on_flow(self) -> None:
        """The link's credit or drain state changed."""

    def on_link_closed(self) -> None:
        """The node detached the link, or the connection is gone; the link is dead."""


class SenderEvents(Protocol):
    """What the owner of a sender link is told."""

    def on_outcome(self, dlv: object, outcome: int, undeliverable: bool) -> None:
        """A sent delivery is terminal (``outcome`` 0: settled without one); call
        :meth:`NodeConnection.forget` once handled."""

    def on_flow(self) -> None:
        """The node gave credit, or asked to drain it."""

    def on_link_closed(self) -> None:
        """The node detached the link, or the connection is gone; the link is dead."""


class NodeLink:
    """One link to the node (a ``pn_link_t`` pointer and its owner)."""

    __slots__ = ("handle", "address", "handler", "is_sender", "conn", "error")

    def __init__(self, handle: object, address: str | None, handler: ReceiverEvents | SenderEvents,
                 is_sender: bool, conn: NodeConnection) -> None:
        self.handle = handle
        self.address = address          # None: an anonymous sender
        self.handler = handler
        self.is_sender = is_sender
        self.conn = conn
        # (name, description) of the error the node detached the link with, set before on_link_closed
        self.error: tuple[str, str] | None = None

    @property
    def credit(self) -> int:
        return pn_link_credit(self.handle)

    @property
    def drain_mode(self) -> bool:
        return bool(pn_link_get_drain(self.handle))

    def flow(self, n: int) -> None:
        """A receiver grants ``n`` more credit."""
        pn_link_flow(self.handle, n)
        self.conn.kick()

    def drain(self, n: int) -> None:
        """A receiver grants ``n`` credit and asks the node to use it or give it back."""
        pn_link_drain(self.handle, n)
        self.conn.kick()

    def drained(self) -> None:
        """A sender in drain mode gives back the credit it does not use."""
        pn_link_drained(self.handle)
        self.conn.kick()


class NodeConnection:
    """An AMQP 1.0 client connection to the node this code runs in (cffi, no wrapper objects)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, attach: Callable[[socket.socket, str], object],
                 name: str, kind: str = "gateway") -> None:
        """``attach(sock, peer)`` gives the node its end of the pair and returns the node's connection
        record (:attr:`node_conn`: the gateway tells its own links from other consumers by it). The
        node sees peer ``<kind>:<name>`` and container id ``<kind>-<name>``; log lines say
        ``<kind> <name>``."""
        self.loop = loop
        self.name = name
        self.label = f"{kind} {name}"
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        theirs.setblocking(False)
        self.sock = ours
        self.fd = ours.fileno()
        self.node_conn = attach(theirs, f"{kind}:{name}")
        self.collector = pn_collector()
        self.pn_conn = pn_connection()
        self.transport = pn_transport()
        self._prefix = f"{kind}-{name}"
        pn_connection_set_container(self.pn_conn, self._prefix.encode())
        pn_connection_collect(self.pn_conn, self.collector)
        pn_transport_bind(self.transport, self.pn_conn)
        pn_connection_open(self.pn_conn)
        self.session = pn_session(self.pn_conn)
        pn_session_set_incoming_capacity(self.session, SESSION_CAPACITY)
        pn_session_open(self.session)
        self.links: dict[object, NodeLink] = {}       # pn_link_t* -> open link
        self.closing: set[object] = set()             # closed by us, waiting for the node's detach
        self.partial: dict[object, bytearray] = {}    # multi-frame deliveries being received
        self.closed = False
        self._names = 0
        self._flush_scheduled = False
        self._writing = False
        self._rbuf = bytearray(IO_CHUNK)
        self._rbuf_c = ffi.from_buffer(self._rbuf)
        self._wbuf = bytearray(IO_CHUNK)
        self._wbuf_c = ffi.from_buffer(self._wbuf)
        self._wbuf_mv = memoryview(self._wbuf)
        self._bufsize = 64 * 1024
        self._buf = ffi.new("char[]", self._bufsize)
        self._tagnum = ffi.new("uint64_t *")
        self._tag = ffi.new("pn_bytes_t *", (8, ffi.cast("char *", self._tagnum)))[0]
        loop.add_reader(self.fd, self._readable)
        self._tick_handle = loop.call_later(TICK_INTERVAL, self._tick)
        self.kick()

    # ---- links -----------------------------------------------------------------------------------------
    def _open(self, address: str | None, handler: ReceiverEvents | SenderEvents, is_sender: bool) -> NodeLink:
        if self.closed:
            raise RuntimeError(f"{self.label}: the connection to the node is closed")
        self._names += 1
        kind = "out" if is_sender else "in"
        tail = address if address is not None else "(anonymous)"
        name = f"{self._prefix}-{kind}-{self._names}-{tail}".encode()
        handle = pn_sender(self.session, name) if is_sender else pn_receiver(self.session, name)
        if address is not None:
            addr = address.encode()
            pn_terminus_set_address(pn_link_source(handle), addr)
            pn_terminus_set_address(pn_link_target(handle), addr)
        link = self.links[handle] = NodeLink(handle, address, handler, is_sender, self)
        pn_link_open(handle)
        self.kick()
        return link

    def receiver(self, address: str, handler: ReceiverEvents) -> NodeLink:
        """Attach a consumer of ``address`` (the node sends to it); grants no credit: the owner does,
        with :meth:`NodeLink.flow`."""
        return self._open(address, handler, False)

    def sender(self, address: str | None, handler: SenderEvents) -> NodeLink:
        """Attach a producer to ``address``; it gets credit while the mesh has a consumer for it.
        ``None``: an anonymous sender (no target), each message goes where its ``to`` says."""
        return self._open(address, handler, True)

    def close_link(self, link: NodeLink) -> None:
        """Detach a link; its owner hears nothing more about it."""
        h = link.handle
        if self.links.pop(h, None) is None or self.closed:
            return
        for d in [d for d in self.partial if pn_delivery_link(d) == h]:
            del self.partial[d]
        pn_link_close(h)
        self.closing.add(h)
        self.kick()

    # ---- deliveries ------------------------------------------------------------------------------------
    def send(self, link: NodeLink, data: bytes | bytearray | memoryview) -> object:
        """Send one whole encoded message, unsettled; returns its delivery (the key of its outcome)."""
        h = link.handle
        self._tagnum[0] += 1
        d = pn_delivery(h, self._tag)
        if data.__class__ is not bytes:             # python-qpid-proton's Message.encode gives a bytearray
            data = ffi.from_buffer(data)
        pn_link_send(h, data, len(data))
        pn_link_advance(h)
        self.kick()
        return d

    def settle(self, dlv: object, outcome: int = 0, condition: tuple[bytes, bytes] | None = None) -> None:
        """Give a received delivery its outcome (0: none, just settle) and settle it."""
        if outcome:
            if condition is not None:
                cond = pn_disposition_condition(pn_delivery_local(dlv))
                pn_condition_set_name(cond, condition[0])
                pn_condition_set_description(cond, condition[1])
            pn_delivery_update(dlv, outcome)
        pn_delivery_settle(dlv)
        self.kick()

    def condition(self, dlv: object) -> tuple[str, str] | None:
        """The (name, description) of the error the node gave a sent delivery's outcome, if any (a
        REJECTED outcome usually has one); call it before :meth:`forget`."""
        return _condition(pn_disposition_condition(pn_delivery_remote(dlv)))

    def forget(self, dlv: object) -> None:
        """Settle a sent delivery whose outcome was handled."""
        pn_delivery_settle(dlv)
        self.kick()

    # ---- events ----------------------------------------------------------------------------------------
    def process(self) -> None:
        """Dispatch every pending Proton event to the link owners."""
        coll = self.collector
        peek, pop, etype = pn_collector_peek, pn_collector_pop, pn_event_type
        ev = peek(coll)
        while ev:
            t = etype(ev)
            try:
                if t == PN_DELIVERY:
                    self._on_delivery(pn_event_delivery(ev))
                elif t == PN_LINK_FLOW:
                    link = self.links.get(pn_event_link(ev))
                    if link is not None:
                        link.handler.on_flow()
                elif t == PN_LINK_REMOTE_CLOSE or t == PN_LINK_REMOTE_DETACH:
                    self._on_link_closed(pn_event_link(ev))
                elif t == PN_CONNECTION_REMOTE_CLOSE or t == PN_TRANSPORT_CLOSED:
                    self._lost("the node closed the connection")
                    return
            except Exception:
                log.exception("%s: internal error handling a Proton event (%d)", self.label, t)
            pop(coll)
            ev = peek(coll)

    def _on_delivery(self, d: object) -> None:
        h = pn_delivery_link(d)
        link = self.links.get(h)
        if link is None:
            return
        if link.is_sender:
            state = pn_delivery_remote_state(d)
            if state not in TERMINAL:
                if not pn_delivery_settled(d):
                    return
                state = 0
            undeliverable = state == MODIFIED and bool(pn_disposition_is_undeliverable(pn_delivery_remote(d)))
            link.handler.on_outcome(d, state, undeliverable)
            return
        if not pn_delivery_readable(d):
            return
        settled = pn_delivery_settled(d)
        if settled and pn_delivery_aborted(d):      # Proton marks aborted transfers settled
            self.partial.pop(d, None)
            pn_link_advance(h)
            pn_delivery_settle(d)
            return
        n = pn_delivery_pending(d)
        if n > self._bufsize:
            self._bufsize = n * 2
            self._buf = ffi.new("char[]", self._bufsize)
        n = pn_link_recv(h, self._buf, n)
        data = ffi.buffer(self._buf, n)[:] if n > 0 else b""
        if pn_delivery_partial(d):
            self.partial.setdefault(d, bytearray()).extend(data)
            return
        if self.partial:
            head = self.partial.pop(d, None)
            if head is not None:
                head.extend(data)
                data = bytes(head)
        pn_link_advance(h)
        link.handler.on_message(d, data, bool(settled))

    def _on_link_closed(self, h: object) -> None:
        if h in self.closing:
            self.closing.discard(h)
            pn_link_free(h)
            return
        link = self.links.pop(h, None)
        if link is not None:
            link.error = _condition(pn_link_remote_condition(h))
        if pn_link_state(h) & PN_LOCAL_ACTIVE:
            pn_link_close(h)
        pn_link_free(h)                # Proton sends our detach, then forgets the link
        self.kick()
        if link is not None:
            link.handler.on_link_closed()

    # ---- I/O -------------------------------------------------------------------------------------------
    def kick(self) -> None:
        """Process pending events and write output soon (once per loop iteration)."""
        if not self._flush_scheduled and not self.closed:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _readable(self) -> None:
        t = self.transport
        for _ in range(16):
            cap = pn_transport_capacity(t)
            if cap <= 0:
                break
            want = min(cap, IO_CHUNK)
            try:
                n = self.sock.recv_into(self._rbuf, want)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                n = 0
            if n == 0:
                pn_transport_close_tail(t)
                self._lost("the node closed the connection")
                return
            if n == cap < BUSY_BUFFER:    # the read filled Proton's buffer: a busy connection's is larger
                grow_input(t)
            pn_transport_push(t, self._rbuf_c, n)
            if n < want:
                break
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed:
            return
        self.process()
        if self.closed:
            return
        t = self.transport
        p = pending(t)
        while p > 0:
            k = pn_transport_peek(t, self._wbuf_c, min(p, IO_CHUNK))
            if k <= 0:
                break
            try:
                s = self.sock.send(self._wbuf_mv[:k])
            except (BlockingIOError, InterruptedError):
                s = 0
            except OSError:
                self._lost("cannot write to the node")
                return
            if s > 0:
                pn_transport_pop(t, s)
            if s < k:
                if not self._writing:
                    self._writing = True
                    self.loop.add_writer(self.fd, self._flush)
                return
            p = pending(t)
        if self._writing:
            self._writing = False
            self.loop.remove_writer(self.fd)

    def _tick(self) -> None:
        if self.closed:
            return
        pn_transport_tick(self.transport, int(time.monotonic() * 1000))
        self.kick()
        self._tick_handle = self.loop.call_later(TICK_INTERVAL, self._tick)

    def _lost(self, why: str) -> None:
        if not self.closed:
            log.warning("%s: %s", self.label, why)
            self.close()

    def close(self) -> None:
        """Stop using the connection (the node tears its side down when the socket closes)."""
        if self.closed:
            return
        self.closed = True
        self._tick_handle.cancel()
        links, self.links = self.links, {}
        self.partial.clear()
        for link in links.values():
            try:
                link.handler.on_link_closed()
            except Exception:
                log.exception("%s: internal error closing a link", self.label)
        try:
            self.loop.remove_reader(self.fd)
            if self._writing:
                self.loop.remove_writer(self.fd)
        except (ValueError, OSError):
            pass
        self.sock.close()
        pn_transport_unbind(self.transport)
        pn_decref(self.transport)
        pn_connection_release(self.pn_conn)
        pn_decref(self.pn_conn)          # our reference from pn_connection() (= pn_connection_free)
        pn_collector_free(self.collector)
        self.transport = self.pn_conn = self.collector = None


def _condition(cond: object) -> tuple[str, str] | None:
    """An error condition's (name, description), None when it is not set."""
    if not pn_condition_is_set(cond):
        return None
    name, desc = pn_condition_get_name(cond), pn_condition_get_description(cond)
    return (ffi.string(name).decode(errors="replace") if name != ffi.NULL else "",
            ffi.string(desc).decode(errors="replace") if desc != ffi.NULL else "")
