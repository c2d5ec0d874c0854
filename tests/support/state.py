"""Node state read through management (``$management``, docs/MANAGEMENT.md), as an operator reads it.

Each reading opens a :class:`router.management.client.ManagementClient` on the node's URL, queries the
entities it needs and closes. Its requests and answers are deliveries like those of ``meshrouter stat``
(counted as accepted by the node). Readings present what the tests assert on:

* :func:`node_state`: connections, links, deliveries in flight, streams in progress and the address
  table (per address: distribution, local consumers and producers, ready, remote nodes), plus the
  ``node`` entity's counters. Left out, as in the node's SIGUSR1 state line: the node's own in-process
  clients (management agent, broker gateways: connections of role ``internal``) and what they use;
  left out too: the connections of the readings themselves, their links, reply addresses and the
  request in flight while the agent answers it.
* :func:`mesh_view`: the control plane's view (``router-node``): neighbours, reachable nodes, next
  hops, costs, and which other nodes advertise which mobile addresses.
* :func:`gateway_state`: one ``broker`` entity.

The nodes are read directly (never through the mesh), so a reading works on a node cut off from it.
A node that cannot be read raises :class:`StateUnavailable` (an AssertionError).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from router.management.client import ManagementClient, ManagementClientError

TIMEOUT = 10.0
INTERNAL = "internal"          # the role of the node's in-process connections

_READERS: set[str] = set()     # container ids of every reading's connection


class StateUnavailable(AssertionError):
    """The node could not be read (not running, not answering)."""


class _Reader(ManagementClient):
    """A management client that notes its container id (see the module doc)."""

    def __init__(self, url: str, virtual_host: str | None = None) -> None:
        super().__init__(url, timeout=TIMEOUT, virtual_host=virtual_host)
        _READERS.add(str(self._conn.conn.container))


@contextmanager
def reading(node: Any) -> Iterator[ManagementClient]:
    """A management client on ``node`` for one reading (errors become :class:`StateUnavailable`)."""
    try:
        with _Reader(node.url, getattr(node, "state_vhost", None)) as client:
            yield client
    except ManagementClientError as exc:
        raise StateUnavailable(f"cannot read node {node.node_id} through management: {exc}") from None


@dataclass(frozen=True)
class NodeState:
    """One reading of a node's tables (see the module doc for what is left out)."""

    connections: int
    links: int
    in_flight: int                  # deliveries in flight (unsettledDeliveries, not the reading's own)
    streams: int                    # multi-frame deliveries being streamed now
    addresses: dict[str, dict[str, Any]]   # key -> distribution, consumers, producers, ready, remote
    node: dict[str, Any] = field(repr=False)   # the node entity (counters: docs/MANAGEMENT.md)


@dataclass(frozen=True)
class MeshView:
    """What a node's control plane knows of the other nodes."""

    neighbors: list[str]
    reachable: list[str]
    next_hops: dict[str, str]       # reachable node -> the neighbour toward it (a neighbour: itself)
    costs: dict[str, int]           # reachable node -> path cost
    addresses: dict[str, list[str]]  # mobile address -> the other nodes advertising it


def node_state(node: Any) -> NodeState:
    """Read the node's tables through management."""
    with reading(node) as m:
        conns = m.query_dicts("connection", ["identity", "role", "container"])
        links = m.query_dicts("link", ["connectionId", "linkDir", "owningAddr", "unsettledCount"])
        addresses = m.query_dicts("address", ["identity", "distribution", "subscriberCount",
                                              "producerCount", "remoteHostRouters", "ready"])
        (row,) = m.query_dicts("node")
    hidden = {c["identity"] for c in conns if c["role"] == INTERNAL or c["container"] in _READERS}
    shown = [ln for ln in links if ln["connectionId"] not in hidden]
    # the request being answered is in flight (to the agent's in-process receiver) while answered; counted
    # there, since a client the node redacts for (not on loopback) sees no connection's container
    internal = {c["identity"] for c in conns if c["role"] == INTERNAL}
    own = sum(ln["unsettledCount"] or 0 for ln in links
              if ln["connectionId"] in internal and ln["linkDir"] == "out"
              and "$management" in (ln["owningAddr"] or ""))
    table = {}
    for a in addresses:
        key = a["identity"]
        consumers = sum(1 for ln in shown if ln["owningAddr"] == key and ln["linkDir"] == "out")
        producers = sum(1 for ln in shown if ln["owningAddr"] == key and ln["linkDir"] == "in")
        remote = list(a["remoteHostRouters"])
        # an address only hidden links use is left out; one no link uses at all is not
        if consumers or producers or remote or not (a["subscriberCount"] or a["producerCount"]):
            table[key] = {"distribution": a["distribution"], "consumers": consumers, "producers": producers,
                          "ready": a["ready"], "remote": remote}
    return NodeState(connections=sum(1 for c in conns if c["identity"] not in hidden), links=len(shown),
                     in_flight=row["unsettledDeliveries"] - own, streams=row["streamsInProgress"],
                     addresses=table, node=row)


def mesh_view(node: Any) -> MeshView:
    """Read the node's view of the mesh through management."""
    with reading(node) as m:
        rows = m.query_dicts("router-node", ["identity", "reachable", "neighbour", "nextHop", "cost",
                                             "mobileAddresses"])
    addresses: dict[str, list[str]] = {}
    for r in rows:
        for address in r["mobileAddresses"]:
            addresses.setdefault(address, []).append(r["identity"])
    reachable = sorted(r["identity"] for r in rows if r["reachable"])
    by_id = {r["identity"]: r for r in rows}
    return MeshView(
        neighbors=sorted(r["identity"] for r in rows if r["neighbour"]),
        reachable=reachable,
        next_hops={n: by_id[n]["nextHop"] or n for n in reachable},
        costs={n: by_id[n]["cost"] for n in reachable},
        addresses={a: sorted(holders) for a, holders in sorted(addresses.items())},
    )


def gateway_state(node: Any, broker: str = "rabbit") -> dict[str, Any]:
    """The ``broker`` entity of the node's gateway to ``broker`` (docs/MANAGEMENT.md)."""
    with reading(node) as m:
        return m.read("broker", broker)


def gateway_connected(node: Any, broker: str = "rabbit") -> bool:
    """The node's gateway to ``broker`` is connected."""
    return gateway_state(node, broker)["state"] == "connected"
