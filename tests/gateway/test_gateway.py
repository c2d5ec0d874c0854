"""The AMQP 0-9-1 gateway against the real RabbitMQ: real node processes, python-qpid-proton clients,
pika for checks on the broker side. Each test uses its own queue / exchange names (conftest.Broker)."""

from __future__ import annotations

import uuid

import pika
from proton import Message, symbol

from tests.support.clients import Client, make_message
from tests.support.management import Requester
from tests.support.meshes import converged, mesh_node
from tests.support.nodes import DEFAULT_RULES
from tests.support.ports import inter_router_port
from tests.support.rabbit import gateway_config
from tests.support.state import gateway_connected, gateway_state
from tests.support.telemetry import deliveries
from tests.support.waiting import assert_stays, wait_for


def wait_connected(node) -> None:
    wait_for(lambda: gateway_connected(node), what="gateway connected to RabbitMQ")


def test_notifications_stored_while_no_listener_then_delivered_across_the_mesh(node_factory, broker):
    """Producer on B, gateway on A: with no listener the broker stores them; a listener on B gets all."""
    addr = broker.name("notify.info")
    broker.track(queues=(addr,))
    extra = gateway_config({"address": addr, "semantics": "anycast", "direction": "both", "durable": True})
    a = mesh_node(node_factory, "A", listen=True, rules=DEFAULT_RULES, sections=extra)
    b = mesh_node(node_factory, "B", connect=[(inter_router_port(a), 1)], rules=DEFAULT_RULES)
    wait_for(lambda: converged([a, b]), what="A and B converged")
    wait_connected(a)
    prod = Client(b.url).sender(addr)
    prod.wait_credit()
    trackers = [prod.send(make_message(f"n{i}", properties={"i": i})) for i in range(30)]
    for t in trackers:
        t.wait()
    assert {t.outcome for t in trackers} == {"ACCEPTED"}
    assert broker.depth(addr) == 30
    listener = Client(b.url).receiver(addr, credit=50)
    got = listener.wait_messages(30, timeout=10)
    assert sorted(m.body for m in got) == sorted(f"n{i}" for i in range(30))
    assert sorted(m.message.properties["i"] for m in got) == list(range(30))
    wait_for(lambda: broker.depth(addr) == 0 and gateway_state(a)["acked"] == 30, what="queue drained, acked")


def test_fanout_to_three_consumers_and_return_when_nothing_is_bound(node_factory, broker):
    fan = f"multicast/{broker.prefix}/fan"
    orphan = f"multicast/{broker.prefix}/orphan"
    broker.track(queues=(f"{fan}.A",), exchanges=(fan, orphan))
    node = node_factory("A", extra=gateway_config(
        {"address": fan, "semantics": "multicast", "direction": "from-broker", "durable": False},
        {"address": orphan, "semantics": "multicast", "direction": "to-broker", "durable": False}))
    wait_connected(node)
    consumers = [Client(node.url).receiver(fan, credit=20) for _ in range(3)]
    for i in range(10):
        broker.publish(fan, "", f"f{i}".encode())
    for c in consumers:
        c.wait_messages(10)
        assert [m.body for m in c.received] == [f"f{i}".encode() for i in range(10)]
    wait_for(lambda: gateway_state(node)["acked"] == 10, what="10 acks (one per message, not per copy)")
    # mesh -> broker on a fanout exchange with no queue bound: mandatory return -> RELEASED
    snd = Client(node.url).sender(orphan)
    snd.wait_credit()
    assert snd.send(make_message("nobody")).wait().outcome == "RELEASED"


def test_returns_match_their_publishes_with_and_without_the_tag_header(node_factory, broker):
    """Returns are matched by exchange, routing key and body; identical bodies in flight at once
    carry the sequence-number header instead. Every returned publish settles RELEASED, every routed
    one ACCEPTED, and only the identical ones carried the header."""
    fan = f"multicast/{broker.prefix}/late"
    queue = f"{broker.prefix}.late-q"
    broker.track(queues=(queue,), exchanges=(fan,))
    node = node_factory("A", extra=gateway_config(
        {"address": fan, "semantics": "multicast", "direction": "to-broker", "durable": False}))
    wait_connected(node)
    snd = Client(node.url).sender(fan)
    snd.wait_credit()
    bodies = [f"distinct-{i}".encode() for i in range(20)] + [b"same"] * 20

    def burst() -> list:
        out = []
        for body in bodies:
            m = make_message(body)
            m.inferred = True
            out.append(snd.send(m))
        wait_for(lambda: all(t.settled for t in out), what="the burst settled")
        return out

    assert {t.outcome for t in burst()} == {"RELEASED"}          # nothing bound: all returned
    assert gateway_state(node)["returned"] == 40
    broker.declare_queue(queue, auto_delete=False)
    broker.bind(queue, fan)
    assert {t.outcome for t in burst()} == {"ACCEPTED"}
    stored = broker.get_all(queue)
    assert sorted(body for _props, body in stored) == sorted(bodies)
    tagged = [body for props, body in stored if "x-amqp1-gw-seq" in (props.headers or {})]
    assert 0 < len(tagged) < 20 and set(tagged) == {b"same"}
    assert all(props.headers is None for props, body in stored if body != b"same")


def test_released_is_requeued_and_delivered_again(node_factory, broker):
    addr = broker.name("requeue")
    broker.track(queues=(addr,))
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "anycast", "direction": "from-broker", "durable": False}))
    wait_connected(node)
    wait_for(lambda: _exists(broker, addr), what="queue declared")
    broker.publish("", addr, b"again")
    r = Client(node.url).receiver(addr, credit=1, auto_accept=False)
    (first,) = r.wait_messages(1)
    first.release()
    r.flow(1)
    r.wait_messages(2)
    assert r.received[1].body == b"again"
    r.received[1].accept()
    wait_for(lambda: gateway_state(node)["acked"] == 1, what="ack after ACCEPTED")
    st = gateway_state(node)
    assert st["requeued"] == 1 and st["deadLettered"] == 0
    assert broker.depth(addr) == 0


def test_rejected_and_undeliverable_go_to_the_dead_letter_exchange(node_factory, broker):
    addr = broker.name("picky")
    dlx, dlq = f"{broker.prefix}.dlx", f"{broker.prefix}.dlq"
    broker.declare_exchange(dlx, "fanout", auto_delete=False)
    broker.declare_queue(dlq)
    broker.bind(dlq, dlx)
    broker.track(queues=(addr,))
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "anycast", "direction": "from-broker", "durable": False,
         "dead_letter_exchange": dlx, "ttl": 60}))
    wait_connected(node)
    wait_for(lambda: _exists(broker, addr), what="queue declared")
    broker.publish("", addr, b"bad one")
    broker.publish("", addr, b"cannot take it")
    r = Client(node.url).receiver(addr, credit=2, auto_accept=False)
    m1, m2 = r.wait_messages(2)
    m1.reject("app:rejected", "no")
    m2.modify(failed=True, undeliverable=True)
    wait_for(lambda: broker.depth(dlq) == 2, what="two messages dead-lettered")
    bodies = sorted(body for _props, body in broker.get_all(dlq))
    assert bodies == [b"bad one", b"cannot take it"]
    assert gateway_state(node)["deadLettered"] == 2
    assert broker.depth(addr) == 0


def test_round_trip_is_lossless_for_mapped_fields(node_factory, broker):
    stored = broker.name("roundtrip")
    view = broker.name("view")
    broker.track(queues=(stored, view))
    node = node_factory("A", extra=gateway_config(
        {"address": stored, "semantics": "anycast", "direction": "both", "durable": False},
        {"address": view, "semantics": "anycast", "direction": "to-broker", "durable": True}))
    wait_connected(node)
    mid = uuid.uuid4()
    messages = [
        # what oslo.messaging sends: an amqp-value string body
        make_message('{"oslo.message": "{}"}', id="msg-1", correlation_id="c-1", reply_to="reply/here",
                     content_type="application/json", content_encoding="utf-8", ttl=30.0, priority=6,
                     durable=True, subject="s", properties={"k": "v", "n": 7, "flag": True, "f": 1.5}),
        make_message(b"\x00\x01binary", id=mid, correlation_id=12345, durable=False,
                     properties={"b": b"\xff"}),
        make_message([1, "two", 3.0], id=b"\x01\x02"),          # amqp-sequence / list value
        make_message({"map": 1}),
    ]
    messages[1].inferred = True        # a data section
    snd = Client(node.url).sender(stored)
    snd.wait_credit()
    for m in messages:
        assert snd.send(m).wait().outcome == "ACCEPTED"
    assert broker.depth(stored) == len(messages)
    r = Client(node.url).receiver(stored, credit=10)
    got = r.wait_messages(len(messages))
    fields = ("body", "id", "correlation_id", "reply_to", "content_type", "content_encoding", "ttl",
              "priority", "durable", "subject", "properties", "inferred")
    for sent, rec in zip(messages, got, strict=True):
        back = rec.message
        for f in fields:
            a, b = getattr(sent, f), getattr(back, f)
            if isinstance(b, memoryview):
                b = bytes(b)
            if isinstance(a, dict):
                a = {k: bytes(v) if isinstance(v, memoryview) else v for k, v in a.items()}
                b = {k: bytes(v) if isinstance(v, memoryview) else v for k, v in (b or {}).items()}
            assert a == b, f"{f}: sent {a!r}, got {b!r}"
    # the 0-9-1 view of the same kind of message
    v = Client(node.url).sender(view)
    v.wait_credit()
    m = make_message(b"plain", id="id-9", correlation_id="corr-9", reply_to="rt", content_type="text/plain",
                     content_encoding="gzip", ttl=5.0, priority=2, durable=False, properties={"h": "x"})
    m.inferred = True
    assert v.send(m).wait().outcome == "ACCEPTED"
    ((props, body),) = broker.get_all(view)
    assert body == b"plain"
    assert (props.message_id, props.correlation_id, props.reply_to) == ("id-9", "corr-9", "rt")
    assert (props.content_type, props.content_encoding, props.expiration, props.priority) == \
        ("text/plain", "gzip", "5000", 2)
    assert props.delivery_mode == 2                 # durable address: persistent
    assert props.headers["h"] == "x" and "x-amqp1-body" not in props.headers


def test_no_credit_while_the_broker_is_unreachable(node_factory, broker):
    addr = broker.name("nowhere")
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "anycast", "direction": "both"}, url="amqp://guest:guest@127.0.0.1:1/%2F"))
    snd = Client(node.url).sender(addr)
    assert_stays(lambda: snd.credit == 0, 2.0, "producer without credit")
    st = gateway_state(node)
    assert st["state"] != "connected" and st["failures"] >= 2 and st["linkCount"] == 0
    assert st["state"] in ("down", "connecting") and st["url"] == "amqp://guest@127.0.0.1:1/%2F"
    warnings = [ln for ln in node.stderr_tail(500).splitlines() if "retrying" in ln]
    assert len(warnings) == 1, "one log line per failure streak"


def test_unicast_through_a_direct_exchange(node_factory, broker):
    addr = broker.name("server-1")
    broker.track(queues=(addr,), exchanges=(addr,))
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "unicast", "direction": "both", "durable": False}))
    wait_connected(node)
    snd = Client(node.url).sender(addr)
    snd.wait_credit()
    assert snd.send(make_message("to the server")).wait().outcome == "ACCEPTED"
    assert broker.depth(addr) == 1
    r = Client(node.url).receiver(addr, credit=5)
    assert r.wait_messages(1)[0].body == "to the server"


def _exists(broker, queue: str) -> bool:
    try:
        broker.depth(queue)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False


__all__ = ["Message", "symbol"]


def test_broker_entity_for_management(node_factory, broker):
    """`$management` QUERY type=broker reads Gateways.entities() (docs/MANAGEMENT.md)."""
    addr = broker.name("mgmt")
    broker.track(queues=(addr,))
    node = node_factory("A", extra=gateway_config(
        {"address": addr, "semantics": "anycast", "direction": "to-broker", "durable": False}))
    wait_connected(node)
    snd = Client(node.url).sender(addr)
    snd.wait_credit()
    for i in range(3):
        assert snd.send(make_message(f"m{i}")).wait().outcome == "ACCEPTED"
    (row,) = Requester(Client(node.url)).query("broker")
    assert row == {"identity": "rabbit", "url": "amqp://guest@127.0.0.1:5672/%2F", "state": "connected",
                   "addresses": [addr], "published": 3, "confirmed": 3, "returned": 0, "nacked": 0,
                   "unconfirmed": 0, "consumed": 0, "acked": 0, "requeued": 0, "deadLettered": 0,
                   "reconnects": 0, "connects": 1, "failures": 0, "silent": 0, "linkCount": 1, "standby": [],
                   "waiting": 0, "peakUnconfirmed": row["peakUnconfirmed"], "inflightToMesh": 0}
    assert 1 <= row["peakUnconfirmed"] <= 3


def test_telemetry_records_broker_links(node_factory, broker, tmp_path):
    """Deliveries into and out of the broker carry the `broker` link kind in telemetry."""
    addr = broker.name("tel")
    broker.track(queues=(addr,))
    tdir = tmp_path / "telemetry"
    extra = gateway_config({"address": addr, "semantics": "anycast", "direction": "both", "durable": False})
    node = node_factory("A", extra={**extra, "telemetry": {"dir": str(tdir)}})
    wait_connected(node)
    prod = Client(node.url).sender(addr)
    prod.wait_credit()
    trackers = [prod.send(make_message(f"t{i}")) for i in range(5)]
    assert [t.wait().outcome for t in trackers] == ["ACCEPTED"] * 5
    wait_for(lambda: broker.depth(addr) == 5, what="stored in the broker")
    listener = Client(node.url).receiver(addr, credit=10)
    assert len(listener.wait_messages(5)) == 5
    wait_for(lambda: broker.depth(addr) == 0 and gateway_state(node)["acked"] == 5, what="acked")
    node.proc.terminate()
    assert node.proc.wait(20) == 0
    node.stopped = True
    got = sorted((r["in_link"], r["out_link"], r["outcome"], r["egress"]) for r in deliveries(tdir, [addr]))
    assert got == [("broker", "client", "accepted", "A")] * 5 + [("client", "broker", "accepted", "A")] * 5
