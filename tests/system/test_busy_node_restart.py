"""Restart of a busy node (issue 33, point 3), at test scale, in the four-node mesh.

A holds 300 clients (one process of tests.support.storm) with two receivers each: 600 addresses. A
sender on B has 40 deliveries in flight to a receiver on A that holds them unsettled. Then A is killed
(kill -9): every delivery in flight through it comes back to B's sender RELEASED or MODIFIED (none stays
unsettled, none is lost), C forgets A's addresses, and once A is started again from the same config
every client is back and C routes every address again. The 10,000-client, 20,000-address version, with
its timings and the canary latency on the other nodes, is benchmarks/restart_bench.py.
"""

from __future__ import annotations

from proton import Delivery

from tests.support.clients import Client
from tests.support.meshes import mesh_node, wait_converged
from tests.support.nodes import MESH_RULES, kill9, launch, node_config
from tests.support.ports import free_ports, inter_router_port
from tests.support.state import StateUnavailable, mesh_view
from tests.support.storm import StormProcess
from tests.support.waiting import wait_for, wait_until

CLIENTS, LINKS = 300, 2
IN_FLIGHT = 40
HELLO = 0.2


def _config_a(client_port: int, ir_port: int) -> dict:
    return node_config("A", rules=MESH_RULES, idle_timeout=0, extra={
        "listeners": [{"host": "127.0.0.1", "port": client_port, "role": "normal"},
                      {"host": "127.0.0.1", "port": ir_port, "role": "inter-router"}],
        "router": {"hello_interval": HELLO, "hello_max_age": 3 * HELLO, "ra_interval_flux": 1.0}})


def _storm_addresses_of_a(node) -> int:
    """A's storm addresses that `node` routes to A (none while A is unreachable from it)."""
    try:
        view = mesh_view(node)
    except StateUnavailable:
        return -1
    if "A" not in view.reachable:
        return 0
    return sum(1 for address, holders in view.addresses.items() if "restart" in address and "A" in holders)


def test_kill_and_restart_of_a_busy_node(node_factory, tmp_path):
    client_port, ir_port = free_ports(2)
    a = launch(_config_a(client_port, ir_port), tmp_path, 100)
    b = mesh_node(node_factory, "B", listen=True, connect=[(ir_port, 1)], idle_timeout=0)
    c = mesh_node(node_factory, "C", listen=True, idle_timeout=0,
                  connect=[(ir_port, 1), (inter_router_port(b), 1)])
    d = mesh_node(node_factory, "D", idle_timeout=0,
                  connect=[(ir_port, 1), (inter_router_port(b), 1), (inter_router_port(c), 1)])
    storm = StormProcess(client_port, CLIENTS, LINKS, name="restart")
    try:
        wait_converged([a, b, c, d])
        storm.go()
        assert storm.next_round(60) is not None, "the clients did not come up"
        wait_until(lambda: _storm_addresses_of_a(c) == CLIENTS * LINKS, 30,
                   lambda: f"C knows A's {CLIENTS * LINKS} addresses (has {_storm_addresses_of_a(c)})")

        holder = Client(a.url)                              # takes deliveries and never settles them
        rcv = holder.receiver("balanced/restart/held", credit=IN_FLIGHT, auto_accept=False)
        snd = Client(b.url).sender("balanced/restart/held")
        snd.wait_credit(IN_FLIGHT, timeout=15)
        trackers = [snd.send(f"m{i}") for i in range(IN_FLIGHT)]
        rcv.wait_messages(IN_FLIGHT)
        assert not any(t.settled for t in trackers)

        kill9(a)
        wait_for(lambda: all(t.settled for t in trackers), 15, "every delivery in flight through A settled")
        outcomes = {t.state for t in trackers}
        assert outcomes <= {Delivery.RELEASED, Delivery.MODIFIED}, [t.outcome for t in trackers]
        wait_until(lambda: _storm_addresses_of_a(c) == 0, 15, "C forgot A's addresses")

        a = launch(_config_a(client_port, ir_port), tmp_path, 101)
        back = storm.next_round(60)
        assert back is not None and back["round"] == 1, "not every client came back"
        wait_until(lambda: _storm_addresses_of_a(c) == CLIENTS * LINKS, 30,
                   lambda: f"C routes A's addresses again (has {_storm_addresses_of_a(c)})")
    finally:
        storm.close()
        if a.alive():
            a.proc.terminate()
            a.proc.wait(10)
        a.stopped = True

