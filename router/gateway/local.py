"""The management agent's AMQP 1.0 connection to its own node, over an in-process socketpair (legacy).

One end of the pair is handed to the node exactly like an accepted client socket; the other end is
driven here by a python-qpid-proton ``Connection`` + ``Transport`` + ``Collector`` on the node's asyncio
loop (no reactor, no threads). Link owners get their Proton events through :class:`LinkHandler`.

Only :mod:`router.management.agent` still uses it; the gateway uses the node's one in-process client,
:class:`router.adapter.inprocess.NodeConnection`, which has what the agent needs too. This module goes
once the agent is ported to that client.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Protocol

from proton import Collector, Connection, Delivery, Endpoint, Event, Link, Transport, TransportException

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
TICK_INTERVAL = 1.0      # seconds between idle-timeout checks (heartbeats to the node)


class LinkHandler(Protocol):
    """What a link's owner is told about it."""

    def on_delivery(self, delivery: Delivery) -> None: ...

    def on_flow(self, link: Link) -> None: ...

    def on_link_closed(self, link: Link) -> None: ...


class LocalConnection:
    """An AMQP 1.0 client connection to the node this gateway runs in."""

    def __init__(self, loop: asyncio.AbstractEventLoop, attach: Callable[[socket.socket, str], object],
                 name: str) -> None:
        """``attach(sock, peer)`` gives the node its end of the pair and returns the node's
        connection record (used to tell the gateway's own links from other consumers)."""
        self.loop = loop
        self.name = name
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        theirs.setblocking(False)
        self.sock = ours
        self.node_conn = attach(theirs, f"gateway:{name}")
        self.conn = Connection()
        self.conn.container = f"gateway-{name}"
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport = Transport()
        self.transport.bind(self.conn)
        self.handlers: dict[Link, LinkHandler] = {}
        self.closed = False
        self._flush_scheduled = False
        self._writing = False
        self._names = 0
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        loop.add_reader(ours.fileno(), self._readable)
        self._tick_handle = loop.call_later(TICK_INTERVAL, self._tick)
        self.kick()

    # ---- links -----------------------------------------------------------------------------------------
    def _name(self, kind: str, address: str) -> str:
        self._names += 1
        return f"{self.conn.container}-{kind}-{self._names}-{address}"

    def receiver(self, address: str, handler: LinkHandler) -> Link:
        """Attach a consumer of ``address`` (the node will send to it); grants no credit yet."""
        link = self.session.receiver(self._name("in", address))
        link.source.address = address
        link.target.address = address
        self.handlers[link] = handler
        link.open()
        self.kick()
        return link

    def sender(self, address: str, handler: LinkHandler) -> Link:
        """Attach a producer to ``address``; it gets credit while the mesh has a consumer for it."""
        link = self.session.sender(self._name("out", address))
        link.source.address = address
        link.target.address = address
        self.handlers[link] = handler
        link.open()
        self.kick()
        return link

    def close_link(self, link: Link) -> None:
        """Detach (close) a link; its handler hears nothing more about it."""
        self.handlers.pop(link, None)
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.close()
        self.kick()

    # ---- I/O -------------------------------------------------------------------------------------------
    def kick(self) -> None:
        """Process pending events and write output soon (once per loop iteration)."""
        if not self._flush_scheduled and not self.closed:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _readable(self) -> None:
        t = self.transport
        for _ in range(16):
            try:
                cap = t.capacity()
            except TransportException:
                cap = -1
            if cap <= 0:
                break
            try:
                data = self.sock.recv(min(cap, READ_CHUNK))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                t.close_tail()
                self._lost("the node closed the gateway's connection")
                return
            t.push(data)
            if len(data) < min(cap, READ_CHUNK):
                break
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed:
            return
        self.process()
        t = self.transport
        while True:
            try:
                pending = t.pending()
            except TransportException:
                pending = -1
            if pending <= 0:
                break
            data = t.peek(min(pending, READ_CHUNK))
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self._lost("cannot write to the node")
                return
            if n:
                t.pop(n)
            if n < len(data):
                if not self._writing:
                    self._writing = True
                    self.loop.add_writer(self.sock.fileno(), self._writable)
                return
        if self._writing:
            self._writing = False
            self.loop.remove_writer(self.sock.fileno())

    def _writable(self) -> None:
        self._flush()

    def _tick(self) -> None:
        if self.closed:
            return
        try:
            self.transport.tick(time.monotonic())
        except TransportException:
            pass
        self.kick()
        self._tick_handle = self.loop.call_later(TICK_INTERVAL, self._tick)

    def process(self) -> None:
        """Dispatch every pending Proton event to the link handlers."""
        coll = self.collector
        handlers = self.handlers
        while True:
            ev = coll.peek()
            if ev is None:
                return
            t = ev.type
            try:
                if t == Event.DELIVERY:
                    d = ev.delivery
                    h = handlers.get(d.link)
                    if h is not None:
                        h.on_delivery(d)
                elif t == Event.LINK_FLOW:
                    h = handlers.get(ev.link)
                    if h is not None:
                        h.on_flow(ev.link)
                elif t in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
                    link = ev.link
                    h = handlers.pop(link, None)
                    if link.state & Endpoint.LOCAL_ACTIVE:
                        link.close()
                    if h is not None:
                        h.on_link_closed(link)
                elif t == Event.CONNECTION_REMOTE_CLOSE:
                    self._lost("the node closed the gateway's connection")
            except Exception:
                log.exception("gateway %s: internal error handling %s", self.name, t)
            coll.pop()

    def _lost(self, why: str) -> None:
        if self.closed:
            return
        log.warning("gateway %s: %s", self.name, why)
        self.close()

    def close(self) -> None:
        """Stop using the connection (the node tears its side down when the socket closes)."""
        if self.closed:
            return
        self.closed = True
        self._tick_handle.cancel()
        handlers, self.handlers = self.handlers, {}
        for link, h in handlers.items():
            h.on_link_closed(link)
        try:
            self.loop.remove_reader(self.sock.fileno())
            if self._writing:
                self.loop.remove_writer(self.sock.fileno())
        except (ValueError, OSError):
            pass
        self.sock.close()
