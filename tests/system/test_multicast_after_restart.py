"""Multicast copies to a node that was killed and started again (found by benchmarks/soak_cycle.py).

In the four-node full mesh a sender on D fans messages out to receivers on A, B and C. A is killed
(kill -9) and started again from the same config; a new receiver attaches there. Every receiver must get
each message at most once. The soak saw A's new receiver get ~17 s worth of messages twice after each
restart (B and C never); this test is the small reproduction. The cause: a node's forwarding table cached
the multicast valid origins and refreshed them only when its *own* routes changed, so B and C kept the trees
of the moment when D's link to the new A was not up yet (D -> B -> A) and forwarded D's copies to A beside
D's own, until their own routes changed (router.adapter.routerlinks now refreshes them whenever the
topology changed: the link-state engine's ``origins_epoch``). Before the fix it failed in 2 of 3 runs.
"""

from __future__ import annotations

import time

from tests.support.clients import Client
from tests.support.meshes import mesh_node, wait_converged
from tests.support.nodes import MESH_RULES, kill9, launch, node_config
from tests.support.ports import free_ports, inter_router_port
from tests.support.waiting import pump, wait_until

HELLO = 0.2
ADDRESS = "multicast/restart/dups"


def _config_a(client_port: int, ir_port: int) -> dict:
    return node_config("A", rules=MESH_RULES, extra={
        "listeners": [{"host": "127.0.0.1", "port": client_port, "role": "normal"},
                      {"host": "127.0.0.1", "port": ir_port, "role": "inter-router"}],
        "router": {"hello_interval": HELLO, "hello_max_age": 3 * HELLO, "ra_interval_flux": 1.0}})


def _send_for(snd, seconds: float, seq: list[int]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if snd.credit > 0:
            snd.send(str(seq[0]))
            seq[0] += 1
        pump(0.01)


def _dups(rcv) -> int:
    bodies = [m.body for m in rcv.received]
    return len(bodies) - len(set(bodies))


def test_no_duplicate_copies_to_a_restarted_node(node_factory, tmp_path):
    client_port, ir_port = free_ports(2)
    a = launch(_config_a(client_port, ir_port), tmp_path, 100)
    b = mesh_node(node_factory, "B", listen=True, connect=[(ir_port, 1)])
    c = mesh_node(node_factory, "C", listen=True, connect=[(ir_port, 1), (inter_router_port(b), 1)])
    d = mesh_node(node_factory, "D", connect=[(ir_port, 1), (inter_router_port(b), 1),
                                             (inter_router_port(c), 1)])
    try:
        wait_converged([a, b, c, d])
        rcvs = {n.node_id: Client(n.url).receiver(ADDRESS, credit_window=500) for n in (a, b, c)}
        snd = Client(d.url).sender(ADDRESS)
        seq = [0]
        _send_for(snd, 2.0, seq)
        kill9(a)
        _send_for(snd, 1.0, seq)
        a = launch(_config_a(client_port, ir_port), tmp_path, 101)
        rcvs["A2"] = Client(a.url).receiver(ADDRESS, credit_window=500)
        wait_until(lambda: (pump(0.01), snd.credit > 0)[1], 15, "credit again")
        _send_for(snd, 8.0, seq)
        _send_for(snd, 0.0, seq)
        wait_until(lambda: (pump(0.05), len(rcvs["B"].received) >= seq[0])[1], 15, "B got everything")
        dups = {name: _dups(r) for name, r in rcvs.items()}
        assert dups == {name: 0 for name in rcvs}, dups
    finally:
        if a.alive():
            a.proc.terminate()
            a.proc.wait(10)
        a.stopped = True
