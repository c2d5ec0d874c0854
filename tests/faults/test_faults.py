"""The fault suite: node and connection failures under traffic, each with a message audit.

The audit (tests/support/traffic.AuditStream): every message a producer sent was accepted by a consumer,
or came back to the producer RELEASED / MODIFIED / REJECTED; the producers here resend RELEASED and
MODIFIED ones (as the RPC clients do), so in the end each message is accepted exactly once; a consumer
may see a message twice only if an attempt of it came back MODIFIED (its acceptance was lost with a
node or connection); nothing stays unsettled, nothing arrives that was not sent.

* kill -9 of each node of the four-node mesh of topologies/four-node.yaml in turn, while producers on
  the other three nodes stream to consumers on all four;
* an inter-node connection silently blackholed (a TCP proxy stops relaying, nothing is closed): the
  HELLO timeout reroutes new traffic at once; what was in flight on the dead connection comes back
  MODIFIED when the AMQP idle timeout closes it; when the path returns, the link comes back;
* a node killed and restarted with the same id (a new instance) while traffic flows: the others see
  a restart (not a duplicate id), drop what they knew of the old instance, and route to the new one.

The broker restart case lives with the gateway tests: tests/gateway/test_gateway_restart.py
(``rabbitmqctl stop_app`` / ``start_app`` mid-stream, with the same audit against the queue).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tests.support.clients import Client
from tests.support.meshes import build, converged, mesh_node, views, wait_address
from tests.support.nodes import REPO_ROOT, kill9
from tests.support.ports import inter_router_port
from tests.support.state import mesh_view, node_state
from tests.support.traffic import AuditStream
from tests.support.waiting import wait_until

ADDR = "svc/faults"
TOTAL = 1500                  # messages per producer
KILL_AFTER = 400              # messages received (all consumers) before the fault
DEADLINE = 40.0


def four_node_edges(path: Path = REPO_ROOT / "topologies" / "four-node.yaml") -> tuple[list[str], list]:
    """Node names (in a start order that suits the edges) and edges of a topology file."""
    topo = yaml.safe_load(path.read_text())
    names = list(topo["nodes"])
    edges = [(e["from"], e["to"], e["cost"]) for e in topo["edges"]]
    order: list[str] = []
    while len(order) < len(names):          # every "to" before its "from"
        for n in names:
            if n not in order and all(to in order for frm, to, _ in edges if frm == n):
                order.append(n)
    return order, edges


def _run(streams: list[AuditStream], until, what: str, timeout: float = DEADLINE) -> None:
    wait_until(lambda: all(s.poll() for s in streams) and until(), timeout,
               lambda: f"{what}: " + "; ".join(s.summary() for s in streams))


def _audit(streams: list[AuditStream], fault: str) -> None:
    failed = sum(n for s in streams for o, n in s.outcomes().items() if o != "ACCEPTED")
    for s in streams:
        print(f"{s.tag}: {s.audit()}")
    assert failed > 0, f"the {fault} failed no delivery: the test did not hit traffic in flight"


def _routes_to(nodes, address: str) -> None:
    """Every node's forwarding entry for ``address`` has exactly the other ``nodes`` as remote
    destinations (the control plane may remember a dead node's addresses until its link state ages
    out; the forwarding core uses only reachable nodes)."""
    ids = {n.node_id for n in nodes}

    def ok() -> bool:
        return all(set(node_state(n).addresses.get(address, {}).get("remote", ())) == ids - {n.node_id}
                   for n in nodes)
    wait_until(ok, 10, lambda: f"{address} routed to {sorted(ids)}: " + "; ".join(
        f"{n.node_id}: {node_state(n).addresses.get(address)}" for n in nodes))


def _settled_inside(nodes) -> None:
    for n in nodes:
        wait_until(lambda n=n: node_state(n).in_flight == 0, 5, f"node {n.node_id} holding no deliveries")


@pytest.mark.parametrize("victim", ["A", "B", "C", "D"])
def test_kill9_each_node_of_the_four_node_mesh(node_factory, victim):
    order, edges = four_node_edges()
    nodes = build(node_factory, order, edges)
    consumers = {n: Client(nodes[n].url).receiver(ADDR, credit_window=100) for n in order}
    wait_address(nodes.values(), ADDR, order)
    streams = []
    for n in order:
        if n != victim:
            tx = Client(nodes[n].url).sender(ADDR)
            tx.wait_credit()
            streams.append(AuditStream(tx, list(consumers.values()), total=TOTAL, window=50, tag=f"from-{n}"))
    received = lambda: sum(len(r.received) for r in consumers.values())  # noqa: E731
    _run(streams, lambda: received() >= KILL_AFTER, "traffic before the kill")
    kill9(nodes[victim])
    t_kill = time.monotonic()
    survivors = [nodes[n] for n in order if n != victim]
    _run(streams, lambda: all(s.finished for s in streams), f"every message accepted after killing {victim}")
    print(f"killed {victim}: streams done {time.monotonic() - t_kill:.1f} s after the kill")
    _audit(streams, f"kill of {victim}")
    assert all(len(consumers[n].received) > 0 for n in order if n != victim)
    wait_until(lambda: converged(survivors), 10, lambda: "survivors converge: " + views(survivors))
    _routes_to(survivors, ADDR)
    _settled_inside(survivors)


def test_blackholed_connection_reroutes_on_hello_timeout(node_factory, proxy_factory):
    """Diamond A-B (1), B-D (1), A-C (5), C-D (5); the B->A connection runs through a proxy that is
    then blackholed: nothing closes, the bytes just stop."""
    proxies = {}

    def via_proxy(frm, to, port):
        if (frm, to) == ("B", "A"):
            proxies["BA"] = proxy_factory(port)
            return proxies["BA"].port
        return port

    idle = 2.0
    diamond = [("B", "A", 1), ("C", "A", 5), ("D", "B", 1), ("D", "C", 5)]
    nodes = build(node_factory, ["A", "B", "C", "D"], diamond, port_map=via_proxy, idle_timeout=idle)
    a, b, c, d = (nodes[x] for x in "ABCD")
    assert mesh_view(a).next_hops["D"] == "B"
    rx = Client(d.url).receiver(ADDR, credit_window=300)
    wait_address(nodes.values(), ADDR, ["D"])
    tx = Client(a.url).sender(ADDR)
    tx.wait_credit()
    stream = AuditStream(tx, [rx], total=3000, window=150, rate=400, tag="a-to-d")
    _run([stream], lambda: len(rx.received) >= 300, "traffic before the blackhole")
    conns_before = node_state(a).connections
    proxies["BA"].blackhole()
    t0 = time.monotonic()
    _run([stream], lambda: mesh_view(a).next_hops.get("D") == "C", "A rerouting D through C", 5)
    rerouted = time.monotonic() - t0
    # the HELLO timeout (0.6 s) moved the route while the dead connection is still open at A
    assert rerouted < 2.0, f"reroute took {rerouted:.1f} s"
    assert node_state(a).connections == conns_before, "the blackholed connection closed before the reroute"
    stuck = len(stream.pending)
    _run([stream], lambda: stream.finished, "every message accepted")
    done = time.monotonic() - t0
    print(f"rerouted after {rerouted:.2f} s; {stuck} in flight then; all accepted after {done:.1f} s")
    assert stream.outcomes().get("MODIFIED", 0) > 0, "no delivery was caught on the blackholed connection"
    print(stream.audit())
    _settled_inside([a, c, d])

    # the path comes back: B redials A through the proxy, and A routes to D through B again
    proxies["BA"].release()
    wait_until(lambda: mesh_view(a).next_hops.get("D") == "B", 15,
               lambda: "A back on B: " + views([a, b, c, d]))


def test_node_restarted_with_the_same_id(node_factory):
    """D (it only dials out) is killed and started again under the same id while A, B and C stream to
    consumers on every node."""
    order, edges = four_node_edges()
    assert all(frm == "D" or to != "D" for frm, to, _ in edges) and order[-1] == "D"
    nodes = build(node_factory, order, edges)
    # D's consumer never settles: what reaches it is in flight through D when D is killed (at 300 msg/s
    # per stream, deliveries that D's consumer settles at once were often all settled at the kill)
    consumers = [Client(nodes[n].url).receiver(ADDR, credit_window=100, auto_accept=n != "D")
                 for n in order]
    wait_address(nodes.values(), ADDR, order)
    streams = []
    for n in "ABC":
        tx = Client(nodes[n].url).sender(ADDR)
        tx.wait_credit()
        streams.append(AuditStream(tx, consumers, total=TOTAL, window=50, rate=300, tag=f"from-{n}"))
    _run(streams, lambda: sum(len(r.received) for r in consumers) >= KILL_AFTER and consumers[-1].received,
         "traffic before the kill, some of it held at D")
    kill9(nodes["D"])
    connect = [(inter_router_port(nodes[to]), cost) for frm, to, cost in edges if frm == "D"]
    d2 = mesh_node(node_factory, "D", connect=connect)
    others = [nodes[n] for n in "ABC"]
    mesh = [*others, d2]
    new_consumer = Client(d2.url).receiver(ADDR, credit_window=100)
    for s in streams:
        s.receivers.append(new_consumer)
    _run(streams, lambda: converged(mesh), "the mesh with the new D")
    _run(streams, lambda: all(s.finished for s in streams), "every message accepted")
    _audit(streams, "kill of D")
    assert new_consumer.received, "nothing reached the restarted D"
    wait_address(mesh, ADDR, order)
    _settled_inside(mesh)
    for n in others:
        log = n.stderr_path.read_text(errors="replace")
        assert "node D restarted" in log, f"{n.node_id} did not see D's new instance as a restart"
        assert "duplicate node id" not in log, f"{n.node_id} took the restarted D for a duplicate"
