"""A broker restart mid-stream (``rabbitmqctl stop_app`` / ``start_app``) with an audit: every message the
producer sent was accepted and is in the (durable) queue, or came back with a non-accepted outcome.

This stops the shared RabbitMQ application for a few seconds: other clients of the broker see their
connections close (the gateway's own reconnect is what is under test)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.support.clients import Client
from tests.support.rabbit import durable_message, gateway_config, rabbitmqctl_unusable
from tests.support.state import gateway_connected, gateway_state
from tests.support.waiting import pump, wait_for


def test_broker_restart_mid_stream_loses_no_accepted_message(node_factory, broker):
    why = rabbitmqctl_unusable()
    if why is not None:
        pytest.skip(why)
    addr = broker.name("restart")
    broker.track(queues=(addr,))
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "anycast", "direction": "to-broker", "durable": True},
        heartbeat=2, confirm_window=20))
    wait_for(lambda: gateway_connected(node), what="gateway connected")
    snd = Client(node.url).sender(addr)
    snd.wait_credit()
    trackers = []
    restart = None
    restarted = False
    deadline = time.monotonic() + 25
    i = 0
    while time.monotonic() < deadline:
        if snd.credit > 0 and snd.queued == 0 and not restarted:
            trackers.append(snd.send(durable_message(f"r{i}")))
            i += 1
        pump(0.01)
        if restart is None and i >= 40:
            restart = subprocess.Popen(["sh", "-c", "rabbitmqctl stop_app && rabbitmqctl start_app"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if restart is not None and not restarted and restart.poll() is not None:
            assert restart.returncode == 0, f"rabbitmqctl failed: {restart.stderr.read()}"
            restarted = True
        if restarted:
            break
    if restart is not None and restart.poll() is None:
        restart.wait(60)
    assert restarted, "the broker did not restart in time"
    wait_for(lambda: all(t.settled for t in trackers), 10, "every sent message settled")
    # after the restart: a new producer link (a drained link gets too little credit back from the node,
    # see the gateway report) sends 30 more through the reconnected gateway
    snd2 = Client(node.url).sender(addr)
    for _ in range(30):
        snd2.wait_credit(timeout=10)
        trackers.append(snd2.send(durable_message(f"r{i}")))
        i += 1
    wait_for(lambda: all(t.settled for t in trackers), 10, "every sent message settled")
    outcomes = {}
    for t in trackers:
        outcomes.setdefault(t.outcome, []).append(t)
    assert set(outcomes) <= {"ACCEPTED", "RELEASED", "MODIFIED"}, outcomes.keys()
    assert all(t.outcome == "ACCEPTED" for t in trackers[-30:]), "after the restart"
    broker.reconnect()
    stored = {body.decode() for _props, body in broker.get_all(addr)}
    accepted = {id(t) for t in outcomes["ACCEPTED"]}
    lost = sorted(f"r{n}" for n, t in enumerate(trackers) if id(t) in accepted and f"r{n}" not in stored)
    assert not lost, f"accepted but not in the queue after the restart: {lost}"
    st = gateway_state(node)
    assert st["connects"] >= 2
    broker.reconnect()
    broker.ch.queue_delete(addr)
