"""Whole AMQP frames the node writes itself, outside Proton: the answer to a client that must be refused
before Proton would say anything (it skipped a required SASL exchange).

`refusal(container, condition, description)` is the AMQP protocol header, an Open and a Close carrying the
error, as AMQP 1.0 (2.4.1, 2.7.9) lets a peer that cannot accept a connection say why before it closes.
"""

from __future__ import annotations

import struct

from router.amqp.codec import Described, Symbol
from router.amqp.encode import ULong, encode_value

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
OPEN, CLOSE, ERROR = ULong(0x10), ULong(0x18), ULong(0x1D)


def frame(performative: Described, channel: int = 0) -> bytes:
    """One AMQP frame (type 0, data offset 2) carrying `performative`."""
    body = encode_value(performative)
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def refusal(container: str, condition: str, description: str) -> bytes:
    """Header, Open and Close with error `condition` / `description`."""
    error = Described(ERROR, [Symbol(condition), description])
    return AMQP_HEADER + frame(Described(OPEN, [container])) + frame(Described(CLOSE, [error]))
