"""router.amqp.sections.client_sections: AMQP section order, and router keys in the annotations."""

from __future__ import annotations

import pytest
from proton import Data, Described, Message, symbol, ulong

from router.amqp.codec import MalformedError
from router.amqp.sections import client_sections


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
