"""oslo.messaging RPC (amqp1 driver) through the four-node mesh: servers and callers on different nodes.

The driver keeps its default ``addressing_mode = dynamic``: the node's Open frame says
``product = meshrouter`` and the driver uses legacy addresses only for ``qpid-cpp`` (or no product),
so it picks routable ``openstack.org/om/...`` addresses by itself. call/cast go to
``rpc/anycast/<exchange>/<topic>`` (balanced), call/cast with a server to ``rpc/unicast/.../<server>``
(closest), fanout to ``rpc/multicast/...`` (multicast).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import oslo_messaging as om
import pytest

from tests.support.meshes import wait_address
from tests.support.oslo import EchoEndpoint, rpc_addresses
from tests.support.state import mesh_view, node_state
from tests.support.waiting import wait_until

# The driver rounds every deadline up to a whole second of time.monotonic() (amqp1_driver/eventloop.py
# compute_timeout), so a call with timeout T fails between T and T + 1 s: allow that plus scheduling.
DRIVER_SLACK = 1.5

pytestmark = [
    pytest.mark.timeout(30),
    # the amqp1 driver is deprecated upstream (removed after 14.9.x): debtcollector warns on every use
    pytest.mark.filterwarnings("ignore:Using class:DeprecationWarning"),
]


def timed_call(fn, *args, **kwargs) -> dict:
    """Run ``fn`` and return {"reply" or "exc", "elapsed"}."""
    out: dict = {}
    t0 = time.monotonic()
    try:
        out["reply"] = fn(*args, **kwargs)
    except Exception as e:  # the test inspects it
        out["exc"] = e
    out["end"] = time.monotonic()
    out["elapsed"] = out["end"] - t0
    return out


def in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    out: dict = {}
    th = threading.Thread(target=lambda: out.update(timed_call(fn, *args, **kwargs)), name="oslo-caller")
    th.start()
    return th, out


def test_driver_picks_routable_addresses_from_the_product_property(mesh, oslo):
    topic = "routable"
    transport = oslo.rpc_transport(mesh["A"])
    assert transport.conf.oslo_messaging_amqp.addressing_mode == "dynamic"      # the driver default
    oslo.rpc_server(mesh["A"], topic, "srvA", [EchoEndpoint("srvA")], transport=transport)
    addrs = rpc_addresses(topic, "srvA")
    for a in addrs.values():
        wait_address(mesh.values(), a, ["A"])
    # the controller chose its addresser from the Open frame's properties (product=meshrouter)
    ctrl = transport._driver._ctrl                          # oslo.messaging 14.9.3 internals
    props = ctrl._socket_connection.pyngus_conn.remote_properties
    assert props.get("product") == "meshrouter", props
    assert type(ctrl.addresser).__name__ == "RoutableAddresser"
    known = {k for k in mesh_view(mesh["C"]).addresses if topic in k}
    assert known == set(addrs.values()), f"not (only) routable addresses: {sorted(known)}"
    table = node_state(mesh["A"]).addresses
    assert {kind: table[a]["distribution"] for kind, a in addrs.items()} == \
        {"anycast": "balanced", "unicast": "closest", "multicast": "multicast"}


def test_call_on_a_shared_topic_from_c_is_served_by_a_and_b(mesh, oslo):
    topic = "shared"
    ea, eb = EchoEndpoint("srvA"), EchoEndpoint("srvB")
    oslo.rpc_server(mesh["A"], topic, "srvA", [ea])
    oslo.rpc_server(mesh["B"], topic, "srvB", [eb])
    wait_address(mesh.values(), rpc_addresses(topic)["anycast"], ["A", "B"])
    client = oslo.rpc_client(mesh["C"], topic, timeout=10)
    n = 20
    replies = [client.call({}, "echo", text=f"call-{i}") for i in range(n)]
    assert [r["text"] for r in replies] == [f"call-{i}" for i in range(n)]
    served = Counter(r["server"] for r in replies)
    assert (ea.count("echo"), eb.count("echo")) == (served["srvA"], served["srvB"]), \
        f"a call was executed twice or lost: replies {dict(served)}"
    # balanced: sequential calls rotate over the servers
    assert min(served["srvA"], served["srvB"]) >= n // 4, f"balanced starves a server: {dict(served)}"


def test_call_to_a_specific_server(mesh, oslo):
    topic = "direct"
    ea, eb = EchoEndpoint("srvA"), EchoEndpoint("srvB")
    oslo.rpc_server(mesh["A"], topic, "srvA", [ea])
    oslo.rpc_server(mesh["B"], topic, "srvB", [eb])
    wait_address(mesh.values(), rpc_addresses(topic, "srvB")["unicast"], ["B"])
    client = oslo.rpc_client(mesh["D"], topic, timeout=10).prepare(server="srvB")
    replies = [client.call({}, "echo", text=f"to-b-{i}") for i in range(10)]
    assert {r["server"] for r in replies} == {"srvB"}
    assert eb.args("echo") == [f"to-b-{i}" for i in range(10)] and ea.count("echo") == 0


def test_cast_is_executed_once_by_one_of_the_servers(mesh, oslo):
    topic = "casts"
    ea, eb = EchoEndpoint("srvA"), EchoEndpoint("srvB")
    oslo.rpc_server(mesh["A"], topic, "srvA", [ea])
    oslo.rpc_server(mesh["B"], topic, "srvB", [eb])
    wait_address(mesh.values(), rpc_addresses(topic)["anycast"], ["A", "B"])
    client = oslo.rpc_client(mesh["D"], topic)
    n = 10
    for i in range(n):
        client.cast({}, "note", text=f"cast-{i}")          # pre-settled: returns once sent
    wait_until(lambda: ea.count("note") + eb.count("note") >= n, 10,
               lambda: f"{n} casts executed (A {ea.args('note')}, B {eb.args('note')})")
    time.sleep(0.5)                                       # a duplicate would show up by now
    got = ea.args("note") + eb.args("note")
    assert sorted(got) == sorted(f"cast-{i}" for i in range(n)), got


def test_fanout_cast_reaches_three_servers_on_three_nodes(mesh, oslo):
    topic = "fan"
    eps = {n: EchoEndpoint(f"srv{n}") for n in ("A", "B", "D")}
    for n, ep in eps.items():
        oslo.rpc_server(mesh[n], topic, ep.name, [ep])
    wait_address(mesh.values(), rpc_addresses(topic)["multicast"], eps)
    client = oslo.rpc_client(mesh["C"], topic).prepare(fanout=True)
    n = 5
    for i in range(n):
        client.cast({}, "note", text=f"fan-{i}")
    for ep in eps.values():
        assert ep.wait_count("note", n, 10), f"{ep.name} got {ep.args('note')}"
    time.sleep(0.5)                                       # a duplicate would show up by now
    for ep in eps.values():   # sorted: the threading executor may run two casts out of order
        assert sorted(ep.args("note")) == [f"fan-{i}" for i in range(n)], f"{ep.name}: {ep.args('note')}"


def test_call_without_server_times_out_in_time_and_nothing_is_buffered(mesh, oslo):
    topic = "nobody"
    timeout = 4
    addr = rpc_addresses(topic)["anycast"]
    client = oslo.rpc_client(mesh["C"], topic, timeout=timeout)
    th, out = in_thread(client.call, {}, "echo", text="lost")
    # while the call waits: C holds the driver's sender link with no credit and nothing in flight
    st = wait_until(lambda: (lambda s: s if s.addresses.get(addr, {}).get("producers") else None)(
        node_state(mesh["C"])), timeout - 1, f"the caller's sender link for {addr} at C")
    assert st.addresses[addr] == {"distribution": "balanced", "consumers": 0, "producers": 1,
                                  "ready": False, "remote": []}, st.addresses[addr]
    assert st.in_flight == 0
    th.join(timeout + 5)
    assert not th.is_alive(), "the call hangs past its timeout"
    assert isinstance(out.get("exc"), om.MessagingTimeout), out
    assert timeout - 0.1 <= out["elapsed"] <= timeout + DRIVER_SLACK, out
    # the request was never accepted anywhere: a server that starts now does not get it
    late = EchoEndpoint("late")
    oslo.rpc_server(mesh["A"], topic, "late", [late])
    wait_address(mesh.values(), addr, ["A"])
    assert client.call({}, "echo", text="found")["server"] == "late"
    assert late.args("echo") == ["found"]


def test_exception_raised_by_the_server_reaches_the_caller(mesh, oslo):
    topic = "failing"
    ea = EchoEndpoint("srvA")
    oslo.rpc_server(mesh["A"], topic, "srvA", [ea])
    wait_address(mesh.values(), rpc_addresses(topic)["anycast"], ["A"])
    client = oslo.rpc_client(mesh["D"], topic, timeout=10)
    with pytest.raises(ValueError, match="boom from srvA: bad input") as ei:
        client.call({}, "fail", text="bad input")
    assert "Traceback" in str(ei.value) and "support/oslo.py" in str(ei.value), \
        f"no remote traceback: {ei.value}"                     # rebuilt from the server's failure
    with pytest.raises(om.MessagingException):                  # unknown method: the dispatcher's error
        client.call({}, "no_such_method")
    assert client.call({}, "echo", text="still up")["server"] == "srvA"
    assert ea.args("fail") == ["bad input"]


def test_fifty_concurrent_calls_from_several_callers_are_all_answered(mesh, oslo):
    topic = "busy"
    ea, eb = EchoEndpoint("srvA", delay=0.05), EchoEndpoint("srvB", delay=0.05)
    oslo.rpc_server(mesh["A"], topic, "srvA", [ea])
    oslo.rpc_server(mesh["B"], topic, "srvB", [eb])
    wait_address(mesh.values(), rpc_addresses(topic)["anycast"], ["A", "B"])
    # four caller connections: two on C, one on D, one on B (next to a server)
    clients = [oslo.rpc_client(mesh[n], topic, timeout=15) for n in ("C", "C", "D", "B")]
    n = 50
    start = threading.Barrier(n)

    def one(i: int):
        start.wait(10)
        return timed_call(clients[i % len(clients)].call, {}, "echo", text=f"c{i}")

    t0 = time.monotonic()
    with ThreadPoolExecutor(n, thread_name_prefix="oslo-caller") as pool:
        results = list(pool.map(one, range(n)))
    elapsed = time.monotonic() - t0
    failed = {i: r["exc"] for i, r in enumerate(results) if "exc" in r}
    assert not failed, f"{len(failed)} of {n} calls failed: {failed}"
    assert [r["reply"]["text"] for r in results] == [f"c{i}" for i in range(n)]
    served = Counter(r["reply"]["server"] for r in results)
    assert ea.count("echo") + eb.count("echo") == n and set(served) == {"srvA", "srvB"}, dict(served)
    assert elapsed < n * 0.05, f"calls were not served concurrently ({elapsed:.1f} s)"


def test_server_killed_mid_call_fails_the_call_by_its_timeout(mesh, oslo):
    topic = "victim"
    timeout = 5
    proc = oslo.server_process(mesh["A"], topic, "victim")
    addr = rpc_addresses(topic)["anycast"]
    wait_address(mesh.values(), addr, ["A"])
    client = oslo.rpc_client(mesh["C"], topic, timeout=timeout)
    th, out = in_thread(client.call, {}, "slow", seconds=60)
    proc.expect("busy slow", timeout - 1)                  # the request is inside the endpoint
    proc.kill()
    th.join(timeout + 5)
    assert not th.is_alive(), "the call hangs past its timeout"
    assert isinstance(out.get("exc"), om.MessagingException), out   # MessagingTimeout, or an error
    assert out["elapsed"] <= timeout + DRIVER_SLACK, out
    # the dead server's subscriptions are gone; a new server elsewhere takes the next call
    wait_address(mesh.values(), addr, [])
    eb = EchoEndpoint("srvB")
    oslo.rpc_server(mesh["B"], topic, "srvB", [eb])
    wait_address(mesh.values(), addr, ["B"])
    assert client.call({}, "echo", text="again")["server"] == "srvB"


def test_call_monitor_heartbeats_cross_the_mesh_and_a_killed_server_fails_the_call_early(mesh, oslo):
    """call_monitor_timeout: the server sends empty heartbeat replies every monitor/2 s to the caller's
    dynamic reply address (pre-settled, across the mesh); without them the call fails after the monitor
    timeout instead of the call timeout."""
    topic = "monitored"
    proc = oslo.server_process(mesh["B"], topic, "monitored")
    wait_address(mesh.values(), rpc_addresses(topic)["anycast"], ["B"])
    client = oslo.rpc_client(mesh["D"], topic, timeout=20).prepare(call_monitor_timeout=2)
    r = timed_call(client.call, {}, "slow", seconds=4)          # twice the monitor timeout
    assert r.get("reply") == {"server": "monitored", "slept": 4}, r
    proc.expect("busy slow", 1)
    th, out = in_thread(client.call, {}, "slow", seconds=60)
    proc.expect("busy slow", 5)
    killed = time.monotonic()
    proc.kill()
    th.join(10)
    assert not th.is_alive(), "the call hangs"
    # Either the server had accepted the request before it died (the heartbeats stop: the monitor
    # times the call out), or it still held it unsettled (the mesh returns MODIFIED(delivery-failed):
    # the driver's MessageDeliveryFailure). Both end the call early; which one is a race with the kill.
    assert isinstance(out.get("exc"), om.MessagingTimeout | om.MessageDeliveryFailure), out
    after = out["end"] - killed
    assert after <= 2 + DRIVER_SLACK, f"the call ended {after:.1f} s after the kill"
