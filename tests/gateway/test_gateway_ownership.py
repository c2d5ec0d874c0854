"""Limits across addresses and nodes: the confirm window is the broker's, and a ``direction: both``
address is bridged by one node only (a lock queue in the broker), with take-over when it goes."""

from __future__ import annotations

import signal

from tests.support.clients import Client, make_message
from tests.support.meshes import converged, mesh_node
from tests.support.nodes import DEFAULT_RULES
from tests.support.ports import inter_router_port
from tests.support.rabbit import gateway_config
from tests.support.state import gateway_connected, gateway_state
from tests.support.waiting import assert_stays, wait_for


def test_confirm_window_is_per_broker(node_factory, broker):
    """Two addresses on one broker, window 8: never more than 8 unconfirmed on the channel, and each
    address alone may use all of it."""
    a1, a2 = broker.name("w1"), broker.name("w2")
    broker.track(queues=(a1, a2))
    node = node_factory("A", extra=gateway_config(
        {"address": a1, "semantics": "anycast", "direction": "to-broker", "durable": False},
        {"address": a2, "semantics": "anycast", "direction": "to-broker", "durable": False},
        confirm_window=8))
    wait_for(lambda: gateway_connected(node), what="gateway connected")
    # one address alone: its link gets the whole window
    s1 = Client(node.url).sender(a1)
    s1.wait_credit()
    solo = [s1.send(make_message(f"solo{i}")) for i in range(40)]
    wait_for(lambda: all(t.settled for t in solo), what="40 settled")
    assert {t.outcome for t in solo} == {"ACCEPTED"}
    assert gateway_state(node)["peakUnconfirmed"] == 8
    # both at once: they share it
    s2 = Client(node.url).sender(a2)
    s2.wait_credit()
    both = [s.send(make_message(f"{s.name}-{i}")) for i in range(150) for s in (s1, s2)]
    wait_for(lambda: all(t.settled for t in both), what="300 settled")
    assert {t.outcome for t in both} == {"ACCEPTED"}
    st = gateway_state(node)
    assert st["peakUnconfirmed"] == 8, st
    assert st["unconfirmed"] == st["waiting"] == 0
    assert broker.depth(a1) == 190 and broker.depth(a2) == 150


def test_both_is_bridged_by_one_node_and_taken_over(node_factory, broker):
    """A and B both configure the same `both` address: A (first) bridges it, B stands by with a clear
    error; messages are stored once and delivered once (no flapping); when A stops, B takes over."""
    addr = broker.name("shared")
    broker.track(queues=(addr,))
    gw = gateway_config({"address": addr, "semantics": "anycast", "direction": "both", "durable": False})
    a = mesh_node(node_factory, "A", listen=True, rules=DEFAULT_RULES, sections=gw)
    wait_for(lambda: gateway_state(a)["linkCount"] == 2, what="A bridging (both links attached)")
    b = mesh_node(node_factory, "B", connect=[(inter_router_port(a), 1)], rules=DEFAULT_RULES, sections=gw)
    wait_for(lambda: converged([a, b]), what="A and B converged")
    wait_for(lambda: gateway_state(b)["standby"] == [addr], what="B standing by")
    assert gateway_state(b)["linkCount"] == 0 and gateway_state(a)["standby"] == []
    errors = [ln for ln in b.stderr_tail(500).splitlines() if "already bridged by another node" in ln]
    assert len(errors) == 1 and addr in errors[0] and "bridge-lock" in errors[0]

    prod = Client(b.url).sender(addr)
    prod.wait_credit()
    trackers = [prod.send(make_message(f"s{i}")) for i in range(40)]
    wait_for(lambda: all(t.settled for t in trackers), what="40 settled")
    assert {t.outcome for t in trackers} == {"ACCEPTED"}
    # stored once, and nothing goes round between the mesh and the broker
    assert_stays(lambda: broker.depth(addr) == 40, 1.0, "40 messages stored")
    assert gateway_state(a)["published"] == 40 and gateway_state(a)["consumed"] == 0
    assert gateway_state(b)["published"] == 0

    listener = Client(b.url).receiver(addr, credit=100)
    listener.wait_messages(40)
    assert_stays(lambda: len(listener.received) == 40, 1.0, "no duplicates")
    assert sorted(listener.bodies) == sorted(f"s{i}" for i in range(40))
    wait_for(lambda: broker.depth(addr) == 0, what="queue drained")
    listener.link.close()
    listener.client._write()

    a.proc.send_signal(signal.SIGTERM)          # the lock goes with A's broker connection
    a.proc.wait(10)
    a.stopped = True
    wait_for(lambda: gateway_state(b)["standby"] == [] and gateway_state(b)["linkCount"] == 2,
             what="B bridging after A left")
    assert any("now bridged by this node" in ln for ln in b.stderr_tail(500).splitlines())
    prod2 = Client(b.url).sender(addr)
    prod2.wait_credit()
    assert prod2.send(make_message("after")).wait().outcome == "ACCEPTED"
    assert broker.depth(addr) == 1
