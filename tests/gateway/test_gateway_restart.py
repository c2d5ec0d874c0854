"""A broker restart mid-stream (``rabbitmqctl stop_app`` / ``start_app``) with an audit: every message the
producer sent was accepted and is in the (durable) queue, or came back with a non-accepted outcome.

This stops the shared RabbitMQ application for a few seconds: other clients of the broker see their
connections close (the gateway's own reconnect is what is under test)."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tests.gateway.conftest import gateway_config
from tests.integration.helpers import Client, make_message, pump, wait_for
from tests.integration.test_node_tables import node_state


def _msg(body: str):
    m = make_message(body.encode(), durable=True)
    m.inferred = True           # a data section: the broker holds the plain bytes
    return m


def _rabbitmqctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout)


def _rabbitmqctl_usable() -> str | None:
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed"
    try:
        r = _rabbitmqctl("status", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"rabbitmqctl status failed: {exc}"
    if r.returncode != 0:
        return f"rabbitmqctl status failed (needs root or the Erlang cookie?): {r.stderr.strip()[:200]}"
    return None


def test_broker_restart_mid_stream_loses_no_accepted_message(node_factory, broker):
    why = _rabbitmqctl_usable()
    if why is not None:
        pytest.skip(why)
    addr = broker.name("restart")
    broker.track(queues=(addr,))
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "anycast", "direction": "to-broker", "durable": True},
        heartbeat=2, confirm_window=20))
    wait_for(lambda: node_state(node)["gateway"]["rabbit"]["connected"], what="gateway connected")
    snd = Client(node.url).sender(addr)
    snd.wait_credit()
    trackers = []
    restart = None
    restarted = False
    deadline = time.monotonic() + 25
    i = 0
    while time.monotonic() < deadline:
        if snd.credit > 0 and snd.queued == 0 and not restarted:
            trackers.append(snd.send(_msg(f"r{i}")))
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
        trackers.append(snd2.send(_msg(f"r{i}")))
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
    st = node_state(node)["gateway"]["rabbit"]
    assert st["connects"] >= 2
    broker.reconnect()
    broker.ch.queue_delete(addr)
