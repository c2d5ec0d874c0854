"""Outgoing inter-router connections, kept open with retry and backoff.

A connector dials its peer; when the attempt fails or the connection later drops, it tries again after a
delay that doubles from 0.1 s up to 5 s, and goes back to 0.1 s once a connection has come up. A streak of
failures is logged once (and its end once), never once per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from router.config import ConnectorConfig

log = logging.getLogger(__name__)

FIRST_DELAY = 0.1
MAX_DELAY = 5.0


class Connector:
    """Keeps one outgoing connection to a peer node open."""

    def __init__(self, config: ConnectorConfig, loop: asyncio.AbstractEventLoop,
                 connected: Callable[[socket.socket, Connector], object]) -> None:
        self.config = config
        self.loop = loop
        self._connected = connected     # hands the socket to the server, returns the Connection
        self.delay = FIRST_DELAY
        self.failures = 0
        self.conn: object = None
        self._task: asyncio.Task | None = None
        self._stopped = False

    @property
    def target(self) -> str:
        return f"{self.config.host}:{self.config.port}"

    def start(self) -> None:
        self._schedule(0.0)

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    def lost(self) -> None:
        """The connection it made is gone: dial again (after the current delay)."""
        self.conn = None
        if not self._stopped:
            self._schedule(self.delay)

    def _schedule(self, delay: float) -> None:
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._dial(delay))

    async def _dial(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        while not self._stopped:
            sock = socket.socket(socket.AF_INET6 if ":" in self.config.host else socket.AF_INET,
                                 socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(self.loop.sock_connect(sock, (self.config.host, self.config.port)),
                                       timeout=5.0)
            except (TimeoutError, OSError) as exc:
                sock.close()
                self.failures += 1
                if self.failures == 1:
                    log.warning("cannot connect to %s (%s); retrying with backoff up to %gs",
                                self.target, exc or "timeout", MAX_DELAY)
                await asyncio.sleep(self.delay)
                self.delay = min(self.delay * 2, MAX_DELAY)
                continue
            if self.failures:
                log.info("connected to %s after %d failed attempts", self.target, self.failures)
            self.failures = 0
            self.delay = FIRST_DELAY
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conn = self._connected(sock, self)
            return
