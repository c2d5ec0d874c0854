"""Meshes of real node processes: start nodes wired to each other, wait until they know each other.

A mesh is described by node names in start order and edges ``(from, to, cost)``: ``from`` dials the
inter-router listener of ``to`` with a connector of that cost (the listener's own cost is 1, and a
link's cost is the max of both ends, so the edge cost is the link cost). ``to`` must be started
before ``from``; a node that is the ``to`` of an edge gets an inter-router listener.

Nodes come from a ``node_factory`` (the fixture of tests/conftest.py, or any callable with its
signature); the control plane runs on short timers (HELLO every 0.2 s). Node views are read through
management (:mod:`tests.support.state`); every wait pumps the test clients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tests.support.nodes import DEFAULT_RULES, MESH_RULES
from tests.support.ports import inter_router_port
from tests.support.state import StateUnavailable, mesh_view
from tests.support.waiting import wait_until

HELLO = 0.2
CONVERGE_TIMEOUT = 15.0

Edge = tuple[str, str, int]


def mesh_node(node_factory: Callable[..., Any], node_id: str, *, listen: bool = False,
              connect: Iterable[tuple[int, int]] = (), listen_cost: int = 1, hello: float = HELLO,
              hello_max_age: float | None = None, rules: Sequence[tuple[str, str]] = MESH_RULES,
              link_capacity: int = 250, log_level: str = "info", idle_timeout: float | None = None,
              sections: Mapping[str, Any] | None = None) -> Any:
    """One node with a client listener (a free port), optionally an inter-router listener of cost
    ``listen_cost``, and connectors ``(port, cost)``; HELLO every ``hello`` s, peers dropped after
    ``hello_max_age`` (3 HELLOs). ``idle_timeout``: the node's AMQP idle timeout (default: the
    factory's); ``sections``: more config sections (``telemetry:``, ``brokers:``...)."""
    listeners = [{"host": "127.0.0.1", "port": 0, "role": "normal"}]
    if listen:
        listeners.append({"host": "127.0.0.1", "port": 0, "role": "inter-router", "cost": listen_cost})
    extra = {
        "listeners": listeners,
        "connectors": [{"host": "127.0.0.1", "port": port, "cost": cost} for port, cost in connect],
        "router": {"hello_interval": hello, "hello_max_age": hello_max_age or hello * 3,
                   "ra_interval_flux": 1.0},
        **(sections or {}),
    }
    more = {} if idle_timeout is None else {"idle_timeout": idle_timeout}
    return node_factory(node_id, rules=rules, link_capacity=link_capacity, log_level=log_level, extra=extra,
                        **more)


def build(node_factory: Callable[..., Any], names: Sequence[str], edges: Iterable[Edge], *,
          port_map: Callable[[str, str, int], int] | None = None, wait: bool = True,
          sections: Mapping[str, Mapping[str, Any]] | None = None,
          timeout: float = CONVERGE_TIMEOUT, **kw: Any) -> dict[str, Any]:
    """Start the nodes ``names`` in order, wired by ``edges`` ``(from, to, cost)``, and (``wait``)
    wait until every node reaches every other one. ``port_map(from, to, port)`` may replace the port
    ``from`` dials (to put a proxy in between); ``sections[name]``: more config sections of that node;
    ``kw``: :func:`mesh_node`'s options for every node. Returns {name: node}."""
    edges = list(edges)
    listeners = {to for _, to, _ in edges}
    nodes: dict[str, Any] = {}
    for name in names:
        connect = []
        for frm, to, cost in edges:
            if frm != name:
                continue
            assert to in nodes, f"edge {frm}->{to}: {to} must be started before {frm}"
            port = inter_router_port(nodes[to])
            if port_map is not None:
                port = port_map(frm, to, port)
            connect.append((port, cost))
        nodes[name] = mesh_node(node_factory, name, listen=name in listeners, connect=connect,
                                sections=(sections or {}).get(name), **kw)
    if wait:
        wait_converged(nodes.values(), timeout)
    return nodes


def chain(node_factory: Callable[..., Any]) -> tuple[Any, Any, Any]:
    """A <- B <- C: B dials A (cost 2), C dials B (cost 1); the default test address rules. Not
    waited for: see :func:`converged`."""
    nodes = build(node_factory, ["A", "B", "C"], [("B", "A", 2), ("C", "B", 1)], rules=DEFAULT_RULES,
                  wait=False)
    return nodes["A"], nodes["B"], nodes["C"]


def converged(nodes: Iterable[Any]) -> bool:
    """Every node reaches every other one."""
    nodes = list(nodes)
    ids = {n.node_id for n in nodes}
    return all(set(mesh_view(n).reachable) == ids - {n.node_id} for n in nodes)


def views(nodes: Iterable[Any]) -> str:
    """Each node's view of the mesh on one line (for failure messages)."""
    out = []
    for n in nodes:
        if not n.alive():
            out.append(f"{n.node_id}: dead")
            continue
        try:
            v = mesh_view(n)
        except StateUnavailable as e:
            out.append(f"{n.node_id}: no state ({e})")
            continue
        out.append(f"{n.node_id}: reachable={v.reachable} next_hops={v.next_hops} addresses={v.addresses}")
    return "; ".join(out)


def wait_converged(nodes: Iterable[Any], timeout: float = CONVERGE_TIMEOUT) -> None:
    """Wait until every node reaches every other one."""
    nodes = list(nodes)
    wait_until(lambda: converged(nodes), timeout, lambda: "convergence: " + views(nodes))


def wait_address(nodes: Iterable[Any], address: str, holders: Iterable[str], timeout: float = 10.0) -> None:
    """Wait until every node knows exactly ``holders`` (minus itself) as the other nodes with
    consumers for ``address``."""
    nodes = list(nodes)
    holders = set(holders)

    def ok() -> bool:
        return all(mesh_view(n).addresses.get(address, []) == sorted(holders - {n.node_id}) for n in nodes)

    wait_until(ok, timeout, lambda: f"{address} known at every node as served by {sorted(holders)}: "
               + views(nodes))
