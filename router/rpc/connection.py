"""What clients and servers share on the loop thread: one connection, its outbox and its failure handling.

:class:`ConnectionCore` is the :class:`~router.rpc.wire.WireHandler` of one :class:`~router.rpc.wire.Wire`
(credit and settlement are managed here and in the outbox, nothing is automatic). It connects without
automatic reconnect, routes sender-link events to the :class:`~router.rpc.sending.Outbox`, and when the
connection fails or closes it fails every pending operation with
:class:`~router.rpc.errors.RpcConnectionError` and ends the event loop. Subclasses open their links in
:meth:`ConnectionCore.open_links` and call :meth:`ConnectionCore.mark_ready` once usable.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .defaults import CONNECT_TIMEOUT
from .errors import RpcConnectionError, RpcUndeliverable
from .loop import EventLoop
from .sending import Outbox
from .wire import Condition, Link, Outcome, Wire, describe

log = logging.getLogger(__name__)

__all__ = ["ConnectionCore", "describe"]


class ConnectionCore:
    """One connection to ``url`` and its outbox; the base of the client and consumer cores."""

    def __init__(self, url: str, name: str, max_links: int = 64,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.url = url
        self.name = name
        self.connect_timeout = connect_timeout
        self.loop = EventLoop(name=name)
        self.wire = Wire(self.loop, self, url, f"{name}-{id(self):x}")
        self.loop.on_start = self.on_start
        self.loop.on_end = self._on_loop_end
        self.outbox = Outbox(self.loop, self.wire, name=name, max_links=max_links)
        self.ready = threading.Event()          # set when usable, or when it failed (see .error)
        self.error: RpcConnectionError | None = None
        self.closing = False

    # ---- for subclasses
    def open_links(self, wire: Wire) -> None:
        """Open the links this core needs (loop thread, at start)."""

    def on_lost(self, error: RpcConnectionError) -> None:
        """The connection is gone: fail whatever the subclass tracks (loop thread)."""

    def on_receiver_closed(self, link: Link, condition: Condition | None) -> None:
        """The router closed one of our receivers (loop thread)."""

    def on_link_opened(self, link: Link) -> None:
        """The router attached one of our links (loop thread)."""

    def on_message(self, link: Link, delivery: Any, data: bytes, settled: bool) -> None:
        """A whole message arrived on one of our receivers (loop thread)."""

    def mark_ready(self) -> None:
        self.ready.set()

    # ---- start and stop
    def on_start(self) -> None:
        try:
            self.wire.open(self.connect_timeout)
        except (OSError, ValueError) as exc:
            self.lost(f"{self.url}: {exc}")
            return
        self.open_links(self.wire)

    def _on_loop_end(self) -> None:
        if self.loop.error is not None:
            self.lost(f"event loop crashed: {self.loop.error!r}")
        self.wire.free()

    def shutdown(self) -> None:
        """Close politely (loop thread; :meth:`EventLoop.stop` runs this)."""
        self.closing = True
        self.outbox.fail_all(RpcConnectionError(f"{self.name}: closed"))
        if self.error is not None or not self.wire.close():
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
    def on_link_flow(self, link: Link) -> None:
        self.outbox.on_flow(link)

    def on_outcome(self, link: Link, delivery: Any, outcome: Outcome) -> None:
        self.outbox.on_outcome(delivery, outcome)

    # ---- links closed by the router
    def on_link_closed(self, link: Link, condition: Condition | None) -> None:
        if link.is_sender:
            text = describe(condition) or "closed by the router"
            self.outbox.on_link_closed(link, RpcUndeliverable(
                f"sender link to {link.target or '(anonymous relay)'}: {text}", "LINK-CLOSED",
                condition[0] if condition is not None else None))
        else:
            self.on_receiver_closed(link, condition)
