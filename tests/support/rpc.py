"""``router.rpc`` clients, servers and listeners made for a test and stopped at its end.

:class:`RpcFactory` makes them (``client(url)``, ``server(url, address, handler)``,
``listener(url, address, callback)``) and :meth:`RpcFactory.close` stops them all: servers and
listeners first, then clients. ``TIMEOUT`` is the calls' default timeout (generous: the machine is
shared and slow at times).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from router.rpc import NotificationListener, RpcClient, RpcServer

TIMEOUT = 10.0


class RpcFactory:
    """Makes router.rpc objects and stops them all at teardown (servers first, then clients)."""

    def __init__(self) -> None:
        self.clients: list[RpcClient] = []
        self.consumers: list[RpcServer | NotificationListener] = []

    def client(self, url: str, **kwargs: Any) -> RpcClient:
        kwargs.setdefault("timeout", TIMEOUT)
        c = RpcClient(url, **kwargs)
        self.clients.append(c)
        return c

    def server(self, url: str, address: str, handler: Callable[[Any, Any], Any], **kwargs: Any) -> RpcServer:
        s = RpcServer(url, address, handler, **kwargs)
        self.consumers.append(s)
        return s

    def listener(self, url: str, address: str, callback: Callable[[Any], None],
                 **kwargs: Any) -> NotificationListener:
        n = NotificationListener(url, address, callback, **kwargs)
        self.consumers.append(n)
        return n

    def close(self) -> None:
        for s in self.consumers:
            with contextlib.suppress(Exception):
                s.stop(timeout=1.0)
        for c in self.clients:
            with contextlib.suppress(Exception):
                c.close(timeout=2.0)
