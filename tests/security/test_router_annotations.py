"""Attack: a client forging router annotations, or sending sections out of order (issue 17, point 3).

Router annotations (`x-opt-qd.*` message annotations) belong to routers: every such key a client puts
in its message is removed before the message reaches anyone, on a single node as across the mesh,
whole or streamed; the client's other annotations go through untouched. A message whose sections are
not in the order AMQP 1.0 fixes is REJECTED `amqp:decode-error` and never forwarded.
"""

from __future__ import annotations

import pytest
from proton import Data, Described, Message, symbol, ulong

from tests.support.clients import ACCEPTED, REJECTED, Client
from tests.support.meshes import build, wait_address

FORGED = {symbol("x-opt-qd.to"): "balanced/elsewhere", symbol("x-opt-qd.trace"): ["0/Z", "0/Y"],
          symbol("x-opt-qd.ingress"): "0/Z", symbol("x-opt-qd.phase"): 3,
          symbol("x-opt-qd.stream"): 1, "x-opt-qd.as-string": "s"}
USER = {symbol("x-opt-app.kept"): "yes", symbol("x-opt-qd-not-a-router-key"): 7}


def _section(code: int, value: object) -> bytes:
    d = Data()
    d.put_object(Described(ulong(code), value))
    return bytes(d.encode())


def _no_router_keys(raw: bytes, message: Message) -> None:
    assert b"x-opt-qd." not in raw, raw
    assert not any(str(k).startswith("x-opt-qd.") for k in (message.annotations or {})), message.annotations


def _pair(url: str, address: str, credit: int = 10):
    c = Client(url)
    rcv = c.receiver(address, credit=credit)
    snd = c.sender(address)
    snd.wait_credit()
    return snd, rcv


@pytest.mark.parametrize("body", ["small", "x" * 200_000], ids=["whole", "streamed"])
def test_forged_router_annotations_stripped_on_one_node(node, body):
    snd, rcv = _pair(node.url, "balanced/forged")
    assert snd.send(Message(body=body, annotations={**FORGED, **USER})).wait().state == ACCEPTED
    assert snd.send(Message(body=body, annotations=dict(FORGED))).wait().state == ACCEPTED
    first, second = rcv.wait_messages(2)
    for r in (first, second):
        _no_router_keys(r.raw, r.message)
        assert r.body == body
    assert first.message.annotations == USER              # the client's own annotations, untouched
    assert not second.message.annotations                  # only router keys: the section is gone


def test_forged_annotations_on_the_anonymous_relay_and_multicast(node):
    c = Client(node.url)
    rcvs = [Client(node.url).receiver("multicast/forged", credit=5) for _ in range(2)]
    anon = c.sender(None)
    anon.wait_credit()
    m = Message(address="multicast/forged", body="m", annotations={**FORGED, **USER})
    assert anon.send(m).wait().state == ACCEPTED
    for rcv in rcvs:
        (r,) = rcv.wait_messages(1)
        _no_router_keys(r.raw, r.message)
        assert r.message.annotations == USER


def test_sections_out_of_order_rejected_and_not_forwarded(node):
    snd, rcv = _pair(node.url, "balanced/order")
    props = _section(0x73, ["id-1", None, "balanced/order"])
    annotations = _section(0x72, {symbol("x-opt-app.kept"): "yes"})
    body = _section(0x77, "hello")
    header = _section(0x70, [True])
    cases = {
        "annotations after properties": props + annotations + body,
        "header after the body": body + header,
        "properties repeated": props + props + body,
        "two amqp-value bodies": props + body + body,
        "a data body then an amqp-value": props + _section(0x75, b"ab") + body,
        "bytes after the last section": props + body + b"\x00",
        "not a section": b"\x00\x53\x99\x40" + body,
    }
    for name, data in cases.items():
        tr = snd.send(data).wait()
        assert tr.state == REJECTED, name
        assert tr.condition.name == "amqp:decode-error", (name, tr.condition)
    good = annotations + props + _section(0x75, b"d1") + _section(0x75, b"d2") + _section(0x78, {})
    assert snd.send(header + good).wait().state == ACCEPTED          # in order: goes through
    (r,) = rcv.wait_messages(1)
    assert r.raw == header + good                                    # byte for byte
    assert rcv.received == [r]                                       # nothing out of order got through


def test_sections_out_of_order_rejected_when_streamed(node):
    snd, rcv = _pair(node.url, "balanced/order-streamed")
    data = _section(0x73, ["id-1"]) + _section(0x72, {symbol("k"): "v"}) + _section(0x75, b"z" * 100_000)
    tr = snd.send(data).wait()
    assert tr.state == REJECTED and tr.condition.name == "amqp:decode-error", tr.condition
    assert snd.send(Message(body="after")).wait().state == ACCEPTED
    assert [r.body for r in rcv.wait_messages(1)] == ["after"]


def test_forged_annotations_stripped_across_the_mesh(node_factory):
    nodes = build(node_factory, ["A", "B"], [("B", "A", 1)])
    rcv = Client(nodes["B"].url).receiver("balanced/forged-mesh", credit=5)
    wait_address(nodes.values(), "balanced/forged-mesh", ["B"])
    snd = Client(nodes["A"].url).sender("balanced/forged-mesh")
    snd.wait_credit()
    assert snd.send(Message(body="via A", annotations={**FORGED, **USER})).wait().state == ACCEPTED
    (r,) = rcv.wait_messages(1)
    _no_router_keys(r.raw, r.message)
    assert r.message.annotations == USER
    out_of_order = _section(0x73, ["i"]) + _section(0x72, {symbol("k"): "v"}) + _section(0x77, "x")
    tr = snd.send(out_of_order).wait()
    assert tr.state == REJECTED and tr.condition.name == "amqp:decode-error", tr.condition


def test_streamed_message_with_a_malformed_router_annotation_map_is_rejected(node):
    """A streamed message whose message-annotations hold an x-opt-qd. key and a value running past the
    end of the map (the fuzzer's find): REJECTED amqp:decode-error, no internal error, the link goes on."""
    snd, rcv = _pair(node.url, "balanced/malformed-streamed")
    items = b"\xa3\x0bx-opt-qd.to" + b"\xa1\x20ab"           # a str8 of 32 bytes with 2 in the map
    annotations = b"\x00\x53\x72\xc1" + bytes([1 + len(items)]) + b"\x02" + items
    tr = snd.send(annotations + _section(0x75, b"z" * 100_000)).wait()
    assert tr.state == REJECTED and tr.condition.name == "amqp:decode-error", tr.condition
    assert snd.send(Message(body="after")).wait().state == ACCEPTED
    assert [r.body for r in rcv.wait_messages(1)] == ["after"]
    assert "internal error" not in node.stderr_tail(), node.stderr_tail()
