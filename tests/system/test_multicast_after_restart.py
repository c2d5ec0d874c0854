"""Multicast copies to a node that was killed and started again (found by benchmarks/soak_cycle.py).

In the four-node full mesh a sender on D fans messages out to receivers on A, B and C. A is killed
(kill -9) and started again from the same config; a new receiver attaches there. Every receiver must get
each message at most once. The soak saw A's new receiver get ~17 s worth of messages twice after each
restart (B and C never); this test is the small reproduction: in 2 of 3 runs here (2026-12-02) A's new
receiver got *every* message sent after the restart twice (1,958 copies of 979 messages), B and C once;
in the third, once. Marked xfail (not strict: it depends on the order in which B, C and D redial A) until
the forwarding of multicast copies toward a restarted node is fixed; run it with ``--runxfail``.
"""

from __future__ import annotations

import time

import pytest

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


@pytest.mark.xfail(strict=False, reason="issue 33 finding, not fixed: after a restart, A's multicast "
                                        "consumer got every copy twice in 2 of 3 runs (pytest --runxfail)")
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
