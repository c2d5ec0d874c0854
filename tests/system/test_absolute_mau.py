"""A restarted node gets a peer's 20,000 addresses in one absolute MAU and indexes them in bounded steps,
while its own clients keep being served (issue 33, point 5).

A holds 20,000 receivers on unique addresses (raw connections, tests/support/bulk.py); C is joined to A
and routes all of them. C is killed (kill -9) and started again from a config without its connector, so
that an RPC server and caller on C are up first; then the connector is added (SIGHUP, a reload): C asks
A for its addresses (MAR) and gets them all in one absolute MAU. C must end routing every address (read
through management, the `address` table's remote destinations), every call made meanwhile must be
answered, and C's `addressSteps` counts the steps in which the index took the MAU (at most 500 addresses
each). The calls' worst round trip is printed, not asserted (benchmarks/mau_bench.py measures C's
longest loop turn).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import yaml

from tests.support.bulk import attach_receivers
from tests.support.meshes import HELLO, mesh_node, wait_converged
from tests.support.nodes import MESH_RULES, kill9, launch, node_config, stop
from tests.support.ports import free_ports, inter_router_port
from tests.support.rpc import RpcFactory
from tests.support.state import StateUnavailable, reading
from tests.support.waiting import wait_until

ADDRESSES = 20_000
PREFIX = "balanced/resync/"
ECHO = "openstack.org/om/rpc/anycast/resync/echo"
STEP = 500                              # router.linkstate.mobile.MAU_CHUNK: addresses per step at most


def _config_c(client_port: int, connect: int | None) -> dict:
    return node_config("C", rules=MESH_RULES, idle_timeout=0, extra={
        "listeners": [{"host": "127.0.0.1", "port": client_port, "role": "normal"}],
        "connectors": [] if connect is None else [{"host": "127.0.0.1", "port": connect, "cost": 1}],
        "router": {"hello_interval": HELLO, "hello_max_age": 3 * HELLO, "ra_interval_flux": 1.0}})


def _routed(node) -> int:
    """How many of A's addresses `node` has a remote destination for (-1: management did not answer)."""
    try:
        with reading(node) as m:
            rows = m.query_dicts("address", ["identity", "remoteCount"])
    except StateUnavailable:
        return -1
    return sum(1 for r in rows if r["identity"].startswith(PREFIX) and r["remoteCount"])


def _node_counter(node, name: str) -> int:
    with reading(node) as m:
        return m.query_dicts("node", [name])[0][name]


def _answers(caller) -> bool:
    try:
        return caller.call(ECHO, "hello", timeout=1.0) == "hello"
    except Exception:
        return False


def test_a_restarted_node_takes_a_large_absolute_mau_in_steps_and_serves_its_clients(node_factory, tmp_path):
    a = mesh_node(node_factory, "A", listen=True, idle_timeout=0)     # the raw receivers send no heartbeats
    (client_port,) = free_ports(1)
    c = launch(_config_c(client_port, inter_router_port(a)), tmp_path, 300)
    rpc = RpcFactory()
    try:
        wait_converged([a, c])
        attach_receivers(a.url, [f"{PREFIX}{i}" for i in range(ADDRESSES)])
        wait_until(lambda: _routed(c) == ADDRESSES, 60, "C routing A's addresses by their diff MAUs")

        kill9(c)
        c = launch(_config_c(client_port, None), tmp_path, 301)       # no connector yet: clients first
        rpc.server(c.url, ECHO, lambda body, props: body)
        caller = rpc.client(c.url)
        wait_until(lambda: _answers(caller), 10.0, "the echo server on C answering")
        assert _routed(c) == 0 and _node_counter(c, "addressSteps") == 0

        calls: list[float] = []
        failures: list[BaseException] = []
        done = threading.Event()

        def call_meanwhile() -> None:
            while not done.is_set():
                t0 = time.monotonic()
                try:
                    assert caller.call(ECHO, "ping") == "ping"
                    calls.append(time.monotonic() - t0)
                except Exception as exc:    # every call must be answered
                    failures.append(exc)
                time.sleep(0.005)

        thread = threading.Thread(target=call_meanwhile, daemon=True)
        thread.start()
        joined_config = _config_c(client_port, inter_router_port(a))
        c.config_path.write_text(yaml.safe_dump(joined_config, sort_keys=False))
        joined = time.monotonic()
        os.kill(c.pid, signal.SIGHUP)
        # polled by the size of C's address table: reading the whole table (20,000 rows) meanwhile would
        # hold C's loop longer than the MAU does
        wait_until(lambda: _node_counter(c, "addrCount") >= ADDRESSES, 60,
                   lambda: f"C's address table holding A's addresses (has {_node_counter(c, 'addrCount')})")
        routed = time.monotonic()
        done.set()
        thread.join(15)
        assert _routed(c) == ADDRESSES, "C has an entry for every address, but not a route for each"
        steps = _node_counter(c, "addressSteps")
    finally:
        rpc.close()
        problems = stop(c)
    assert not problems, problems
    assert not failures, failures[:3]
    assert calls, "no call was made while C took A's addresses"
    assert steps >= ADDRESSES // STEP, f"{steps} steps: the MAU was not indexed in steps of <= {STEP}"
    print(f"\nC routed A's {ADDRESSES} addresses {routed - joined:.2f} s after the connector was added, in "
          f"{steps} steps; {len(calls)} calls on C meanwhile, worst round trip {1000 * max(calls):.1f} ms")
