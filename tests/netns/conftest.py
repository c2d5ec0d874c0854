"""Fixtures of the network-fault tests: a :class:`tests.support.netlab.NetLab`, or why there is none.

``netlab`` yields a lab (namespaces are created by the test through it) and at teardown closes the
clients, stops every node with SIGTERM (the test fails if one died, hangs or exits non-zero, as with
node_factory) and deletes the namespaces. Where namespaces cannot be created it yields None and the
tests fall back to a TCP proxy (``proxy_factory`` of tests/conftest.py), printing why.
"""

from __future__ import annotations

import warnings

import pytest

from tests.support.netlab import NetLab, namespaces_unavailable
from tests.support.nodes import stop_all
from tests.support.waiting import close_all


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
        close_all()
        failure = stop_all(lab.nodes)
        lab.destroy()
        if failure:
            pytest.fail(failure, pytrace=False)
