"""The mesh control plane between real node processes: inter-router connections, link state, mobile
addresses, connector retry. (Forwarding data across nodes comes next; see the mesh issue.)"""

import os
import signal
import time

from tests.support.clients import Client
from tests.support.meshes import chain, converged, mesh_node
from tests.support.nodes import DEFAULT_RULES
from tests.support.ports import free_port, free_ports, inter_router_port
from tests.support.state import mesh_view, node_state
from tests.support.waiting import wait_for


def test_chain_converges_with_max_cost_and_next_hops(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="every node reaching every other")
    va, vb, vc = mesh_view(a), mesh_view(b), mesh_view(c)
    assert va.neighbors == ["B"] and vb.neighbors == ["A", "C"] and vc.neighbors == ["B"]
    assert va.next_hops == {"B": "B", "C": "B"}
    assert vc.next_hops == {"A": "B", "B": "B"}
    assert va.costs == {"B": 2, "C": 3}          # A-B: max(1 at A's listener, 2 at B's connector)
    assert vb.costs == {"A": 2, "C": 1}


def test_mobile_address_propagates_and_is_withdrawn(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    cons = Client(c.url)
    r = cons.receiver("svc/orders", credit=5)
    wait_for(lambda: mesh_view(a).addresses.get("svc/orders") == ["C"], what="svc/orders known at A")
    assert mesh_view(b).addresses.get("svc/orders") == ["C"]
    r.close()
    wait_for(lambda: "svc/orders" not in mesh_view(a).addresses, what="svc/orders withdrawn at A")


def test_node_scoped_addresses_are_not_advertised(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    cons = Client(c.url)
    cons.receiver(None, dynamic=True)
    cons.receiver("svc/visible", credit=1)
    wait_for(lambda: "svc/visible" in mesh_view(a).addresses, what="svc/visible at A")
    assert all(not k.startswith("_topo") for k in mesh_view(a).addresses)


def test_killed_transit_node_is_dropped_at_once(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    os.kill(b.pid, signal.SIGKILL)
    b.proc.wait(5)
    start_t = time.monotonic()
    wait_for(lambda: mesh_view(a).reachable == [] and mesh_view(c).reachable == [],
             what="A and C forgetting B and each other")
    # the connection loss acts at once: well before a HELLO max age (0.6 s here) plus a tick
    assert time.monotonic() - start_t < 2.0
    b.stopped = True                                  # killed on purpose: not a test failure


def test_connector_retries_until_peer_appears_and_logs_once(node_factory, tmp_path):
    port = free_port()                                # nobody listening yet
    b = mesh_node(node_factory, "B", connect=[(port, 1)], rules=DEFAULT_RULES)
    time.sleep(1.5)                                   # several failed attempts (0.1, 0.2, 0.4, 0.8 s)
    a = node_factory("A", extra={"listeners": [
        {"host": "127.0.0.1", "port": 0, "role": "normal"},
        {"host": "127.0.0.1", "port": port, "role": "inter-router"}],
        "router": {"hello_interval": 0.2, "hello_max_age": 0.6, "ra_interval_flux": 1.0}})
    wait_for(lambda: converged([a, b]), timeout=10, what="B connecting once A listens")
    log = b.stderr_tail(400)
    assert log.count("cannot connect to") == 1, log
    assert "connected to" in log


def test_client_links_are_refused_on_inter_router_connections(node_factory):
    a = mesh_node(node_factory, "A", listen=True, rules=DEFAULT_RULES)
    cl = Client(f"amqp://127.0.0.1:{inter_router_port(a)}")
    r = cl.receiver("svc/x", credit=1, wait=False)
    wait_for(lambda: r.remote_closed, what="the link refused")
    assert r.remote_condition.name == "qd:connection-role"


def test_two_connections_between_the_same_pair_are_tolerated(node_factory):
    """A dials B and B dials A: two inter-router connections join one pair of nodes, and the control
    plane treats them as one neighbour (losing one of them is not tested yet: no way to cut just one
    from outside before management exists)."""
    pa, pb = free_ports(2)
    timers = {"hello_interval": 0.2, "hello_max_age": 0.6, "ra_interval_flux": 1.0}

    def node(node_id, own, other):
        return node_factory(node_id, extra={
            "listeners": [{"host": "127.0.0.1", "port": 0, "role": "normal"},
                          {"host": "127.0.0.1", "port": own, "role": "inter-router"}],
            "connectors": [{"host": "127.0.0.1", "port": other}], "router": timers})

    a = node("A", pa, pb)
    b = node("B", pb, pa)
    wait_for(lambda: converged([a, b]) and node_state(a).connections == 2, what="two connections A-B")
    assert mesh_view(a).neighbors == ["B"] and mesh_view(b).neighbors == ["A"]
    time.sleep(1.0)                                   # several HELLO periods: still stable
    assert converged([a, b]) and mesh_view(a).costs == {"B": 1}
