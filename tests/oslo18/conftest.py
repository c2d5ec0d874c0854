"""Fixtures of the oslo.messaging 18.3.1 tests: agents (oslo 18.3.1 processes running meshrouter's driver,
tests/support/oslo18.py), one node, and the four-node mesh of tests/oslo (full mesh, cost 1, the shipped
address rules). The venv .venv-oslo18 is built on first use (scripts/oslo18-venv.sh, cached).
"""

from __future__ import annotations

import pytest

from tests.support.meshes import build
from tests.support.nodes import MESH_RULES
from tests.support.oslo import MESH_EDGES, MESH_NODES
from tests.support.oslo18 import Agent


@pytest.fixture
def agents(node_factory, tmp_path):
    """``agents(name)`` starts an oslo 18.3.1 agent; all are cleaned up (no thread left) at teardown,
    before the nodes stop."""
    made: list[Agent] = []

    def start(name: str = "agent") -> Agent:
        a = Agent(tmp_path, f"{name}-{len(made)}")
        made.append(a)
        return a

    yield start
    problems = [p for a in reversed(made) for p in a.close()]
    if problems:
        pytest.fail("oslo18 agents: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def node(node_factory):
    return node_factory("A", rules=MESH_RULES)


@pytest.fixture
def mesh4(node_factory) -> dict:
    return build(node_factory, MESH_NODES, MESH_EDGES, rules=MESH_RULES)
