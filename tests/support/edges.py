"""Edge topologies of real node processes (docs/EDGE.md): interiors with `role: edge` listeners, edges
with uplinks to them.

:func:`router_test` starts qdrouterd's `RouterTest` shape: interiors INT.A and INT.B joined by one
inter-router link, edges EA1 and EA2 whose cheapest uplink is INT.A, EB1 and EB2 whose cheapest is
INT.B (each edge also has the other interior as its standby uplink); :func:`router_test_mesh` is that
topology as a module-scoped fixture's body. An edge's state (its active uplink) is read from its SIGUSR1
state line (:func:`tests.support.state`'s management view covers interiors).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.support.meshes import HELLO, MESH_RULES, mesh_node, wait_converged
from tests.support.nodes import NodeSet
from tests.support.ports import listening
from tests.support.waiting import close_all, wait_until

EDGES = ("EA1", "EA2", "EB1", "EB2")    # router_test's edges


def edge_port(node: Any) -> int:
    """The port of an interior's (first, plain) `role: edge` listener."""
    found = listening(node, "edge", "amqp")
    if not found:
        raise AssertionError(f"node {node.node_id} has no edge listener: {node.stdout_lines}")
    return int(found[0]["port"])


def interior(node_factory: Callable[..., Any], node_id: str, *, connect: Sequence[tuple[int, int]] = (),
             listen: bool = True, **kw: Any) -> Any:
    """An interior with a client listener, an inter-router listener (`listen`) and an edge listener."""
    n = mesh_node(node_factory, node_id, listen=listen, connect=connect, **kw)
    return n


def edge(node_factory: Callable[..., Any], node_id: str, uplinks: Sequence[tuple[int, int]], *,
         rules: Sequence[tuple[str, str]] = MESH_RULES, idle_timeout: float | None = None,
         uplink_idle_timeout: float | None = None, log_level: str = "info") -> Any:
    """An edge with a client listener and uplinks `(port, cost)` (with their own idle timeout if given)."""
    ups = [{"host": "127.0.0.1", "port": p, "cost": c} for p, c in uplinks]
    if uplink_idle_timeout is not None:
        ups = [{**u, "idle_timeout": uplink_idle_timeout} for u in ups]
    extra = {"router": {"mode": "edge"}, "uplinks": ups}
    more = {} if idle_timeout is None else {"idle_timeout": idle_timeout}
    return node_factory(node_id, rules=rules, log_level=log_level, extra=extra, **more)


def _with_edge_listener(node_factory: Callable[..., Any], idle: float | None = None) -> Callable[..., Any]:
    def start(node_id: str, **kw: Any) -> Any:
        extra = kw.pop("extra")
        lc = {"host": "127.0.0.1", "port": 0, "role": "edge"}
        if idle is not None:
            lc["idle_timeout"] = idle
        extra["listeners"] = [*extra["listeners"], lc]
        return node_factory(node_id, extra=extra, **kw)
    return start


def state_line(node: Any, timeout: float = 5.0) -> dict:
    """The node's last `state {json}` line after a SIGUSR1 (its stderr)."""
    before = node.stderr_path.read_text(errors="replace").count(" state {")
    os.kill(node.pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = node.stderr_path.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if " state {" in ln]
        if len(lines) > before:
            return json.loads(lines[-1].split(" state ", 1)[1])
        time.sleep(0.02)
    raise AssertionError(f"{node.node_id} wrote no state line")


def uplink_of(node: Any) -> str | None:
    return state_line(node)["edge"]["uplink"]


def router_test(node_factory: Callable[..., Any], *, uplink_idle_timeout: float | None = None
                ) -> dict[str, Any]:
    """INT.A, INT.B and four edges; returns {name: node} once every edge routes through its cheapest
    uplink and the interiors reach each other. `uplink_idle_timeout`: the edge listeners' and the
    uplinks' idle timeout (heartbeats at half of it; the nodes' own stays 16 s)."""
    start = _with_edge_listener(node_factory, uplink_idle_timeout)
    a = interior(start, "INT.A")
    b = interior(start, "INT.B", connect=[(int(listening(a, "inter-router", "amqp")[0]["port"]), 1)],
                 listen=False)
    wait_converged([a, b])
    pa, pb = edge_port(a), edge_port(b)
    nodes = {"INT.A": a, "INT.B": b}
    for name, ups in (("EA1", [(pa, 1), (pb, 2)]), ("EA2", [(pa, 1), (pb, 2)]),
                      ("EB1", [(pb, 1), (pa, 2)]), ("EB2", [(pb, 1), (pa, 2)])):
        nodes[name] = edge(node_factory, name, ups, uplink_idle_timeout=uplink_idle_timeout)
    for name in ("EA1", "EA2", "EB1", "EB2"):
        want = "INT.A" if name.startswith("EA") else "INT.B"
        wait_until(lambda n=nodes[name], w=want: uplink_of(n) == w, 10.0, f"{name} routes through {want}")
    return nodes


def router_test_mesh(tmp_path_factory: pytest.TempPathFactory, label: str) -> Iterator[dict[str, Any]]:
    """The body of a module-scoped fixture: ``yield from router_test_mesh(tmp_path_factory, "edge-x")``.
    Yields :func:`router_test`'s nodes (their files in a temporary directory named after `label`); at
    the end (or when the start fails) closes every client, stops the nodes and fails if one died, did
    not stop or exited non-zero (as tests/conftest.py's ``node_factory``)."""
    nodes = NodeSet(tmp_path_factory.mktemp(label))
    try:
        yield router_test(nodes.start)
    finally:                # also when router_test fails: no node is left running
        close_all()
        failure = nodes.stop_all()
    if failure:
        pytest.fail(failure, pytrace=False)


__all__ = ["EDGES", "HELLO", "edge", "edge_port", "interior", "router_test", "router_test_mesh", "star",
           "state_line", "uplink_of"]


def _capability(terminus: Any, capability: str) -> None:
    from proton import Data, symbol

    terminus.capabilities.put_array(False, Data.SYMBOL)
    terminus.capabilities.enter()
    terminus.capabilities.put_symbol(symbol(capability))
    terminus.capabilities.exit()


class FakeEdge:
    """A test client that connects to an interior's edge listener as edge `container_id` would and opens
    the control link pair (capability `qd.router`), so that a test can send what a real edge never would
    (link-state messages, forged edge messages)."""

    def __init__(self, url: str, container_id: str) -> None:
        from tests.support.clients import Client

        self.client = Client(url, container_id=container_id, wait_open=False)
        session = self.client.session
        self.out = session.sender(f"{container_id}-ctl-out")
        self.inc = session.receiver(f"{container_id}-ctl-in")
        for link in (self.out, self.inc):
            _capability(link.source, "qd.router")
            _capability(link.target, "qd.router")
            link.open()
        self.inc.flow(100)
        self.client._write()

    def send(self, data: bytes) -> None:
        from proton import Delivery  # noqa: F401  (the link API is proton's)

        d = self.out.delivery(f"t{id(data)}-{time.monotonic_ns()}".encode())
        self.out.send(data)
        self.out.advance()
        d.settle()
        self.client._write()


def star(node_factory: Callable[..., Any], edges: Sequence[str] = ("EA1", "EA2"), *,
         uplink_idle_timeout: float | None = None) -> dict[str, Any]:
    """One interior INT.A and `edges` with INT.A as their only uplink; returns {name: node} once every
    edge routes through INT.A."""
    a = interior(_with_edge_listener(node_factory, uplink_idle_timeout), "INT.A", listen=False)
    pa = edge_port(a)
    nodes = {"INT.A": a}
    for name in edges:
        nodes[name] = edge(node_factory, name, [(pa, 1)], uplink_idle_timeout=uplink_idle_timeout)
    for name in edges:
        wait_until(lambda n=nodes[name]: uplink_of(n) == "INT.A", 10.0, f"{name} routes through INT.A")
    return nodes
