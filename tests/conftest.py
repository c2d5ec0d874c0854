"""Shared fixtures: real node processes, TCP proxies, ``meshrouter mesh`` runs.

``node_factory(**overrides)`` writes a YAML config into the test's tmp_path, starts
``python -m router run CONFIG``, waits for its ``ready:`` line and returns a
:class:`tests.support.nodes.NodeProcess`. At teardown every client is closed, then the node gets
SIGTERM; the test fails if the node died during the test, does not stop within 10 s or does not exit
0. The node's stderr goes to a file whose tail is attached to the report of a failed test.

The last test of a module fails when the module left file descriptors open (tests/support/fds.py):
the clients wait with select(), which takes none above 1023.

Everything the fixtures use lives in tests/support (tests import only from there).
"""

from __future__ import annotations

import os

import pytest

from tests.support.fds import FdWatch, open_fds
from tests.support.meshctl import Meshes
from tests.support.nodes import NodeProcess, NodeSet
from tests.support.proxy import TcpProxy
from tests.support.waiting import close_all


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    nodes: list[NodeProcess] | None = getattr(item, "_meshrouter_nodes", None)
    if nodes and report.failed:
        for n in nodes:
            report.sections.append((f"node {n.node_id} stderr (tail, {report.when})", n.stderr_tail()))


_FDS = FdWatch()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _FDS.start(str(item.path))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """The last test of a module fails when the module left file descriptors open (tests.support.fds)."""
    result = yield
    if nextitem is None or nextitem.path != item.path:
        leaked = _FDS.leaked()
        if log := os.environ.get("MESHROUTER_FD_LOG"):
            with open(log, "a") as f:
                f.write(f"{len(_FDS.before)} -> {len(open_fds())} {item.path}\n")
        _FDS.module = None
        if leaked:
            pytest.fail(leaked, pytrace=False)
    return result


@pytest.fixture
def node_factory(request, tmp_path):
    """Start nodes: ``node_factory(node_id="A", link_capacity=250, idle_timeout=16, rules=...,
    default_distribution="balanced", log_level="info", extra=None)``."""
    nodes = NodeSet(tmp_path)
    request.node._meshrouter_nodes = nodes.nodes
    yield nodes.start
    close_all()
    failure = nodes.stop_all()
    if failure:
        pytest.fail(failure, pytrace=False)


@pytest.fixture
def node(node_factory) -> NodeProcess:
    """One default node: multicast/closest/balanced prefixes, default balanced, capacity 250, idle 16 s."""
    return node_factory()


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    close_all()


@pytest.fixture
def proxy_factory():
    """``proxy_factory(target_port)``: a :class:`TcpProxy` in front of a port, closed at teardown."""
    made: list[TcpProxy] = []

    def factory(target_port: int) -> TcpProxy:
        p = TcpProxy(target_port)
        made.append(p)
        return p

    yield factory
    for p in made:
        p.close()


@pytest.fixture
def meshctl(tmp_path):
    """``meshctl("triangle", fast=True)``: a copy of topologies/triangle.yaml on free ports and the
    ``meshrouter mesh`` CLI on it (:class:`tests.support.meshctl.Mesh`); ``mesh down`` at teardown."""
    meshes = Meshes(tmp_path)
    yield meshes.make
    leftovers = meshes.down()
    assert not leftovers, f"mesh down left nodes running: {leftovers}"
