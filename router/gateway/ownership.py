"""One node bridges a ``direction: both`` address: a lock held in the broker.

A ``both`` gateway follows the address's consumers (the node reports each change) and switches between
storing (its consumer link attached) and feeding (the queue to the mesh) depending on whether the mesh
has another consumer. Two
nodes bridging the same address would each see the other's consumer link as "another consumer": both
would feed, retire their consumer links, see no consumer, store again, and flap, with messages going
round between the mesh and the broker. A node cannot see other nodes' configs, so the broker decides:
before bridging a ``both`` address, the gateway declares the exclusive, auto-delete queue
``<address>.bridge-lock``. RabbitMQ lets one connection hold it (another gets RESOURCE_LOCKED) and
deletes it when that connection goes, so:

* the first node to connect bridges the address; another stands by (nothing attached, one error line
  saying which address and why) and retries every ``RETRY`` seconds;
* when the bridging node stops or loses the broker, a standby node takes over within ``RETRY`` seconds.

This assumes every node bridging the address uses the same broker (a lock in another broker is not
seen).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("router.gateway")

RETRY = 2.0        # seconds between attempts to take a lock another connection holds
SUFFIX = ".bridge-lock"
RESOURCE_LOCKED = 405


def lock_queue(address: str) -> str:
    return address + SUFFIX


class BridgeLocks:
    """The broker-side locks of one gateway's ``both`` addresses."""

    def __init__(self, name: str, addresses: list[str], loop: asyncio.AbstractEventLoop,
                 on_acquired: Callable[[str], None]) -> None:
        self.name = name
        self.addresses = addresses
        self.loop = loop
        self.on_acquired = on_acquired
        self.owned: set[str] = set()
        self.refused: set[str] = set()         # held elsewhere at the last attempt (logged once)
        self.conn: Any = None
        self._pending: set[str] = set()
        self._retry: asyncio.TimerHandle | None = None

    @property
    def standby(self) -> list[str]:
        return [a for a in self.addresses if a not in self.owned]

    def start(self, conn: Any) -> None:
        """The broker connection is up: try to take every lock."""
        self.conn = conn
        self.owned.clear()
        for address in self.addresses:
            self._try(address)

    def stop(self) -> None:
        """The connection is gone (the broker dropped its locks with it)."""
        self.conn = None
        self.owned.clear()
        self._pending.clear()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _try(self, address: str) -> None:
        conn = self.conn
        if conn is None or not conn.is_open or address in self._pending or address in self.owned:
            return
        self._pending.add(address)

        def opened(ch: Any) -> None:
            if conn is not self.conn:
                return
            ch.add_on_close_callback(lambda _ch, reason: self._refused(conn, address, reason))
            ch.queue_declare(lock_queue(address), exclusive=True, auto_delete=True,
                             callback=lambda _frame: self._acquired(conn, address))

        conn.channel(on_open_callback=opened)

    def _acquired(self, conn: Any, address: str) -> None:
        if conn is not self.conn:
            return
        self._pending.discard(address)
        self.owned.add(address)
        if address in self.refused:
            self.refused.discard(address)
            log.warning("gateway %s: %s (direction both) is now bridged by this node", self.name, address)
        self.on_acquired(address)

    def _refused(self, conn: Any, address: str, reason: Any) -> None:
        if conn is not self.conn or address in self.owned:
            return                       # the connection is gone, or the lock channel closed later
        self._pending.discard(address)
        if not conn.is_open:
            return
        if address in self.refused:
            pass                         # logged at the first refusal of this streak
        elif getattr(reason, "reply_code", None) != RESOURCE_LOCKED:
            self.refused.add(address)
            log.error("gateway %s: %s (direction both) is not bridged: cannot declare its lock queue %s "
                      "(%r); retrying every %.0f s", self.name, address, lock_queue(address), reason, RETRY)
        else:
            self.refused.add(address)
            log.error("gateway %s: %s (direction both) is already bridged by another node (the broker "
                      "refused the lock queue %s: %s); bridge a 'both' address on one node only. This "
                      "node stands by and takes over if that node lets go", self.name, address,
                      lock_queue(address), reason)
        if self._retry is None:
            self._retry = self.loop.call_later(RETRY, self._retry_all)

    def _retry_all(self) -> None:
        self._retry = None
        for address in self.standby:
            self._try(address)
