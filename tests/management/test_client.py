"""``router.management.client.ManagementClient`` against the nodes of the mesh of conftest.py.

Only what does not depend on the traffic clients (closed after the package's first test) is checked.
"""

from __future__ import annotations

import socket
import time

import pytest

from router.management.client import (
    ManagementClient,
    ManagementError,
    ManagementTimeout,
    ManagementUnavailable,
    agent_address,
)
from tests.support.stat_mesh import NAMES

SPEC_TYPES = {"node", "connection", "link", "address", "router-node", "broker", "listener"}


def test_agent_address():
    assert agent_address() == "$management"
    assert agent_address("B") == "_topo/0/B/$management"


def test_query_read_and_get_types_locally_and_through_the_mesh(observed):
    with ManagementClient(observed.urls["C"], timeout=5) as client:
        assert client.reply_to.startswith("amqp:/_topo/0/C/temp.")
        names, rows = client.query("address", ["identity", "subscriberCount"], node="A")
        assert names == ["identity", "subscriberCount"]
        assert ["_topo/0/A/$management", 1] in rows            # A's agent answered, not C's
        assert not any(r[0].startswith("_topo/0/C/") for r in rows)
        names, rows = client.query("router-node", node=None)
        assert names[:3] == ["identity", "reachable", "neighbour"]
        assert sorted(r[0] for r in rows) == ["A", "B", "D"]
        for node in NAMES:
            target = None if node == "C" else node
            other = "A" if node != "A" else "B"
            assert client.read("router-node", other, node=target)["identity"] == other
            assert client.query_dicts("node", ["id"], node=target) == [{"id": node}]
        types = client.get_types(node="D")
        assert SPEC_TYPES <= set(types), types
        assert types["node"][0] == "id" and "deliveriesStuck" in types["node"]


@pytest.mark.parametrize(("call", "status"), [
    (lambda c: c.query("no-such-type"), 404),
    (lambda c: c.read("address", "no/such/address"), 404),
    (lambda c: c.query("address", ["identity", "noSuchAttribute"]), 400),
    (lambda c: c.request("FROB", "node"), 400),
])
def test_error_status_raises_management_error(observed, call, status):
    with ManagementClient(observed.urls["B"], timeout=5) as client:
        with pytest.raises(ManagementError) as info:
            call(client)
        assert info.value.status_code == status and info.value.description
        assert client.query_dicts("node", ["id"]) == [{"id": "B"}]      # the client still works


def test_unknown_node_is_unavailable(observed):
    with ManagementClient(observed.urls["B"], timeout=5) as client:
        with pytest.raises(ManagementUnavailable, match="released"):
            client.query("node", node="Z")


def test_silent_peer_times_out():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        started = time.monotonic()
        url = f"amqp://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ManagementTimeout) as info:
            ManagementClient(url, timeout=0.5)
        assert str(info.value) == f"no connection to {url} within 0.5 s"
        assert time.monotonic() - started < 3
