"""router.amqp.sections.client_sections: AMQP section order, and router keys in the annotations."""

from __future__ import annotations

import pytest
from proton import Data, Described, Message, symbol, ulong

from router.amqp.codec import MalformedError
from router.amqp.peersections import insertion_point
from router.amqp.sections import SectionShapes, client_sections


def sec(code: int, value: object) -> bytes:
    d = Data()
    d.put_object(Described(ulong(code), value))
    return bytes(d.encode())


H, DA, MA = sec(0x70, [True]), sec(0x71, {symbol("d"): 1}), sec(0x72, {symbol("x-app"): 1})
P, AP = sec(0x73, ["id"]), sec(0x74, {"k": "v"})
D, S, V, F = sec(0x75, b"ab"), sec(0x76, [1, 2]), sec(0x77, "v"), sec(0x78, {symbol("f"): 1})
SYMBOLIC_P = Data()
SYMBOLIC_P.put_object(Described(symbol("amqp:properties:list"), ["id"]))

GOOD = [H + DA + MA + P + AP + V + F, D, D + D + D, S + S + F, b"", H, MA + P, P + V,
        bytes(SYMBOLIC_P.encode()) + V, bytes(Message(body="x", address="a", id=1).encode())]
BAD = [P + MA + V, V + H, P + P + V, V + V, D + V, S + D, D + S, F + V, V + F + F, P + V + b"\x00",
       b"\x01" + P, b"\x00\x53\x99\x40", b"\x00\x53\x6f\x40", P[:-1], b"\x00"]


@pytest.mark.parametrize("data", GOOD)
def test_in_order(data):
    assert client_sections(data, len(data)) is False
    padded = data + b"\xff" * 10                    # the node passes its longer read buffer and n
    assert client_sections(padded, len(data)) is False


@pytest.mark.parametrize("data", BAD)
def test_out_of_order_or_truncated(data):
    with pytest.raises(MalformedError):
        client_sections(data, len(data))


def test_router_keys_found_in_the_message_annotations_only():
    forged = sec(0x72, {symbol("x-opt-qd.to"): "a"})
    assert client_sections(forged + V, len(forged) + len(V)) is True
    elsewhere = P + sec(0x74, {"x-opt-qd.to": "a"}) + sec(0x77, "x-opt-qd.to")
    assert client_sections(elsewhere, len(elsewhere)) is False


# ---- SectionShapes: the same answers as client_sections once a shape is known --------------------------

def trained(data: bytes) -> SectionShapes:
    shapes = SectionShapes()
    for _ in range(2):                              # a shape is kept once seen twice in a row
        assert shapes.check(data, len(data)) is False
    assert shapes._fast is not None
    return shapes


SHAPED = [H + P + D, H + P + V, P + D + D, H + AP + S + S + F, P + sec(0x75, b"x" * 300),
          H + P + sec(0x75, b"y" * 70000)]


@pytest.mark.parametrize("data", SHAPED)
def test_shapes_agree_with_the_walk(data):
    shapes = trained(data)
    for other in GOOD + BAD + SHAPED + [data + b"\x00", data[:-1], data[:-2] + b"\x00\x53\x77\x40",
                                         data + V, data + F, data + MA]:
        for n in (len(other), len(other) - 1, len(other) + 1):
            if n < 0:
                continue
            padded = other + b"\x00\xff" * 8        # the node's buffer is longer than the message
            try:
                expected = client_sections(padded, n)
            except MalformedError:
                expected = MalformedError
            try:
                got = shapes.check(padded, n)
            except MalformedError:
                got = MalformedError
            assert got == expected, (other, n)


def test_same_heads_different_last_size():
    shapes = trained(H + P + sec(0x75, b"abc"))
    longer = H + P + sec(0x75, b"abcdefgh")
    assert shapes.check(longer, len(longer)) is False            # the body's size may change
    assert shapes._fast is not None
    with pytest.raises(MalformedError):
        shapes.check(longer, len(longer) - 1)                    # ... but must end the message
    with pytest.raises(MalformedError):
        shapes.check(longer + b"\x00", len(longer) + 1)


def test_message_annotations_are_always_walked():
    forged = sec(0x72, {symbol("x-opt-qd.to"): "a"})
    shapes = SectionShapes()
    plain = MA + P + V
    for _ in range(3):
        assert shapes.check(plain, len(plain)) is False
    assert shapes._fast is None                                  # a shape with annotations is not kept
    assert shapes.check(forged + P + V, len(forged + P + V)) is True


def test_memoryview_of_a_longer_buffer():
    data = H + P + D
    buf = bytearray(data + b"\xff" * 100)
    shapes = SectionShapes()
    for _ in range(2):
        assert shapes.check(memoryview(buf), len(data)) is False
    assert shapes._fast is not None
    assert shapes.check(memoryview(buf), len(data)) is False
    buf[len(H) + 2] = 0x74                                       # properties turned into app-properties
    assert shapes.check(memoryview(buf), len(data)) is False     # (still in order: walked, accepted)
    buf[2] = 0x77                                                # header turned into a body: out of order
    with pytest.raises(MalformedError):
        shapes.check(memoryview(buf), len(data))


# ---- SectionShapes.insertion: where an ingress adds annotations, as insertion_point says -----------------

@pytest.mark.parametrize(("data", "known"), [(d, True) for d in SHAPED + [DA + P + V, H + DA + D, D]]
                         + [(H + DA, False), (H, False)])      # nothing after: the pattern does not fix it
def test_insertion_agrees_with_the_walk_and_insertion_point(data, known):
    shapes = SectionShapes()
    for _ in range(2):
        shapes.check(data, len(data))
    assert shapes.insertion(memoryview(data + b"\xff"), len(data)) == (insertion_point(data) if known else -1)
    seen = 0
    for other in GOOD + BAD + SHAPED + [data, H + DA + P + V, DA + S, data + F, data + D, H + data[len(H):],
                                        data + MA, MA + data, data[:-1], data + b"\x00"]:
        padded = memoryview(other + b"\x00\xff" * 8)   # the node's read buffer is longer
        for n in (len(other), len(other) - 1, len(other) + 1):
            at = shapes.insertion(padded, n)
            if at < 0:
                continue                                # not checked here: `check` and insertion_point
            seen += 1
            assert client_sections(padded, n) is False, (other, n)
            assert at == insertion_point(bytes(padded[:n])), (other, n)
    assert seen >= known
