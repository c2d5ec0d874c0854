"""Outgoing inter-router connections, kept open with retry and backoff.

A connector dials its peer; when the attempt fails or the connection later drops, it tries again after a
delay that doubles from 0.02 s up to 5 s, and goes back to 0.02 s once a connection has come up. The first
retries are quick because the peer of a fresh mesh is usually starting too: with 0.1 s, a node whose peer
was not listening yet waited 0.1 s, then 0.2 s more, for a listener that came up a few ms after the first
attempt (issue 21, start-up). A refused connect to a local port costs next to nothing. A streak of
failures is logged once (and its end once), never once per attempt. Connections that end soon after TCP
connected (TLS or authentication refused, the peer over its connection limit) count as failures too, so
they back off the same way instead of being retried every 0.02 s.

Its `policy` (router.adapter.policy, set by the server) applies TLS and SASL to each connection.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from router.config import ConnectorConfig

log = logging.getLogger(__name__)

FIRST_DELAY = 0.02
MAX_DELAY = 5.0
STABLE = 10.0         # a connection that lasted this long was a success: the backoff starts over


class Connector:
    """Keeps one outgoing connection to a peer node open."""

    def __init__(self, config: ConnectorConfig, loop: asyncio.AbstractEventLoop,
                 connected: Callable[[socket.socket, Connector], object]) -> None:
        self.config = config
        self.loop = loop
        self._connected = connected     # hands the socket to the server, returns the Connection
        self.index = 0                  # its place among the connectors and uplinks (the server sets it)
        self.delay = FIRST_DELAY
        self.failures = 0
        self.conn: object = None
        self.policy: object = None      # router.adapter.policy.ConnectionPolicy: TLS, SASL
        self._since = 0.0               # loop time the current connection was made
        self._short = 0                 # connections in a row that ended before STABLE
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
        if self.loop.time() - self._since >= STABLE:
            self._short = 0
            self.delay = FIRST_DELAY
        else:
            self._short += 1
        delay = self.delay
        if self._short == 2:
            log.warning("connections to %s keep ending soon after they are made (TLS, authentication or "
                        "a limit of the peer?); retrying with backoff up to %gs", self.target, MAX_DELAY)
        if self._short >= 2:
            self.delay = min(self.delay * 2, MAX_DELAY)
        if not self._stopped:
            self._schedule(delay)

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
            if self._short < 2:
                self.delay = FIRST_DELAY
            self._since = self.loop.time()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conn = self._connected(sock, self)
            return
