"""System tests: meshes of real node processes over TCP with real python-qpid-proton clients.

Nodes are started by the ``node_factory`` fixture of tests/conftest.py (it stops them at teardown,
fails the test if one died unexpectedly, and attaches every node's stderr tail to a failed test's
report); tests/system/meshkit.py wires them into meshes.
"""

from __future__ import annotations

import pytest

from tests.system.meshkit import TcpProxy


@pytest.fixture
def proxy_factory():
    """``proxy_factory(target_port)``: a TcpProxy in front of a port, closed at teardown."""
    made: list[TcpProxy] = []

    def factory(target_port: int) -> TcpProxy:
        p = TcpProxy(target_port)
        made.append(p)
        return p

    yield factory
    for p in made:
        p.close()
