"""Broker failures that do not close TCP, and a broker restart in the broker -> mesh direction.

* A broker that goes silent (a relay that stops forwarding, connections left open): the gateway
  notices within about two heartbeats, releases what is unconfirmed and reconnects once the broker
  answers again.
* ``rabbitmqctl stop_app`` / ``start_app`` while the mesh consumes a durable queue: every message is
  consumed by the mesh consumer at least once or is still queued; duplicates are allowed (an ack lost
  with the connection) and counted.
"""

from __future__ import annotations

import subprocess
import time

import pika
import pytest

from tests.support.clients import Client
from tests.support.proxy import TcpProxy
from tests.support.rabbit import RABBIT_PORT, durable_message, gateway_config, rabbitmqctl_unusable
from tests.support.state import gateway_connected, gateway_state
from tests.support.waiting import pump, wait_for

HEARTBEAT = 2


def test_silent_broker_is_dropped_within_two_heartbeats(node_factory, broker):
    addr = broker.name("silent")
    broker.track(queues=(addr,))
    proxy = TcpProxy(RABBIT_PORT)
    try:
        node = node_factory("A", extra=gateway_config(
            {"address": addr, "semantics": "anycast", "direction": "to-broker", "durable": True},
            url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F", heartbeat=HEARTBEAT, confirm_window=50))
        wait_for(lambda: gateway_connected(node), what="gateway connected through the relay")
        snd = Client(node.url).sender(addr)
        snd.wait_credit()
        before = [snd.send(durable_message(f"a{i}")) for i in range(10)]
        wait_for(lambda: all(t.settled for t in before), what="first 10 settled")
        assert {t.outcome for t in before} == {"ACCEPTED"}

        proxy.pause()
        paused = time.monotonic()
        during = [snd.send(durable_message(f"b{i}")) for i in range(10)]     # never confirmed
        wait_for(lambda: not gateway_connected(node), what="the gateway noticing the silence")
        noticed = time.monotonic() - paused
        assert noticed <= 2 * HEARTBEAT + 1.0, f"noticed after {noticed:.1f} s"
        wait_for(lambda: all(t.settled for t in during), what="unconfirmed deliveries settled")
        assert {t.outcome for t in during} == {"RELEASED"}
        st = gateway_state(node)
        assert st["silent"] == 1 and st["unconfirmed"] == 0
        assert sum(1 for ln in node.stderr_tail(500).splitlines() if "silent for" in ln) == 1

        proxy.resume()
        wait_for(lambda: gateway_connected(node), what="gateway reconnected")
        snd2 = Client(node.url).sender(addr)      # a new link: see test_gateway_restart
        snd2.wait_credit()
        after = [snd2.send(durable_message(f"c{i}")) for i in range(10)]
        wait_for(lambda: all(t.settled for t in after), what="10 more settled")
        assert {t.outcome for t in after} == {"ACCEPTED"}
        st = gateway_state(node)
        assert st["reconnects"] == 1 and st["state"] == "connected"
        assert st["url"] == f"amqp://guest@127.0.0.1:{proxy.port}/%2F"          # no password
    finally:
        proxy.close()
    stored = [body.decode() for _props, body in broker.get_all(addr)]
    for name in [f"a{i}" for i in range(10)] + [f"c{i}" for i in range(10)]:
        assert name in stored, f"accepted {name} is not in the queue"


def test_broker_to_mesh_stream_across_a_broker_restart(node_factory, broker):
    why = rabbitmqctl_unusable()
    if why is not None:
        pytest.skip(why)
    addr = broker.name("feed")
    broker.declare_queue(addr, durable=True)
    count = 500
    for i in range(count):
        broker.publish("", addr, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "anycast", "direction": "from-broker", "durable": True},
        heartbeat=HEARTBEAT))
    wait_for(lambda: gateway_connected(node), what="gateway connected")
    rcv = Client(node.url).receiver(addr, credit=5, auto_accept=False)
    restart = None
    unique_at_restart_end = None
    accepted = 0
    next_accept = 0.0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pump(0.005)
        if accepted < len(rcv.received) and time.monotonic() >= next_accept:
            rcv.received[accepted].accept()      # 50 messages a second: the stream outlasts the restart
            accepted += 1
            rcv.flow(1)
            next_accept = time.monotonic() + 0.02
        unique = {bytes(r.body) for r in rcv.received}
        if restart is None and accepted >= 100:
            restart = subprocess.Popen(["sh", "-c", "rabbitmqctl stop_app && rabbitmqctl start_app"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if restart is not None and restart.poll() is not None:
            if unique_at_restart_end is None:
                unique_at_restart_end = len(unique)
            if len(unique) == count:
                break
    assert restart is not None and restart.wait(60) == 0, "rabbitmqctl stop_app / start_app failed"
    assert unique_at_restart_end < count, "the stream ended before the restart: nothing tested"
    got = [bytes(r.body).decode() for r in rcv.received]
    rcv.link.close()
    rcv.client._write()
    wait_for(lambda: gateway_state(node)["inflightToMesh"] == 0, what="nothing in flight to the mesh")
    broker.reconnect()
    queued = [body.decode() for _props, body in broker.get_all(addr)]
    missing = {f"m{i}" for i in range(count)} - set(got) - set(queued)
    duplicates = len(got) - len(set(got))
    print(f"received {len(got)} ({duplicates} duplicates), {len(queued)} still queued, "
          f"{len(missing)} missing")
    assert not missing, f"neither consumed nor queued: {sorted(missing)[:20]}"
    assert gateway_state(node)["connects"] >= 2
