"""Multicast copies to a node that was killed and started again (found by benchmarks/soak_cycle.py).

In the four-node full mesh a sender on D fans messages out to receivers on A, B and C. A is killed
(kill -9) and started again from the same config; a new receiver attaches there. Once the mesh has
re-converged every receiver gets each message exactly once. Before the fix, in 2 of 3 runs A's new
receiver got *every* message sent after the restart twice: a transit node (B or C) that had learned of
its own link to A before D's link to A kept forwarding D's copies toward A, beside D's direct copy. Its
paths had not changed, so the forwarding core kept valid origins computed from the older topology
(its cache was refreshed only when this node's routes changed; now also when any node's link state did:
the link-state engine's origins epoch).

While the mesh re-converges (until every node knows D-A again), copies may still go both ways: the
same valid-origins rule as qdrouterd's multicast; the test counts those but asserts only afterwards.
"""

from __future__ import annotations

import time

from tests.support.clients import Client
from tests.support.meshes import mesh_node, wait_converged
from tests.support.nodes import MESH_RULES, kill9, launch, node_config
from tests.support.ports import free_ports, inter_router_port
from tests.support.state import reading
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


def _dups(rcv, since: int = 0) -> int:
    bodies = [m.body for m in rcv.received if int(m.body) >= since]
    return len(bodies) - len(set(bodies))


def _full_mesh_known(nodes) -> bool:
    """Every node's management shows every node's link state naming the three others."""
    names = {n.node_id for n in nodes}
    for n in nodes:
        with reading(n) as m:
            rows = {r["id"]: set(r["linkState"]) for r in m.query_dicts("router.node")}
        if set(rows) != names or any(peers != names - {node} for node, peers in rows.items()):
            return False
    return True


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
        _send_for(snd, 1.0, seq)
        wait_until(lambda: (pump(0.05), _full_mesh_known([a, b, c, d]))[1], 20, "the mesh re-converged")
        _send_for(snd, 0.5, seq)                        # the paths are recomputed after a short debounce
        settled = seq[0]
        _send_for(snd, 5.0, seq)
        wait_until(lambda: (pump(0.05), len(rcvs["B"].received) >= seq[0])[1], 15, "B got everything")
        wait_until(lambda: (pump(0.05), len({m.body for m in rcvs["A2"].received
                                                if int(m.body) >= settled}) >= seq[0] - settled)[1],
                   15, "A's new receiver got everything sent once converged")
        while_converging = _dups(rcvs["A2"])
        dups = {name: _dups(r, settled) for name, r in rcvs.items()}
        assert dups == {name: 0 for name in rcvs}, (dups, f"{while_converging} while converging")
    finally:
        if a.alive():
            a.proc.terminate()
            a.proc.wait(10)
        a.stopped = True
