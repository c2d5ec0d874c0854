"""router.rpc through one real node: call, cast, fanout, notify, concurrency, credit, timeouts, errors."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from router.rpc import (
    Notifier,
    Reply,
    Requeue,
    RpcClient,
    RpcConnectionError,
    RpcError,
    RpcException,
    RpcTimeout,
    RpcUndeliverable,
    addresses,
)
from tests.support.clients import DYNAMIC_ADDRESS_RE, Client, make_message
from tests.support.rpc import TIMEOUT
from tests.support.state import node_state
from tests.support.waiting import wait_for

SLACK = 3.0   # seconds a deadline may be overshot on a loaded machine


def echo(body, properties):
    return f"echo: {body}"


def test_call_returns_the_reply_and_its_properties(rpc_node, rpc):
    address = addresses.rpc_anycast("test", "echo")
    rpc.server(rpc_node.url, address, lambda body, props: Reply(f"echo: {body}", {"served-by": "s1",
                                                                                 "saw": props.get("k")}))
    client = rpc.client(rpc_node.url)
    assert re.fullmatch(DYNAMIC_ADDRESS_RE.format(node="A"), client.reply_to)
    assert client.call(address, "hello") == "echo: hello"
    reply = client.request(address, {"n": 1}, properties={"k": "v"})
    assert reply.body == "echo: {'n': 1}"
    assert reply.properties == {"served-by": "s1", "saw": "v"}
    assert ":" in str(reply.correlation_id)          # the request's message-id, <client prefix>:<n>
    stats = client.stats()
    assert stats["replies"] == 2 and stats["waiting"] == 0 and stats["calls_in_flight"] == 0


def test_cast_returns_once_the_server_has_handled_it(rpc_node, rpc):
    seen = []
    rpc.server(rpc_node.url, "balanced/cast", lambda body, props: seen.append(body))
    client = rpc.client(rpc_node.url)
    for i in range(5):
        client.cast("balanced/cast", i)
        assert seen[-1] == i          # accepted only after the handler ran
    assert seen == [0, 1, 2, 3, 4]


def test_cast_whose_handler_raises_is_still_accepted(rpc_node, rpc):
    def boom(body, props):
        raise RuntimeError("cast failed")

    server = rpc.server(rpc_node.url, "balanced/cast-boom", boom)
    rpc.client(rpc_node.url).cast("balanced/cast-boom", "x")
    assert server.failed == 1


def test_fanout_reaches_every_server(rpc_node, rpc):
    address = addresses.rpc_multicast("test", "fan")
    got: dict[str, list] = {name: [] for name in ("s1", "s2", "s3")}
    for name, bucket in got.items():
        rpc.server(rpc_node.url, address, lambda body, props, b=bucket: b.append(body), name=name)
    client = rpc.client(rpc_node.url)
    client.fanout(address, "to all")
    client.fanout(address, "again")
    wait_for(lambda: all(len(b) == 2 for b in got.values()), what="both fanouts at all three servers")
    assert all(b == ["to all", "again"] for b in got.values())


def test_notifications_reach_a_listener(rpc_node, rpc):
    base = addresses.notify("test", "notifications")
    received = []
    rpc.listener(rpc_node.url, f"{base}.info", received.append)
    rpc.listener(rpc_node.url, f"{base}.error", received.append)
    client = rpc.client(rpc_node.url)
    notifier = Notifier(client, base, publisher_id="compute.host1", timeout=TIMEOUT)
    notifier.info("compute.instance.create.end", {"id": 42})
    notifier.error("compute.instance.delete.error", {"id": 7, "why": "disk"})
    wait_for(lambda: len(received) == 2, what="two notifications")
    by_priority = {n.priority: n for n in received}
    assert by_priority["info"].event_type == "compute.instance.create.end"
    assert by_priority["info"].payload == {"id": 42}
    assert by_priority["info"].publisher_id == "compute.host1"
    assert by_priority["error"].payload == {"id": 7, "why": "disk"}
    client.notify(f"{base}.info", "plain.event", [1, 2], timeout=TIMEOUT)
    wait_for(lambda: len(received) == 3, what="third notification")
    assert received[-1].event_type == "plain.event"


def test_notification_without_listener_times_out(rpc_node, rpc):
    client = rpc.client(rpc_node.url)
    started = time.monotonic()
    with pytest.raises(RpcTimeout, match="no credit"):
        client.notify(addresses.notify("test", "nobody", "info"), "x", {}, timeout=1.0)
    assert time.monotonic() - started < 1.0 + SLACK


def test_concurrent_calls_from_eight_threads_are_demultiplexed(rpc_node, rpc):
    def slow_echo(body, props):
        time.sleep((body["i"] % 3) * 0.002)      # replies come back out of order
        return {"thread": body["thread"], "i": body["i"], "tag": props["tag"]}

    rpc.server(rpc_node.url, "balanced/conc", slow_echo, workers=4)
    client = rpc.client(rpc_node.url)

    def caller(thread: int) -> list:
        out = []
        for i in range(25):
            out.append(client.call("balanced/conc", {"thread": thread, "i": i},
                                   properties={"tag": f"{thread}-{i}"}))
        return out

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(caller, range(8)))
    for thread, replies in enumerate(results):
        assert replies == [{"thread": thread, "i": i, "tag": f"{thread}-{i}"} for i in range(25)]
    stats = client.stats()
    assert stats["replies"] == 200 and stats["late_replies"] == 0 and stats["waiting"] == 0


def test_direct_and_queued_sends_from_many_threads_stay_consistent(rpc_node, rpc):
    """Caller threads and server workers send on the loop's connection themselves when the loop is idle
    (EventLoop.call_soon), else through its queue. 16 callers mixing calls and casts on one client, 8
    server workers: every reply reaches its own caller, every cast is handled once and in each thread's
    order, both paths were taken, and nothing is left in flight or unsettled afterwards."""
    seen: dict[int, list[int]] = {}
    seen_lock = threading.Lock()

    def note(body, props):
        with seen_lock:
            seen.setdefault(body["thread"], []).append(body["seq"])

    rpc.server(rpc_node.url, "balanced/stress", lambda body, props: [body, props["k"]], workers=8)
    sink = rpc.server(rpc_node.url, "balanced/stress-casts", note, workers=8)
    client = rpc.client(rpc_node.url)
    client.call("balanced/stress", 0, properties={"k": 0})
    loop = client._loop
    counts = {"call_soon": 0, "queued": 0}
    real_call_soon, real_submit = loop.call_soon, loop.submit

    count_lock = threading.Lock()

    def call_soon(fn):
        with count_lock:
            counts["call_soon"] += 1
        return real_call_soon(fn)

    def submit(fn):
        with count_lock:
            counts["queued"] += 1
        return real_submit(fn)

    loop.call_soon, loop.submit = call_soon, submit

    def caller(thread: int) -> list:
        bad = []
        for i in range(120):
            if i % 4 == 3:
                client.cast("balanced/stress-casts", {"thread": thread, "seq": i})
                continue
            body = {"thread": thread, "i": i, "pad": "p" * (i % 7) * 50}
            reply = client.call("balanced/stress", body, properties={"k": f"{thread}.{i}"})
            if reply != [body, f"{thread}.{i}"]:
                bad.append((body, reply))
        return bad

    with ThreadPoolExecutor(16) as pool:
        assert all(not bad for bad in pool.map(caller, range(16)))
    loop.call_soon, loop.submit = real_call_soon, real_submit
    assert seen == {t: list(range(3, 120, 4)) for t in range(16)}       # once each, in each thread's order
    assert counts["call_soon"] == 16 * 120
    assert 0 < counts["queued"] < counts["call_soon"], counts        # both the direct and the queued path
    wait_for(lambda: client.stats()["unsettled"] == 0, what="every request settled")
    stats = client.stats()
    assert (stats["calls_in_flight"], stats["waiting"], stats["queued"]) == (0, 0, 0)
    assert stats["late_replies"] == 0
    assert stats["replies"] == 1 + 16 * 90
    wait_for(lambda: sink.stats()["accepted"] == 16 * 30, what="every cast accepted")


def test_call_without_server_times_out_and_nothing_stays_buffered(rpc_node, rpc):
    client = rpc.client(rpc_node.url)
    started = time.monotonic()
    with pytest.raises(RpcTimeout, match="not sent"):
        client.call("balanced/nobody", "lost?", timeout=1.5)
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 1.5 + SLACK
    stats = client.stats()
    assert stats["queued"] == 0 and stats["unsettled"] == 0 and stats["waiting"] == 0
    assert node_state(rpc_node).in_flight == 0
    # a server arriving later gets nothing stale, and the next call works
    seen = []
    rpc.server(rpc_node.url, "balanced/nobody", lambda body, props: seen.append(body) or "here")
    assert client.call("balanced/nobody", "now") == "here"
    time.sleep(0.5)
    assert seen == ["now"]


def test_call_with_reply_timeout(rpc_node, rpc):
    release = threading.Event()
    rpc.server(rpc_node.url, "balanced/slow", lambda body, props: release.wait(10) and "late")
    client = rpc.client(rpc_node.url)
    started = time.monotonic()
    with pytest.raises(RpcTimeout, match="no reply"):
        client.call("balanced/slow", "x", timeout=1.0)
    assert time.monotonic() - started < 1.0 + SLACK
    release.set()
    time.sleep(0.3)          # the late reply arrives and is dropped
    wait_for(lambda: client.stats()["late_replies"] == 1, what="late reply counted")


def test_remote_exception_becomes_rpc_error(rpc_node, rpc):
    def handler(body, props):
        if body == "bad":
            raise ValueError("bad input: 'bad'")
        return "fine"

    rpc.server(rpc_node.url, "balanced/err", handler)
    client = rpc.client(rpc_node.url)
    with pytest.raises(RpcError) as info:
        client.call("balanced/err", "bad")
    assert info.value.exc_type == "ValueError"
    assert info.value.remote_message == "bad input: 'bad'"
    assert client.call("balanced/err", "good") == "fine"


def test_unencodable_result_becomes_rpc_error(rpc_node, rpc):
    rpc.server(rpc_node.url, "balanced/obj", lambda body, props: object())
    with pytest.raises(RpcError) as info:
        rpc.client(rpc_node.url).call("balanced/obj", "x")
    assert info.value.exc_type == "TypeError"


def test_server_credit_window_bounds_requests_held(rpc_node, rpc):
    gate = threading.Event()
    server = rpc.server(rpc_node.url, "balanced/window", lambda body, props: gate.wait(20) and body,
                        credit=10, workers=16)
    client = rpc.client(rpc_node.url)
    assert client.stats()["reply_credit"] == 200
    with ThreadPoolExecutor(15) as pool:
        futures = [pool.submit(client.call, "balanced/window", i, 20.0) for i in range(15)]
        wait_for(lambda: server.stats()["in_progress"] == 10, what="10 requests held by the server")
        time.sleep(0.5)
        stats = server.stats()
        assert stats["in_progress"] == 10 and stats["received"] == 10 and stats["credit"] == 0
        cs = client.stats()      # the other 5: at the caller or held by the router (link_capacity credit)
        assert cs["queued"] + cs["unsettled"] == 15 and cs["replies"] == 0
        gate.set()
        assert sorted(f.result(20) for f in futures) == list(range(15))
    assert server.stats()["credit_blocked"] >= 1


def test_reply_credit_is_refilled(rpc_node, rpc):
    rpc.server(rpc_node.url, "balanced/many", lambda body, props: body, workers=0)
    client = rpc.client(rpc_node.url, reply_credit=20)
    for i in range(60):
        assert client.call("balanced/many", i) == i
    credit = client.stats()["reply_credit"]
    assert 10 <= credit <= 20


def test_released_first_delivery_is_retried(rpc_node, rpc):
    """A consumer that releases the first delivery: the caller re-sends and the call succeeds."""
    raw = Client(rpc_node.url)
    requests = raw.receiver("balanced/picky", credit=5, auto_accept=False)
    replies = raw.sender(None)
    client = rpc.client(rpc_node.url)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.call, "balanced/picky", "try me", TIMEOUT)
        first = requests.wait_messages(1)[0]
        first.release()
        second = requests.wait_messages(2)[1]
        assert second.message.id == first.message.id and second.body == "try me"
        replies.send(make_message("second time lucky", address=second.message.reply_to,
                                  correlation_id=second.message.id))
        second.accept()
        wait_for(lambda: future.done(), what="call completed")
        assert future.result() == "second time lucky"
    assert client.stats()["retries"] == 1


def test_requeue_from_a_handler_is_retried(rpc_node, rpc):
    attempts = []

    def flaky(body, props):
        attempts.append(body)
        if len(attempts) == 1:
            raise Requeue()
        return "ok"

    server = rpc.server(rpc_node.url, "balanced/requeue", flaky)
    assert rpc.client(rpc_node.url).call("balanced/requeue", "x") == "ok"
    assert attempts == ["x", "x"] and server.stats()["released"] == 1


def test_modified_delivery_failed_is_not_resent_unless_asked(rpc_node, rpc):
    raw = Client(rpc_node.url)
    requests = raw.receiver("balanced/modify", credit=5, auto_accept=False)
    replies = raw.sender(None)
    client = rpc.client(rpc_node.url)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.call, "balanced/modify", "once", TIMEOUT)
        requests.wait_messages(1)[0].modify(failed=True)
        wait_for(lambda: future.done(), what="call failed")
        with pytest.raises(RpcUndeliverable) as info:
            future.result()
        assert info.value.outcome == "MODIFIED"
        time.sleep(0.3)
        assert len(requests.received) == 1                       # not re-sent
        # at-least-once: the caller asked for the re-send
        future = pool.submit(client.call, "balanced/modify", "again", TIMEOUT, None, True)
        requests.wait_messages(2)[1].modify(failed=True)
        third = requests.wait_messages(3)[2]
        replies.send(make_message("done", address=third.message.reply_to, correlation_id=third.message.id))
        third.accept()
        wait_for(lambda: future.done(), what="call completed")
        assert future.result() == "done"


def test_rejected_request_raises_undeliverable(rpc_node, rpc):
    raw = Client(rpc_node.url)
    requests = raw.receiver("balanced/reject", credit=5, auto_accept=False)
    client = rpc.client(rpc_node.url)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.cast, "balanced/reject", "no thanks", TIMEOUT)
        requests.wait_messages(1)[0].reject("app:refused", "not today")
        wait_for(lambda: future.done(), what="cast answered")
    with pytest.raises(RpcUndeliverable) as info:
        future.result()
    assert info.value.outcome == "REJECTED" and info.value.condition == "app:refused"
    assert "not today" in str(info.value)


def test_server_stopped_mid_call(rpc_node, rpc):
    started_handling = threading.Event()
    never = threading.Event()

    def stuck(body, props):
        started_handling.set()
        never.wait(30)
        return "too late"

    server = rpc.server(rpc_node.url, "balanced/stuck", stuck)
    client = rpc.client(rpc_node.url)
    timeout = 8.0
    with ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        future = pool.submit(client.call, "balanced/stuck", "x", timeout)
        assert started_handling.wait(TIMEOUT)
        server.stop(timeout=0.2)
        with pytest.raises(RpcException) as info:
            future.result(timeout + SLACK)
    never.set()
    assert time.monotonic() - t0 < timeout + SLACK
    # the request had reached the handler: the router reports MODIFIED(delivery-failed), not re-sent
    assert isinstance(info.value, RpcUndeliverable) and info.value.outcome == "MODIFIED"


def test_stopping_server_releases_queued_requests_to_another_server(rpc_node, rpc):
    gate = threading.Event()
    first_running = threading.Event()

    def slow(body, props):
        first_running.set()
        gate.wait(10)
        return "slow"

    slow_server = rpc.server(rpc_node.url, "balanced/handover", slow, workers=1)
    client = rpc.client(rpc_node.url)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(client.call, "balanced/handover", i, TIMEOUT) for i in range(3)]
        assert first_running.wait(TIMEOUT)
        wait_for(lambda: slow_server.stats()["in_progress"] == 3, what="3 requests at the slow server")
        rpc.server(rpc_node.url, "balanced/handover", lambda body, props: "fast")
        threading.Timer(0.5, gate.set).start()
        slow_server.stop(timeout=5.0)    # the running one finishes; the two waiting are released
        results = sorted(f.result(TIMEOUT) for f in futures)
    assert results == ["fast", "fast", "slow"]
    assert slow_server.stats()["released"] == 2


def test_close_fails_pending_calls(rpc_node, rpc):
    gate = threading.Event()
    rpc.server(rpc_node.url, "balanced/hold", lambda body, props: gate.wait(10) and "x")
    client = RpcClient(rpc_node.url, timeout=TIMEOUT)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.call, "balanced/hold", "x")
        time.sleep(0.5)
        client.close()
        with pytest.raises(RpcConnectionError):
            future.result(5)
    gate.set()
    with pytest.raises(RpcConnectionError):
        client.call("balanced/hold", "after close")


def test_connection_refused(rpc_node):
    port = rpc_node.port
    started = time.monotonic()
    with pytest.raises(RpcConnectionError):
        RpcClient(f"amqp://127.0.0.1:{port + 1 if port < 65535 else 1}", connect_timeout=5)
    assert time.monotonic() - started < 5 + SLACK


def test_node_dying_fails_calls_with_connection_error(rpc_node, rpc):
    gate = threading.Event()
    rpc.server(rpc_node.url, "balanced/die", lambda body, props: gate.wait(10) and "x")
    client = rpc.client(rpc_node.url)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.call, "balanced/die", "x", TIMEOUT)
        time.sleep(0.5)
        rpc_node.stopped = True          # killed on purpose: not a test failure
        rpc_node.proc.kill()
        with pytest.raises(RpcConnectionError):
            future.result(TIMEOUT)
    gate.set()
    assert not client.connected


def test_idle_client_and_server_keep_their_connections_with_heartbeats(node_factory, rpc):
    """The node drops a connection that says nothing for its idle timeout (here 1 s); router.rpc drives
    Proton's idle-timeout ticks itself, so an idle client and server stay connected."""
    from tests.support.nodes import MESH_RULES

    node = node_factory("A", rules=MESH_RULES, idle_timeout=1)
    rpc.server(node.url, "balanced/idle", echo)
    client = rpc.client(node.url)
    assert client.call("balanced/idle", "before") == "echo: before"
    time.sleep(3.5)
    assert client.connected
    assert client.call("balanced/idle", "after") == "echo: after"
