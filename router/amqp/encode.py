"""AMQP 1.0 encoding of Python values (stdlib only, no ``proton``): the counterpart of codec.py.

:func:`encode_value` returns the encoding of one value. Python types map to AMQP types as follows,
always in the most compact form AMQP defines for them:

* ``None`` -> null; ``bool`` -> boolean (true / false constructors);
* ``int`` -> long (smalllong for -128..127); an ``int`` above the long range that fits a ulong
  (2**63 .. 2**64-1) -> ulong, the only AMQP integer type that holds it; beyond, ``ValueError``.
  Otherwise an unsigned type is used only when asked for with a wrapper: :class:`ULong` -> ulong
  (ulong0, smallulong), :class:`UInt` -> uint (uint0, smalluint); :class:`Timestamp`
  (milliseconds since the epoch) -> timestamp;
* ``float`` -> double;
* ``str`` -> string (str8 / str32, UTF-8); :class:`~router.amqp.codec.Symbol` -> symbol (sym8 /
  sym32; AMQP symbols are ASCII, but a non-ASCII one is written in UTF-8, as codec.py reads it);
* ``bytes``, ``bytearray``, ``memoryview`` -> binary (vbin8 / vbin32);
* ``uuid.UUID`` -> uuid;
* ``list`` and ``tuple`` -> list (list0 / list8 / list32); ``dict`` (any ``Mapping``) -> map (map8 /
  map32), keys encoded like values;
* :class:`~router.amqp.codec.Described` -> a described value; a plain ``int`` descriptor is a
  descriptor code, encoded as ulong.

So every value :func:`router.amqp.codec.decode_value` returns encodes back to an equal value (the
link-state engine re-floods bodies it received); not always to the same bytes: every integer type
decodes to ``int`` and encodes as long (or ulong above the long range), float as double, arrays as
lists, chars as strings, decimals as binary. python-qpid-proton makes the same choices for ``int``, ``float``,
``str`` and ``bytes`` but always writes the 32-bit list and map forms.

Anything else raises ``TypeError`` naming the type; a value out of its type's range (an ``int``
beyond both long and ulong, a negative :class:`ULong`) raises ``ValueError``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from router.amqp.codec import Described, Symbol

__all__ = ["Timestamp", "UInt", "ULong", "encode_value"]


class ULong(int):
    """An ``int`` to encode as AMQP ulong (0 .. 2**64-1), e.g. a message id or a descriptor code."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ULong({int(self)})"


class UInt(int):
    """An ``int`` to encode as AMQP uint (0 .. 2**32-1)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"UInt({int(self)})"


class Timestamp(int):
    """An ``int`` to encode as AMQP timestamp: milliseconds since the Unix epoch (signed 64-bit)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Timestamp({int(self)})"


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_PACK_Q = struct.Struct(">Q").pack
_PACK_q = struct.Struct(">q").pack
_PACK_I = struct.Struct(">I").pack
_PACK_II = struct.Struct(">II").pack
_PACK_d = struct.Struct(">d").pack

# Constructor + one-byte size, by size: what every short string, symbol and binary starts with.
_STR8 = [bytes((0xA1, n)) for n in range(256)]
_SYM8 = [bytes((0xA3, n)) for n in range(256)]
_VBIN8 = [bytes((0xA0, n)) for n in range(256)]
_SMALLLONG = {n: bytes((0x55, n & 0xFF)) for n in range(-128, 128)}

_Encoder = Callable[[Any], bytes]


def _none(value: None) -> bytes:
    return b"\x40"


def _bool(value: bool) -> bytes:
    return b"\x41" if value else b"\x42"


def _int(value: int) -> bytes:
    small = _SMALLLONG.get(value)
    if small is not None:
        return small
    if _LONG_MIN <= value <= _LONG_MAX:
        return b"\x81" + _PACK_q(value)
    if _LONG_MAX < value < 1 << 64:
        return b"\x80" + _PACK_Q(value)
    raise ValueError(f"int {int(value)} fits neither an AMQP long nor a ulong")


def _ulong(value: int) -> bytes:
    if value == 0:
        return b"\x44"
    if 0 < value < 256:
        return bytes((0x53, value))
    if not 0 <= value < 1 << 64:
        raise ValueError(f"ulong {int(value)} is out of range (0 .. 2**64-1)")
    return b"\x80" + _PACK_Q(value)


def _uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"
    if 0 < value < 256:
        return bytes((0x52, value))
    if not 0 <= value < 1 << 32:
        raise ValueError(f"uint {int(value)} is out of range (0 .. 2**32-1)")
    return b"\x70" + _PACK_I(value)


def _timestamp(value: int) -> bytes:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"timestamp {int(value)} does not fit a signed 64-bit count of milliseconds")
    return b"\x83" + _PACK_q(value)


def _double(value: float) -> bytes:
    return b"\x82" + _PACK_d(value)


def _str(value: str) -> bytes:
    data = value.encode()
    n = len(data)
    if n < 256:
        return _STR8[n] + data
    return b"\xb1" + _PACK_I(n) + data


def _symbol(value: str) -> bytes:
    data = value.encode()
    n = len(data)
    if n < 256:
        return _SYM8[n] + data
    return b"\xb3" + _PACK_I(n) + data


def _binary(value: bytes | bytearray | memoryview) -> bytes:
    data = bytes(value)
    n = len(data)
    if n < 256:
        return _VBIN8[n] + data
    return b"\xb0" + _PACK_I(n) + data


def _uuid(value: uuid.UUID) -> bytes:
    return b"\x98" + value.bytes


def _compound(code8: int, code32: int, count: int, items: list[bytes]) -> bytes:
    body = b"".join(items)
    size = len(body)
    if size < 255 and count < 256:          # the size byte counts the count byte too
        return bytes((code8, size + 1, count)) + body
    return bytes((code32,)) + _PACK_II(size + 4, count) + body


def _list(value: list[Any] | tuple[Any, ...]) -> bytes:
    if not value:
        return b"\x45"
    items = []
    append = items.append
    small = _SMALLLONG.get
    for item in value:
        t = type(item)
        if t is str:                        # inline: lists of addresses and node ids
            data = item.encode()
            n = len(data)
            append(_STR8[n] + data if n < 256 else b"\xb1" + _PACK_I(n) + data)
        elif t is int and (code := small(item)) is not None:   # inline: the hints of an MAU
            append(code)
        else:
            append(_encode(item))
    return _compound(0xC0, 0xD0, len(value), items)


def _map(value: Mapping[Any, Any]) -> bytes:
    items = []
    append = items.append
    for key, item in value.items():
        append(_encode(key))
        append(_encode(item))
    return _compound(0xC1, 0xD1, len(items), items)


def _described(value: Described) -> bytes:
    descriptor = value.descriptor
    if type(descriptor) is int:             # a descriptor code is a ulong
        head = _ulong(descriptor)
    else:
        head = _encode(descriptor)
    return b"\x00" + head + _encode(value.value)


_BY_TYPE: dict[type, _Encoder] = {
    type(None): _none,
    bool: _bool,
    int: _int,
    ULong: _ulong,
    UInt: _uint,
    Timestamp: _timestamp,
    float: _double,
    str: _str,
    Symbol: _symbol,
    bytes: _binary,
    bytearray: _binary,
    memoryview: _binary,
    uuid.UUID: _uuid,
    list: _list,
    tuple: _list,
    dict: _map,
    Described: _described,
}

# Subclasses (an IntEnum, a str subclass, an OrderedDict...): the first base that matches, in this
# order (bool before int, the wrappers and Symbol before their bases, Described before tuple).
_BY_BASE: tuple[tuple[type, _Encoder], ...] = (
    (bool, _bool), (ULong, _ulong), (UInt, _uint), (Timestamp, _timestamp), (int, _int),
    (float, _double), (Symbol, _symbol), (str, _str), (bytes, _binary), (bytearray, _binary),
    (memoryview, _binary), (uuid.UUID, _uuid), (Described, _described), (list, _list),
    (tuple, _list), (Mapping, _map),
)


def _encoder_of(value: Any) -> _Encoder:
    for base, encoder in _BY_BASE:
        if isinstance(value, base):
            return encoder
    raise TypeError(f"cannot encode a value of type {type(value).__qualname__} as AMQP")


def _encode(value: Any) -> bytes:
    encoder = _BY_TYPE.get(type(value))
    if encoder is None:
        encoder = _encoder_of(value)
    return encoder(value)


def encode_value(value: Any) -> bytes:
    """The AMQP 1.0 encoding of ``value`` (see the module docstring for the type mapping)."""
    return _encode(value)

