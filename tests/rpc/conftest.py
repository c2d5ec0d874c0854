"""Fixtures for the router.rpc tests: real node processes (``node_factory`` of tests/conftest.py) and
router.rpc clients, servers and listeners that are always closed before the nodes stop.

``rpc_node``: one node whose address rules are those of config/node.yaml (oslo.messaging prefixes) plus the
test prefixes ``multicast``, ``closest``, ``balanced``. ``chain3``: the A <- B <- C chain of
tests/support/meshes.py, converged. ``rpc``: a :class:`tests.support.rpc.RpcFactory` (``rpc.client(url)``,
``rpc.server(url, address, handler)``, ``rpc.listener(url, address, callback)``) whose products are
stopped at teardown.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.meshes import chain, converged
from tests.support.nodes import MESH_RULES
from tests.support.rpc import RpcFactory
from tests.support.waiting import wait_for


@pytest.fixture
def rpc(node_factory) -> Iterator[RpcFactory]:
    factory = RpcFactory()
    yield factory
    factory.close()


@pytest.fixture
def rpc_node(node_factory):
    return node_factory("A", rules=MESH_RULES)


@pytest.fixture
def chain3(node_factory):
    """A <- B <- C (B-A cost 2, C-B cost 1), every node reaching every other."""
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="chain convergence")
    return a, b, c
