"""Connection establishment: identity, properties, SASL, idle timeout."""

from __future__ import annotations

import socket
import time

from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

import router
from tests.support.clients import ACCEPTED, Client
from tests.support.raw_amqp import CLOSE, OPEN, RawConn
from tests.support.waiting import pump_for


def _roundtrip(client: Client, address: str = "balanced/open-check") -> None:
    rcv = client.receiver(address, credit=5)
    snd = client.sender(address)
    snd.wait_credit()
    tr = snd.send("ping").wait()
    assert tr.state == ACCEPTED, tr
    assert rcv.wait_messages(1)[0].body == "ping"


def test_container_id_is_node_id(node):
    c = Client(node.url)
    assert c.remote_container == node.node_id


def test_connection_properties_product_and_version(node):
    c = Client(node.url)
    props = c.remote_properties
    assert props, "no connection properties in the node's OPEN"
    props = {str(k): v for k, v in props.items()}
    assert props.get("product") == router.PRODUCT == "meshrouter"
    assert props.get("version") == router.__version__


def test_offers_anonymous_relay(node):
    c = Client(node.url)
    caps = [str(x) for x in c.remote_offered_capabilities]
    assert "ANONYMOUS-RELAY" in caps, caps


def test_sasl_anonymous(node):
    c = Client(node.url, sasl=True)
    assert c.remote_open
    _roundtrip(c, "balanced/sasl")


def test_no_sasl(node):
    c = Client(node.url, sasl=False)
    assert c.remote_open
    _roundtrip(c, "balanced/nosasl")


def test_blocking_connection_default_sasl(node):
    """A stock proton.utils.BlockingConnection (Container defaults: SASL, allow insecure mechs).
    The sender is at-most-once: BlockingSender.send would otherwise wait for an outcome that the
    blocking receiver only gives after receive()."""

    conn = BlockingConnection(node.url, timeout=10)
    try:
        rcv = conn.create_receiver("balanced/blocking", credit=1)
        snd = conn.create_sender("balanced/blocking", options=AtMostOnce())
        snd.send(Message(body="hello"), timeout=10)
        m = rcv.receive(timeout=10)
        assert m.body == "hello"
    finally:
        conn.close()


def test_blocking_connection_without_sasl(node):

    conn = BlockingConnection(node.url, timeout=10, sasl_enabled=False)
    try:
        rcv = conn.create_receiver("balanced/blocking-nosasl", credit=1)
        snd = conn.create_sender("balanced/blocking-nosasl", options=AtMostOnce())
        snd.send(Message(body="hello"), timeout=10)
        assert rcv.receive(timeout=10).body == "hello"
    finally:
        conn.close()


def test_silent_connection_is_dropped_after_idle_timeout(node_factory):
    n = node_factory(idle_timeout=2)
    raw = RawConn(n.url)
    start = time.monotonic()
    opened = raw.open()               # advertises no idle timeout of its own, then says nothing
    assert opened.code == OPEN
    raw.wait_eof(timeout=8)
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed <= 5.0, f"silent connection dropped after {elapsed:.2f}s (idle_timeout 2 s)"
    assert n.alive()


def test_node_advertises_idle_timeout(node_factory):
    n = node_factory(idle_timeout=2)
    raw = RawConn(n.url)
    opened = raw.open()
    idle_ms = opened.field(4)
    assert idle_ms is not None and 0 < idle_ms <= 2000, f"OPEN idle-time-out {idle_ms!r}"


def test_idle_client_with_heartbeats_stays_connected(node_factory):
    """Node idle_timeout 2 s, client idle timeout 2 s, 6 s without traffic: the client heartbeats as
    the node's OPEN asks and the node heartbeats as the client's OPEN asks; nobody drops."""
    n = node_factory(idle_timeout=2)
    c = Client(n.url, idle_timeout=2)
    rcv = c.receiver("balanced/heartbeat", credit=5)
    snd = c.sender("balanced/heartbeat")
    snd.wait_credit()
    pump_for(6.0)                      # idle: only heartbeats (empty frames) on the wire
    assert c.remote_open and not c.transport_closed, \
        f"connection lost while idle: {c.error or c.remote_condition} " \
        "(local-idle-timeout expired = the node sent no heartbeats)"
    tr = snd.send("after idle").wait()
    assert tr.state == ACCEPTED
    assert rcv.wait_messages(1)[0].body == "after idle"


def test_clean_close_then_end_of_output_gets_a_plain_close(node):
    """A client that sends CLOSE and shuts its side at once gets CLOSE without an error condition."""
    raw = RawConn(node.url)
    raw.open()
    raw.close_amqp()
    raw.sock.shutdown(socket.SHUT_WR)
    closed = raw.expect(CLOSE)
    assert closed.field(0) is None, f"CLOSE carried an error: {closed.fields}"
