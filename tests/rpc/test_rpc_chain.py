"""router.rpc across the 3-node chain A <- B <- C (tests/support/meshes.py's ``chain``):
callers on C, servers on A (two inter-router hops) unless said otherwise."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from router.rpc import Notifier, Reply, RpcException, RpcTimeout, RpcUndeliverable
from tests.support.nodes import REPO_ROOT
from tests.support.rpc import TIMEOUT
from tests.support.state import mesh_view
from tests.support.waiting import wait_for

SLACK = 3.0


def served_by(name):
    return lambda body, props: Reply(f"{name}: {body}", {"served-by": name})


def test_call_and_cast_across_two_hops(chain3, rpc):
    a, b, c = chain3
    seen = []
    rpc.server(a.url, "balanced/chain/echo", lambda body, props: seen.append(body) or f"echo: {body}")
    client = rpc.client(c.url)
    assert client.reply_to.startswith("amqp:/_topo/0/C/")
    assert client.call("balanced/chain/echo", "over the hops") == "echo: over the hops"
    client.cast("balanced/chain/echo", "cast over the hops")
    assert seen == ["over the hops", "cast over the hops"]
    assert client.call("balanced/chain/echo", {"k": [1, 2]}) == "echo: {'k': [1, 2]}"


def test_fanout_reaches_a_server_on_every_node(chain3, rpc):
    nodes = chain3
    got: dict[str, list] = {}
    for n in nodes:
        got[n.node_id] = []
        bucket = got[n.node_id]
        rpc.server(n.url, "multicast/chain/fan", lambda body, props, bucket=bucket: bucket.append(body))
    wait_for(lambda: sorted(mesh_view(nodes[2]).addresses.get("multicast/chain/fan", [])) == ["A", "B"],
             what="fanout address known at C from A and B")
    client = rpc.client(nodes[2].url)
    client.fanout("multicast/chain/fan", "everyone")
    wait_for(lambda: all(got[n] == ["everyone"] for n in got), what=lambda: f"one copy per server: {got}")
    time.sleep(0.3)
    assert all(got[n] == ["everyone"] for n in got)       # exactly one copy each


def test_notifications_across_the_chain(chain3, rpc):
    a, b, c = chain3
    received = []
    rpc.listener(a.url, "balanced/chain/notify.info", received.append)
    rpc.listener(b.url, "balanced/chain/notify.error", received.append)
    notifier = Notifier(rpc.client(c.url), "balanced/chain/notify", publisher_id="svc.c", timeout=TIMEOUT)
    notifier.info("thing.created", {"id": 1})
    notifier.error("thing.failed", {"id": 2})
    wait_for(lambda: len(received) == 2, what="two notifications")
    assert {(n.priority, n.event_type, n.publisher_id) for n in received} == \
        {("info", "thing.created", "svc.c"), ("error", "thing.failed", "svc.c")}


def test_concurrent_calls_from_eight_threads_across_the_chain(chain3, rpc):
    a, b, c = chain3
    rpc.server(a.url, "balanced/chain/conc", lambda body, props: body, workers=4)
    rpc.server(b.url, "balanced/chain/conc", lambda body, props: body, workers=4)
    client = rpc.client(c.url)

    def caller(thread: int) -> list:
        return [client.call("balanced/chain/conc", [thread, i]) for i in range(15)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(caller, range(8)))
    assert results == [[[t, i] for i in range(15)] for t in range(8)]
    assert client.stats()["late_replies"] == 0


def test_call_without_server_times_out_across_the_chain(chain3, rpc):
    a, b, c = chain3
    client = rpc.client(c.url)
    started = time.monotonic()
    with pytest.raises(RpcTimeout, match="not sent"):
        client.call("balanced/chain/nobody", "x", timeout=1.5)
    assert time.monotonic() - started < 1.5 + SLACK
    stats = client.stats()
    assert stats["queued"] == 0 and stats["unsettled"] == 0


def test_server_stopped_mid_call_across_the_chain(chain3, rpc):
    a, b, c = chain3
    handling = threading.Event()
    never = threading.Event()

    def stuck(body, props):
        handling.set()
        never.wait(30)

    server = rpc.server(a.url, "balanced/chain/stuck", stuck)
    client = rpc.client(c.url)
    timeout = 8.0
    with ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        future = pool.submit(client.call, "balanced/chain/stuck", "x", timeout)
        assert handling.wait(TIMEOUT)
        server.stop(timeout=0.2)
        with pytest.raises(RpcException) as info:
            future.result(timeout + SLACK)
    never.set()
    assert time.monotonic() - t0 < timeout + SLACK
    assert isinstance(info.value, RpcUndeliverable) and info.value.outcome == "MODIFIED"


SERVER_SCRIPT = """
import sys, time
from router.rpc import RpcServer

def handler(body, props):
    print("handling", flush=True)
    time.sleep(60)

server = RpcServer(sys.argv[1], sys.argv[2], handler)
print("ready", flush=True)
time.sleep(120)
"""


def test_server_process_killed_mid_call(chain3, rpc):
    """A server process SIGKILLed while handling a call: the caller two hops away gets an error well
    before its timeout (MODIFIED(delivery-failed) travels back hop by hop), never a hang."""
    a, b, c = chain3
    proc = subprocess.Popen([sys.executable, "-c", SERVER_SCRIPT, a.url, "balanced/chain/killed"],
                            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert proc.stdout.readline().strip() == "ready"
        client = rpc.client(c.url)
        timeout = 10.0
        with ThreadPoolExecutor(1) as pool:
            t0 = time.monotonic()
            future = pool.submit(client.call, "balanced/chain/killed", "x", timeout)
            assert proc.stdout.readline().strip() == "handling"
            proc.kill()
            with pytest.raises(RpcException) as info:
                future.result(timeout + SLACK)
        assert time.monotonic() - t0 < timeout
        assert isinstance(info.value, RpcUndeliverable) and info.value.outcome == "MODIFIED"
    finally:
        proc.kill()
        proc.wait(5)


def test_released_request_is_retried_to_another_server(chain3, rpc):
    """A server on A that requeues everything (RELEASED) and one on B that serves: the caller's re-sends
    end up at B."""
    from router.rpc import Requeue

    a, b, c = chain3

    def requeue(body, props):
        raise Requeue()

    rpc.server(a.url, "balanced/chain/retry", requeue)
    rpc.server(b.url, "balanced/chain/retry", served_by("B"))
    wait_for(lambda: sorted(mesh_view(c).addresses.get("balanced/chain/retry", [])) == ["A", "B"],
             what="both servers known at C")
    client = rpc.client(c.url)
    for i in range(4):
        assert client.call("balanced/chain/retry", i) == f"B: {i}"
