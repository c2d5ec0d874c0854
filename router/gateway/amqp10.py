"""A small AMQP 1.0 encoder for the message sections the gateway builds (header, properties,
application-properties, data), stdlib only. Decoding uses :mod:`router.amqp.codec`.

Python types map to AMQP types as: None -> null, bool -> boolean, int -> long (ulong for
:class:`ULong`, timestamp for :class:`Timestamp`, ubyte / uint for :class:`UByte` / :class:`UInt`),
float -> double, str -> string (:class:`router.amqp.codec.Symbol` -> symbol), bytes -> binary,
uuid.UUID -> uuid, list -> list, dict -> map.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from router.amqp.codec import Symbol

HEADER = 0x70
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75


class ULong(int):
    """Encode as ulong (message-id / correlation-id)."""


class UInt(int):
    """Encode as uint (header ttl)."""


class UByte(int):
    """Encode as ubyte (header priority)."""


class Timestamp(int):
    """Encode as timestamp (milliseconds since the epoch)."""


_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")


def _sized(small: int, large: int, raw: bytes) -> bytes:
    n = len(raw)
    return bytes((small, n)) + raw if n < 256 else bytes((large,)) + _U32.pack(n) + raw


def encode_value(v: Any) -> bytes:
    """The AMQP 1.0 encoding of one value."""
    if v is None:
        return b"\x40"
    if v is True:
        return b"\x41"
    if v is False:
        return b"\x42"
    cls = type(v)
    if cls is str:
        return _sized(0xA1, 0xB1, v.encode())
    if cls is Symbol:
        return _sized(0xA3, 0xB3, v.encode())
    if cls is bytes or cls is bytearray:
        return _sized(0xA0, 0xB0, bytes(v))
    if cls is int:
        return b"\x55" + struct.pack(">b", v) if -128 <= v < 128 else b"\x81" + _I64.pack(v)
    if cls is ULong:
        return b"\x53" + bytes((v,)) if 0 <= v < 256 else b"\x80" + _U64.pack(v)
    if cls is UInt:
        return b"\x52" + bytes((v,)) if 0 <= v < 256 else b"\x70" + _U32.pack(v)
    if cls is UByte:
        return b"\x50" + bytes((v,))
    if cls is Timestamp:
        return b"\x83" + _I64.pack(v)
    if cls is float:
        return b"\x82" + _F64.pack(v)
    if cls is uuid.UUID:
        return b"\x98" + v.bytes
    if isinstance(v, list):
        return _compound(0xC0, 0xD0, b"".join(encode_value(x) for x in v), len(v))
    if isinstance(v, dict):
        items = b"".join(encode_value(k) + encode_value(x) for k, x in v.items())
        return _compound(0xC1, 0xD1, items, 2 * len(v))
    if isinstance(v, int):
        return encode_value(int(v))
    if isinstance(v, str):
        return encode_value(str(v))
    raise TypeError(f"cannot encode {cls.__name__} as AMQP 1.0")


def _compound(small: int, large: int, items: bytes, count: int) -> bytes:
    if len(items) + 1 < 256 and count < 256:
        return bytes((small, len(items) + 1, count)) + items
    return bytes((large,)) + _U32.pack(len(items) + 4) + _U32.pack(count) + items


def section(code: int, value: Any) -> bytes:
    """A described section: ``0x00 smallulong(code) value``."""
    return bytes((0x00, 0x53, code)) + encode_value(value)


def fields_list(fields: list[Any]) -> list[Any]:
    """Drop trailing nulls, as encoders do for composite types."""
    n = len(fields)
    while n and fields[n - 1] is None:
        n -= 1
    return fields[:n]


def data_section(body: bytes) -> bytes:
    """A ``data`` body section holding ``body``."""
    return bytes((0x00, 0x53, DATA)) + _sized(0xA0, 0xB0, body)
