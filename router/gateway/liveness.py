"""Noticing a broker that went silent, within about two heartbeat timeouts.

pika's own heartbeat checker closes a connection only after ``heartbeat + 5`` s without input, checked
in windows of that length, so a silent broker is noticed after 15–30 s with ``heartbeat: 10``.
:class:`Watchdog` reads the connection's received-byte counter every quarter heartbeat and aborts the
connection once nothing (data or heartbeat frame: RabbitMQ sends one every half heartbeat when idle)
has arrived for 1.5 heartbeats: the gateway notices within 1.5–1.75 heartbeats.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pika.exceptions import AMQPHeartbeatTimeout

SILENT_LIMIT = 1.5      # heartbeats without a byte from the broker


class Watchdog:
    """Calls ``on_silent`` once when the broker sent nothing for ``SILENT_LIMIT`` heartbeats."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: Any, heartbeat: float,
                 on_silent: Callable[[float], None]) -> None:
        self.loop = loop
        self.conn = conn
        self.limit = heartbeat * SILENT_LIMIT
        self.interval = heartbeat / 4
        self.on_silent = on_silent
        self.last_bytes = -1
        self.last_input = self.last_check = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None
        if heartbeat > 0:
            self._handle = loop.call_later(self.interval, self._check)

    def _check(self) -> None:
        now = time.monotonic()
        received = self.conn.bytes_received
        if received != self.last_bytes or now - self.last_check > self.limit:
            # input arrived, or this loop itself was stalled (then the broker is not to blame)
            self.last_bytes = received
            self.last_input = now
        elif now - self.last_input > self.limit:
            self._handle = None
            self.on_silent(now - self.last_input)
            return
        self.last_check = now
        self._handle = self.loop.call_later(self.interval, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def abort(conn: Any, why: str) -> None:
    """Drop the connection at once, as pika's heartbeat checker does (no close handshake: the broker
    would not answer it); ``close()`` if pika's internals are not the expected ones."""
    terminate = getattr(conn, "_terminate_stream", None)
    if callable(terminate):
        terminate(AMQPHeartbeatTimeout(why))
    elif not (conn.is_closed or conn.is_closing):
        conn.close()
