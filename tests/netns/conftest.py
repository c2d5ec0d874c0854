"""Fixtures of the network-fault tests: a :class:`~tests.netns.netkit.NetLab`, or why there is none.

``netlab`` yields a lab (namespaces are created by the test through it) and at teardown closes the
clients, stops every node with SIGTERM (the test fails if one died, hangs or exits non-zero, as with
node_factory) and deletes the namespaces. Where namespaces cannot be created it yields None and the
tests fall back to a TCP proxy, printing why.
"""

from __future__ import annotations

import warnings

import pytest

from tests.conftest import _stop
from tests.integration import helpers
from tests.netns.netkit import NetLab, netns_unavailable
from tests.system.conftest import proxy_factory  # noqa: F401  (the fallback)

_REASON: list[str | None] = []


def namespaces_unavailable() -> str | None:
    if not _REASON:
        _REASON.append(netns_unavailable())
    return _REASON[0]


@pytest.fixture
def netlab(request, tmp_path):
    why = namespaces_unavailable()
    if why is not None:
        msg = f"network namespaces unavailable ({why}): falling back to a TCP proxy the test controls"
        print(msg)
        warnings.warn(msg, stacklevel=1)
        yield None
        return
    lab = NetLab(tmp_path)
    request.node._meshrouter_nodes = lab.nodes        # stderr tails in the report of a failed test
    try:
        yield lab
    finally:
        helpers.close_all()
        problems = []
        for n in lab.nodes:
            problems += _stop(n)
        lab.destroy()
        if problems:
            pytest.fail("; ".join(problems), pytrace=False)
