"""Fixtures for the router.rpc tests: real node processes (``node_factory`` of tests/conftest.py) and
router.rpc clients, servers and listeners that are always closed before the nodes stop.

``rpc_node``: one node whose address rules are those of config/node.yaml (oslo.messaging prefixes) plus the
test prefixes ``multicast``, ``closest``, ``balanced``. ``chain3``: the A <- B <- C chain of
tests/integration/test_mesh_control.py, converged. ``rpc``: a factory (``rpc.client(url)``,
``rpc.server(url, address, handler)``, ``rpc.listener(url, address, callback)``) whose products are
stopped at teardown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from router.rpc import NotificationListener, RpcClient, RpcServer
from tests.integration.helpers import wait_for
from tests.integration.test_mesh_control import chain, converged

RULES = (
    ("openstack.org/om/rpc/multicast", "multicast"),
    ("openstack.org/om/rpc/unicast", "closest"),
    ("openstack.org/om/rpc/anycast", "balanced"),
    ("openstack.org/om/notify", "balanced"),
    ("multicast", "multicast"),
    ("closest", "closest"),
    ("balanced", "balanced"),
)

TIMEOUT = 10.0        # generous: the machine is shared and slow at times
REPO_ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def rpc(node_factory) -> Iterator[RpcFactory]:
    factory = RpcFactory()
    yield factory
    factory.close()


@pytest.fixture
def rpc_node(node_factory):
    return node_factory("A", rules=RULES)


@pytest.fixture
def chain3(node_factory):
    """A <- B <- C (B-A cost 2, C-B cost 1), every node reaching every other."""
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="chain convergence")
    return a, b, c
