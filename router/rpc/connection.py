"""What clients and servers share on the loop thread: one connection, its outbox and its failure handling.

:class:`ConnectionCore` is the Proton event handler (a ``MessagingHandler`` with automatic flow control
and accepting turned off: credit and settlement are managed here). It opens the connection without
automatic reconnect, routes sender-link events to the :class:`~router.rpc.sending.Outbox`, and when the
connection fails or closes it fails every pending operation with
:class:`~router.rpc.errors.RpcConnectionError` and ends the event loop. Subclasses open their links in
:meth:`ConnectionCore.open_links` and call :meth:`ConnectionCore.mark_ready` once usable.
"""

from __future__ import annotations

import logging
import threading

from proton import Condition, Connection, Endpoint, Event, Link
from proton.handlers import MessagingHandler
from proton.reactor import Container

from .errors import RpcConnectionError, RpcUndeliverable
from .loop import EventLoop
from .sending import Outbox

log = logging.getLogger(__name__)


def describe(cond: Condition | None) -> str:
    """``name: description`` of an AMQP error condition (or "" for none)."""
    if cond is None:
        return ""
    return f"{cond.name}: {cond.description}" if cond.description else str(cond.name)


class ConnectionCore(MessagingHandler):
    """One connection to ``url`` and its outbox; the base of the client and consumer cores."""

    def __init__(self, url: str, name: str, max_links: int = 64) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True, peer_close_is_error=False)
        self.url = url
        self.name = name
        self.loop = EventLoop(self, name=name)
        self.outbox = Outbox(self.loop, name=name, max_links=max_links)
        self.connection: Connection | None = None
        self.ready = threading.Event()          # set when usable, or when it failed (see .error)
        self.error: RpcConnectionError | None = None
        self.closing = False
        self._transport_error = ""

    # ---- for subclasses
    def open_links(self, container: Container, connection: Connection) -> None:
        """Open the links this core needs (loop thread, at start)."""

    def on_lost(self, error: RpcConnectionError) -> None:
        """The connection is gone: fail whatever the subclass tracks (loop thread)."""

    def on_receiver_closed(self, link: Link, condition: Condition | None) -> None:
        """The router closed one of our receivers (loop thread)."""

    def mark_ready(self) -> None:
        self.ready.set()

    # ---- start and stop
    def on_start(self, event: Event) -> None:
        self.connection = event.container.connect(self.url, reconnect=False)
        self.outbox.connection = self.connection
        self.open_links(event.container, self.connection)

    def shutdown(self) -> None:
        """Close politely (loop thread; :meth:`EventLoop.stop` runs this)."""
        self.closing = True
        self.outbox.fail_all(RpcConnectionError(f"{self.name}: closed"))
        conn = self.connection
        if conn is not None and conn.state & Endpoint.LOCAL_ACTIVE and self.error is None:
            conn.close()
        else:
            self.lost("closed")

    def lost(self, why: str) -> None:
        """Fail everything once, then end the loop."""
        if self.error is None:
            self.error = RpcConnectionError(f"{self.name}: {why}")
            if not self.closing:
                log.warning("router.rpc: %s: %s", self.name, why)
            self.outbox.fail_all(self.error)
            try:
                self.on_lost(self.error)
            finally:
                self.ready.set()
        self.loop.halt()

    # ---- sender links -> outbox
    def on_link_flow(self, event: Event) -> None:
        if event.link.is_sender:
            self.outbox.on_flow(event.link)

    def on_accepted(self, event: Event) -> None:
        self.outbox.on_outcome(event.delivery)

    def on_rejected(self, event: Event) -> None:
        self.outbox.on_outcome(event.delivery)

    def on_released(self, event: Event) -> None:      # RELEASED or MODIFIED
        self.outbox.on_outcome(event.delivery)

    # ---- links closed by the router
    def on_link_error(self, event: Event) -> None:
        self._link_gone(event.link)

    def on_link_closing(self, event: Event) -> None:
        self._link_gone(event.link)

    def _link_gone(self, link: Link) -> None:
        cond = link.remote_condition
        if link.is_sender:
            target = link.target.address if link.target else None
            text = describe(cond) or "closed by the router"
            self.outbox.on_link_closed(link, RpcUndeliverable(
                f"sender link to {target or '(anonymous relay)'}: {text}", "LINK-CLOSED",
                cond.name if cond is not None else None))
        else:
            self.on_receiver_closed(link, cond)

    # ---- the connection
    def on_session_error(self, event: Event) -> None:
        self.lost(f"session closed by the router: {describe(event.session.remote_condition)}")
        if event.connection.state & Endpoint.LOCAL_ACTIVE:
            event.connection.close()

    def on_connection_error(self, event: Event) -> None:
        self.lost(f"connection closed by the router: {describe(event.connection.remote_condition)}")

    def on_connection_closing(self, event: Event) -> None:
        self.lost("connection closed by the router")

    def on_connection_closed(self, event: Event) -> None:
        self.lost("connection closed")

    def on_transport_error(self, event: Event) -> None:
        cond = event.transport.condition
        self._transport_error = describe(cond) or "transport error"

    def on_disconnected(self, event: Event) -> None:
        self.lost(f"{self.url}: {self._transport_error or 'disconnected'}")
