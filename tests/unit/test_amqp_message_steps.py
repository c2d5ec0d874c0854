"""decode_message_steps: decode_message in steps for a large message, same result and same refusals."""

from __future__ import annotations

import random

import pytest

from router.amqp.codec import MalformedError
from router.amqp.message import decode_message, decode_message_steps, encode_message


def run(steps) -> tuple[object, int]:
    """Drive the generator to its end: (the message, how many times it yielded)."""
    n = 0
    try:
        while True:
            next(steps)
            n += 1
    except StopIteration as done:
        return done.value, n


def control(n: int, **body) -> bytes:
    body = {"id": "A", "mobile_seq": 4, "exist": [f"addr/{i}" for i in range(n)], "hints": [3] * n, **body}
    return encode_message(to="_topo/0/B/qdrouter.ma", application_properties={"opcode": "MAU"}, body=body,
                          message_annotations={"x-opt-qd.trace": ["0/A"]})


def test_a_large_map_body_is_decoded_in_steps_of_the_chunk():
    data = control(20_000)
    message, steps = run(decode_message_steps(data, chunk=500))
    assert message == decode_message(data)
    assert steps == (2 * 20_000 + 2 * 4) // 500         # every value of the map and of its lists counts
    assert message.body_type == "amqp-value" and message.to == "_topo/0/B/qdrouter.ma"


@pytest.mark.parametrize("body", [[f"x{i}" for i in range(3000)], "a string", {"k": list(range(3000))}, None])
def test_other_bodies_decode_as_decode_message_decodes_them(body):
    data = encode_message(body=body, application_properties={"a": 1})
    assert run(decode_message_steps(data, chunk=100))[0] == decode_message(data)


def test_a_message_of_data_sections_is_decoded_at_once():
    data = encode_message(body=b"x" * 100_000)
    message, steps = run(decode_message_steps(data, chunk=10))
    assert steps == 0 and message == decode_message(data)


@pytest.mark.parametrize("seed", range(4))
def test_corrupted_messages_are_refused_exactly_when_decode_message_refuses_them(seed):
    rng = random.Random(seed)
    data = control(40, extra=[{"k": [1, 2]}, [[1], {"m": None}]])
    for _ in range(1500):
        d = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            d[rng.randrange(len(d))] = rng.randrange(256)
        if rng.random() < 0.2:
            d = d[:rng.randrange(len(d))]
        d = bytes(d)
        try:
            whole = decode_message(d)
        except MalformedError:
            whole = MalformedError
        try:
            stepped = run(decode_message_steps(d, chunk=7))[0]
        except MalformedError:
            stepped = MalformedError
        assert stepped == whole, d.hex()


def test_an_unhashable_key_is_refused_in_steps_too():
    """A map32 body whose key is a list (the encoder refuses to write one: forged here)."""
    items = b"\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x54\x01" + b"\x54\x02"   # key [1], value 2
    forged = b"\x00\x53\x77\xd1" + (len(items) + 4).to_bytes(4, "big") + (2).to_bytes(4, "big") + items
    for decode in (decode_message, lambda d: run(decode_message_steps(d))[0]):
        with pytest.raises(MalformedError):
            decode(forged)
