"""Content passes through unchanged; large messages are forwarded intact and streamed."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest
from proton import Data, Message, symbol, timestamp

from tests.support.clients import ACCEPTED, Client, make_message, random_bytes
from tests.support.raw_amqp import described
from tests.support.resources import rss_bytes
from tests.support.waiting import pump_for

MB = 1024 * 1024


def _rich_message(address: str, body) -> Message:
    now_ms = int(time.time() * 1000)
    return make_message(
        body,
        address=address,
        durable=True,
        priority=7,
        ttl=60.0,
        first_acquirer=False,
        id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        subject="subject-x",
        reply_to="amqp:/reply/here",
        correlation_id=99,
        content_type="application/x-test",
        content_encoding="identity",
        expiry_time=(now_ms + 3_600_000) / 1000.0,
        creation_time=now_ms / 1000.0,
        group_id="group-1",
        group_sequence=17,
        reply_to_group_id="rgroup-1",
        properties={"str": "v", "int": 3, "neg": -5, "float": 2.5, "bool": True, "none": None,
                    "bin": b"\x00\xff", "ts": timestamp(now_ms)},
        annotations={symbol("x-app-ann"): "kept", symbol("x-opt-app"): [1, 2, 3]},
    )


BODIES = {
    "string": "hello \u00e9\u4e16",
    "binary": b"\x00\x01\x02\xfe\xff" * 50,
    "map": {"k": "v", "n": 1, "nested": {"l": [1, "two", 3.0]}},
    "list": [1, "two", None, True, {"a": b"b"}],
    "empty": None,
}


def _send_raw_and_receive(node, address: str, raw: bytes, settled: bool = False):
    c = Client(node.url)
    r = c.receiver(address, credit=5)
    s = c.sender(address)
    s.wait_credit()
    tr = s.send(raw, settled=settled)
    rec = r.wait_messages(1)[0]
    if not settled:
        tr.wait()
        assert tr.state == ACCEPTED
    return rec


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_bytes_pass_through_unchanged(node, kind):
    """Header, message annotations (none x-opt-qd.*), properties, application properties and body:
    the consumer gets exactly the bytes the producer sent."""
    address = f"balanced/bytes-{kind}"
    raw = _rich_message(address, BODIES[kind]).encode()
    rec = _send_raw_and_receive(node, address, raw)
    assert rec.raw == raw, "message bytes changed in transit"


def test_bytes_pass_through_presettled(node):
    raw = _rich_message("balanced/bytes-presettled", "x").encode()
    rec = _send_raw_and_receive(node, "balanced/bytes-presettled", raw, settled=True)
    assert rec.raw == raw


def test_bytes_pass_through_multicast(node):
    address = "multicast/bytes"
    raw = _rich_message(address, {"fan": "out"}).encode()
    c = Client(node.url)
    rs = [c.receiver(address, credit=5) for _ in range(3)]
    s = c.sender(address)
    s.wait_credit()
    s.send(raw).wait()
    for r in rs:
        assert r.wait_messages(1)[0].raw == raw


def test_bytes_pass_through_anonymous_relay(node):
    address = "balanced/bytes-anon"
    raw = _rich_message(address, "relay").encode()
    c = Client(node.url)
    r = c.receiver(address, credit=5)
    anon = c.sender(None)
    anon.wait_credit()
    assert anon.send(raw).wait().state == ACCEPTED
    got = r.wait_messages(1)[0].raw
    assert got == raw


def test_fields_preserved_with_router_annotations(node):
    """A client-supplied message with x-opt-qd.* annotations: everything else decodes identical."""
    address = "balanced/fields"
    m = _rich_message(address, {"body": [1, 2]})
    m.annotations = {symbol("x-app-ann"): "kept", symbol("x-opt-qd.trace"): ["0/Elsewhere"],
                     symbol("x-opt-qd.custom"): 1}
    rec = _send_raw_and_receive(node, address, m.encode())
    got = rec.message
    assert got is not None, rec.decode_error
    for f in ("durable", "priority", "ttl", "first_acquirer", "id", "subject", "reply_to",
              "correlation_id", "content_type", "content_encoding", "expiry_time", "creation_time",
              "group_id", "group_sequence", "reply_to_group_id", "properties", "body", "address"):
        assert getattr(got, f) == getattr(m, f), f"field {f}: sent {getattr(m, f)!r}, got {getattr(got, f)!r}"
    ann = {str(k): v for k, v in (got.annotations or {}).items() if not str(k).startswith("x-opt-qd.")}
    assert ann == {"x-app-ann": "kept"}


def test_footer_and_delivery_annotations_do_not_break_forwarding(node):
    """Delivery annotations are per hop (a router may drop them); the footer must arrive."""
    address = "balanced/footer"
    m = _rich_message(address, "with footer")
    m.instructions = {symbol("x-delivery-ann"): "hop"}
    d = Data()
    d.put_object(described(0x78, {symbol("x-footer"): "end"}))   # footer section, after the body
    footer = d.encode()
    rec = _send_raw_and_receive(node, address, m.encode() + footer)
    assert rec.message is not None, rec.decode_error
    assert rec.body == "with footer"
    assert rec.raw.endswith(footer), "footer section lost or changed"


@pytest.mark.parametrize("size", [1 * MB, 10 * MB], ids=["1MB", "10MB"])
def test_large_message_intact(node, size):
    payload = random_bytes(size)
    digest = hashlib.sha256(payload).hexdigest()
    c = Client(node.url)
    r = c.receiver("balanced/large", credit=2)
    s = c.sender("balanced/large")
    s.wait_credit()
    tr = s.send(make_message(payload, properties={"sha256": digest}))
    rec = r.wait_messages(1, timeout=10)[0]
    tr.wait()
    assert tr.state == ACCEPTED
    assert len(rec.body) == size
    assert hashlib.sha256(rec.body).hexdigest() == digest == rec.message.properties["sha256"]


def test_large_message_to_slow_consumer_does_not_balloon_memory(node):
    """A 10 MB message to a consumer reading 256 KiB every 20 ms: the node's RSS may not grow by
    more than ~3x the message size (it streams, it does not pile up copies)."""
    size = 10 * MB
    payload = random_bytes(size)
    digest = hashlib.sha256(payload).hexdigest()
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/large-slow", credit=2)
    s = prod.sender("balanced/large-slow")
    s.wait_credit()
    assert s.send(make_message(b"warm-up" * 10)).wait().state == ACCEPTED
    r.wait_messages(1)

    base = rss_bytes(node.pid)
    peak = [base]
    tr = s.send(make_message(payload))
    _slow_receive(cons, r, 2, 256 * 1024, 0.02, timeout=10,
                  on_step=lambda: peak.append(max(peak[-1], rss_bytes(node.pid))))
    tr.wait()
    assert tr.state == ACCEPTED
    assert hashlib.sha256(r.received[1].body).hexdigest() == digest
    growth = peak[-1] - base
    limit = 3 * size + 4 * MB
    assert growth <= limit, f"node RSS grew by {growth / MB:.1f} MB for a {size / MB:.0f} MB message " \
                            f"(limit {limit / MB:.0f} MB)"


def _slow_receive(cons: Client, r, count: int, step: int, period: float, timeout: float,
                  on_step=None) -> float:
    """Let ``cons`` read ``step`` bytes every ``period`` s until ``r`` has ``count`` messages;
    return the seconds it took (fails after ``timeout``)."""
    start = time.monotonic()
    cons.recv_budget = 0
    while len(r.received) < count:
        assert time.monotonic() - start < timeout, \
            f"slow consumer got only {cons.bytes_in} bytes in {timeout:.0f} s"
        cons.recv_budget = max(cons.recv_budget, 0) + step
        pump_for(period)
        if on_step is not None:
            on_step()
    cons.recv_budget = None
    return time.monotonic() - start


def test_large_message_to_slow_consumer_keeps_streaming(node):
    """A consumer reading 256 KiB every 20 ms (12.8 MB/s) gets a 4 MB message in well under 1.5 s:
    the node resumes writing as soon as the consumer has read, not on some later timer."""
    size = 4 * MB
    payload = random_bytes(size)
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/large-stream", credit=2)
    s = prod.sender("balanced/large-stream")
    s.wait_credit()
    tr = s.send(make_message(payload))
    took = _slow_receive(cons, r, 1, 256 * 1024, 0.02, timeout=10)
    tr.wait()
    assert r.received[0].body == payload
    assert took < 1.5, f"4 MB to a 12.8 MB/s reader took {took:.1f} s (nominal 0.3 s)"


def test_many_small_frames_both_ways(node):
    """Producer and consumer each announce a 512-byte max frame: a 200 kB message crosses the node
    as hundreds of frames on both sides and arrives byte for byte."""
    address = "balanced/small-frames"
    raw = _rich_message(address, random_bytes(200_000)).encode()
    prod = Client(node.url, max_frame_size=512)
    cons = Client(node.url, max_frame_size=512)
    r = cons.receiver(address, credit=5)
    s = prod.sender(address)
    s.wait_credit()
    tr = s.send(raw)
    assert r.wait_messages(1)[0].raw == raw
    tr.wait()
    assert tr.state == ACCEPTED
    assert cons.transport.frames_input > 300
