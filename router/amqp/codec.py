"""Small, pure-Python AMQP 1.0 decoding for the router's hot path (stdlib only, no ``proton``).

What is here:

* :func:`decode_value` decodes one encoded value (every primitive constructor of the AMQP 1.0
  types section, lists, maps, arrays and described types).
* :func:`skip_value` steps over one value using only the constructor and size fields (no Python
  objects are built for lists, maps, binaries or strings).
* :func:`scan_message` locates the bare-message sections that precede the body (header,
  delivery/message annotations, properties, application properties) and extracts the
  ``properties.to`` address without decoding anything else; it never touches the body.
* :func:`message_annotations` decodes a message-annotations section located by :func:`scan_message`
  (:func:`decode_section` does the same for any section).
* :class:`FlowEchoDetector` spots FLOW performatives with ``echo=true`` in the raw incoming frame
  byte stream (Proton-C ignores that field, so the router has to answer such flows itself).

Decoded Python types: null -> ``None``; boolean -> ``bool``; all integer types and timestamp
(milliseconds since the epoch) -> ``int``; float/double -> ``float``; decimal32/64/128 -> raw
``bytes`` (4/8/16, big-endian IEEE 754 decimal encodings); char -> 1-character ``str``; uuid ->
``uuid.UUID``; binary -> ``bytes``; string -> ``str``; symbol -> :class:`Symbol`; list and array ->
``list``; map -> ``dict`` (a list of ``(key, value)`` pairs if a key is unhashable); described ->
:class:`Described`.

Errors: every problem with the input raises :class:`MalformedError` (a ``ValueError``); data that
ends too early raises its subclass :class:`IncompleteError`. ``IndexError``, ``struct.error``,
``UnicodeDecodeError`` and ``RecursionError`` never escape the public functions.

Measured costs (CPython 3.11.7, 2-vCPU Xeon VM, ``timeit``, best of 5):

* ``FlowEchoDetector.feed`` on a 256 KiB chunk made of 2000 TRANSFER frames (127 bytes each,
  small encoded messages, no FLOW): ~250 us per chunk (~0.95 ns/byte, ~0.12 us/frame), almost
  all of it the one ``bytes.find`` pass; with ``all_forms=True`` (three passes) ~470 us per chunk.
  A chunk holding one echo FLOW adds ~6 us to decode and confirm it.
* ``scan_message`` on a small message (header + properties with ``to``): ~2 us; with header,
  message annotations, properties and application properties: ~3 us.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "Described",
    "FlowEchoDetector",
    "IncompleteError",
    "MalformedError",
    "MessageInfo",
    "Symbol",
    "decode_section",
    "decode_value",
    "message_annotations",
    "scan_message",
    "skip_value",
]

Buffer = bytes | bytearray | memoryview


class MalformedError(ValueError):
    """The bytes are not a valid AMQP 1.0 encoding."""


class IncompleteError(MalformedError):
    """The bytes end before the value (or, for :func:`scan_message`, the message body) does."""


class Symbol(str):
    """An AMQP symbol (decoded from sym8/sym32)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Described(NamedTuple):
    """A described type: ``descriptor`` (usually an int or a :class:`Symbol`) and its ``value``."""

    descriptor: Any
    value: Any


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U32X2 = struct.Struct(">II")
_U64 = struct.Struct(">Q")
_U32_FROM = _U32.unpack_from
_U32X2_FROM = _U32X2.unpack_from

# Upper bound on the element count of an array whose elements take no bytes at all (null, true,
# uint0, list0, ...): such arrays are legal but would otherwise let 10 bytes ask for 4e9 objects.
_MAX_ZERO_WIDTH_COUNT = 1 << 16

_Decoder = Callable[[Any, int], tuple[Any, int]]


def _need(buf: Buffer, end: int) -> None:
    if end > len(buf):
        raise IncompleteError(f"value needs {end} bytes, only {len(buf)} available")


def _decode(buf: Buffer, pos: int) -> tuple[Any, int]:
    return _DEC[buf[pos]](buf, pos + 1)


def _const(value: Any) -> _Decoder:
    def dec(buf: Buffer, pos: int) -> tuple[Any, int]:
        return value, pos

    return dec


def _struct(fmt: str) -> _Decoder:
    st = struct.Struct(fmt)
    unpack_from = st.unpack_from
    size = st.size

    def dec(buf: Buffer, pos: int) -> tuple[Any, int]:
        return unpack_from(buf, pos)[0], pos + size

    return dec


def _raw(size: int) -> _Decoder:
    def dec(buf: Buffer, pos: int) -> tuple[Any, int]:
        end = pos + size
        _need(buf, end)
        return bytes(buf[pos:end]), end

    return dec


def _dec_ubyte(buf: Buffer, pos: int) -> tuple[Any, int]:
    return buf[pos], pos + 1


def _dec_bool(buf: Buffer, pos: int) -> tuple[Any, int]:
    return buf[pos] != 0, pos + 1


def _dec_char(buf: Buffer, pos: int) -> tuple[Any, int]:
    code = _U32_FROM(buf, pos)[0]
    if code > 0x10FFFF:
        raise MalformedError(f"char code point {code:#x} out of range")
    return chr(code), pos + 4


def _dec_uuid(buf: Buffer, pos: int) -> tuple[Any, int]:
    end = pos + 16
    _need(buf, end)
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def _dec_vbin8(buf: Buffer, pos: int) -> tuple[Any, int]:
    end = pos + 1 + buf[pos]
    _need(buf, end)
    return bytes(buf[pos + 1 : end]), end


def _dec_vbin32(buf: Buffer, pos: int) -> tuple[Any, int]:
    end = pos + 4 + _U32_FROM(buf, pos)[0]
    _need(buf, end)
    return bytes(buf[pos + 4 : end]), end


def _dec_str8(buf: Buffer, pos: int) -> tuple[Any, int]:
    end = pos + 1 + buf[pos]
    _need(buf, end)
    return str(buf[pos + 1 : end], "utf-8"), end


def _dec_str32(buf: Buffer, pos: int) -> tuple[Any, int]:
    end = pos + 4 + _U32_FROM(buf, pos)[0]
    _need(buf, end)
    return str(buf[pos + 4 : end], "utf-8"), end


def _dec_sym8(buf: Buffer, pos: int) -> tuple[Any, int]:
    end = pos + 1 + buf[pos]
    _need(buf, end)
    return Symbol(str(buf[pos + 1 : end], "utf-8")), end


def _dec_sym32(buf: Buffer, pos: int) -> tuple[Any, int]:
    end = pos + 4 + _U32_FROM(buf, pos)[0]
    _need(buf, end)
    return Symbol(str(buf[pos + 4 : end], "utf-8")), end


def _list_items(buf: Buffer, pos: int, end: int, count: int) -> tuple[Any, int]:
    _need(buf, end)
    if count > end - pos:  # every item takes at least its constructor byte
        raise MalformedError(f"compound count {count} does not fit in its size")
    items = []
    append = items.append
    dec = _DEC
    for _ in range(count):
        value, pos = dec[buf[pos]](buf, pos + 1)
        append(value)
    if pos != end:
        raise MalformedError("compound items do not match its size field")
    return items, end


def _dec_list8(buf: Buffer, pos: int) -> tuple[Any, int]:
    size = buf[pos]
    if size < 1:
        raise MalformedError("list8 size too small")
    return _list_items(buf, pos + 2, pos + 1 + size, buf[pos + 1])


def _dec_list32(buf: Buffer, pos: int) -> tuple[Any, int]:
    size, count = _U32X2_FROM(buf, pos)
    if size < 4:
        raise MalformedError("list32 size too small")
    return _list_items(buf, pos + 8, pos + 4 + size, count)


def _map_from(items: list[Any], end: int) -> tuple[Any, int]:
    if len(items) % 2:
        raise MalformedError("map has an odd number of elements")
    pairs = list(zip(items[::2], items[1::2], strict=True))
    try:
        return dict(pairs), end
    except TypeError:  # an unhashable key (list, dict, ...): keep the pairs
        return pairs, end


def _dec_map8(buf: Buffer, pos: int) -> tuple[Any, int]:
    size = buf[pos]
    if size < 1:
        raise MalformedError("map8 size too small")
    items, end = _list_items(buf, pos + 2, pos + 1 + size, buf[pos + 1])
    return _map_from(items, end)


def _dec_map32(buf: Buffer, pos: int) -> tuple[Any, int]:
    size, count = _U32X2_FROM(buf, pos)
    if size < 4:
        raise MalformedError("map32 size too small")
    items, end = _list_items(buf, pos + 8, pos + 4 + size, count)
    return _map_from(items, end)


def _array_items(buf: Buffer, pos: int, end: int, count: int) -> tuple[Any, int]:
    _need(buf, end)
    code = buf[pos]
    pos += 1
    descriptor: Any = None
    described = code == 0
    if described:
        descriptor, pos = _decode(buf, pos)
        code = buf[pos]
        pos += 1
    if code == 0 or _SKIP[code] == _UNKNOWN:
        raise MalformedError(f"bad array element constructor {code:#04x}")
    if count > (end - pos if _SKIP[code] else _MAX_ZERO_WIDTH_COUNT):
        raise MalformedError(f"array count {count} does not fit in its size")
    dec = _DEC[code]
    items = []
    append = items.append
    for _ in range(count):
        value, pos = dec(buf, pos)
        append(Described(descriptor, value) if described else value)
    if pos != end:
        raise MalformedError("array elements do not match its size field")
    return items, end


def _dec_array8(buf: Buffer, pos: int) -> tuple[Any, int]:
    size = buf[pos]
    if size < 2:
        raise MalformedError("array8 size too small")
    return _array_items(buf, pos + 2, pos + 1 + size, buf[pos + 1])


def _dec_array32(buf: Buffer, pos: int) -> tuple[Any, int]:
    size, count = _U32X2_FROM(buf, pos)
    if size < 5:
        raise MalformedError("array32 size too small")
    return _array_items(buf, pos + 8, pos + 4 + size, count)


def _dec_described(buf: Buffer, pos: int) -> tuple[Any, int]:
    descriptor, pos = _decode(buf, pos)
    value, pos = _decode(buf, pos)
    return Described(descriptor, value), pos


def _dec_list0(buf: Buffer, pos: int) -> tuple[Any, int]:
    return [], pos  # a fresh list each time


def _unknown_code(code: int) -> _Decoder:
    def dec(buf: Buffer, pos: int) -> tuple[Any, int]:
        raise MalformedError(f"unknown constructor {code:#04x} at offset {pos - 1}")

    return dec


_DEC: list[_Decoder] = [_unknown_code(c) for c in range(256)]
_DEC[0x00] = _dec_described
_DEC[0x40] = _const(None)
_DEC[0x41] = _const(True)
_DEC[0x42] = _const(False)
_DEC[0x56] = _dec_bool
_DEC[0x50] = _dec_ubyte
_DEC[0x60] = _struct(">H")
_DEC[0x70] = _struct(">I")
_DEC[0x52] = _dec_ubyte  # smalluint
_DEC[0x43] = _const(0)  # uint0
_DEC[0x80] = _struct(">Q")
_DEC[0x53] = _dec_ubyte  # smallulong
_DEC[0x44] = _const(0)  # ulong0
_DEC[0x51] = _struct(">b")
_DEC[0x61] = _struct(">h")
_DEC[0x71] = _struct(">i")
_DEC[0x54] = _struct(">b")  # smallint
_DEC[0x81] = _struct(">q")
_DEC[0x55] = _struct(">b")  # smalllong
_DEC[0x72] = _struct(">f")
_DEC[0x82] = _struct(">d")
_DEC[0x74] = _raw(4)  # decimal32
_DEC[0x84] = _raw(8)  # decimal64
_DEC[0x94] = _raw(16)  # decimal128
_DEC[0x73] = _dec_char
_DEC[0x83] = _struct(">q")  # timestamp (ms since the epoch)
_DEC[0x98] = _dec_uuid
_DEC[0xA0] = _dec_vbin8
_DEC[0xB0] = _dec_vbin32
_DEC[0xA1] = _dec_str8
_DEC[0xB1] = _dec_str32
_DEC[0xA3] = _dec_sym8
_DEC[0xB3] = _dec_sym32
_DEC[0x45] = _dec_list0
_DEC[0xC0] = _dec_list8
_DEC[0xD0] = _dec_list32
_DEC[0xC1] = _dec_map8
_DEC[0xD1] = _dec_map32
_DEC[0xE0] = _dec_array8
_DEC[0xF0] = _dec_array32

# How skip_value steps over a constructor: >= 0 fixed width; _VAR8 / _VAR32 a 1- / 4-byte size
# field follows (also for compounds and arrays, whose size covers count and items); _DESCRIBED
# a descriptor and a value follow.
_VAR8 = -1
_VAR32 = -4
_DESCRIBED = -2
_UNKNOWN = -3
_SKIP = [_UNKNOWN] * 256
_SKIP[0x00] = _DESCRIBED
for _code in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
    _SKIP[_code] = 0
for _code in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56):
    _SKIP[_code] = 1
for _code in (0x60, 0x61):
    _SKIP[_code] = 2
for _code in (0x70, 0x71, 0x72, 0x73, 0x74):
    _SKIP[_code] = 4
for _code in (0x80, 0x81, 0x82, 0x83, 0x84):
    _SKIP[_code] = 8
for _code in (0x94, 0x98):
    _SKIP[_code] = 16
for _code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
    _SKIP[_code] = _VAR8
for _code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
    _SKIP[_code] = _VAR32
del _code


def _skip(buf: Buffer, pos: int, n: int) -> int:
    """Iterative skip (described chains cannot recurse); may raise IndexError/struct.error."""
    todo = 1
    skip = _SKIP
    while True:
        if pos >= n:
            raise IncompleteError("data ends inside a value")
        k = skip[buf[pos]]
        pos += 1
        if k >= 0:
            pos += k
        elif k == _VAR8:
            pos += 1 + buf[pos]
        elif k == _VAR32:
            pos += 4 + _U32_FROM(buf, pos)[0]
        elif k == _DESCRIBED:
            todo += 1
            continue
        else:
            raise MalformedError(f"unknown constructor {buf[pos - 1]:#04x} at offset {pos - 1}")
        todo -= 1
        if not todo:
            if pos > n:
                raise IncompleteError("data ends inside a value")
            return pos


def _as_bytes_like(buf: Buffer) -> Buffer:
    if isinstance(buf, memoryview) and buf.format != "B":
        return buf.cast("B")
    return buf


def decode_value(buf: Buffer, pos: int = 0) -> tuple[Any, int]:
    """Decode the AMQP value at ``pos``; return ``(value, position after it)``."""
    buf = _as_bytes_like(buf)
    if pos < 0:
        raise MalformedError("negative position")
    try:
        return _DEC[buf[pos]](buf, pos + 1)
    except (IndexError, struct.error) as exc:
        raise IncompleteError(f"data ends inside the value at offset {pos}") from exc
    except UnicodeDecodeError as exc:
        raise MalformedError(f"invalid UTF-8 in the value at offset {pos}") from exc
    except RecursionError as exc:
        raise MalformedError(f"value at offset {pos} is nested too deeply") from exc


def skip_value(buf: Buffer, pos: int = 0) -> int:
    """Return the position after the value at ``pos``, jumping over it by its size fields.

    Only the constructors on the path and the bounds are checked: the contents of lists, maps,
    arrays, strings and binaries are not looked at.
    """
    buf = _as_bytes_like(buf)
    if pos < 0:
        raise MalformedError("negative position")
    try:
        return _skip(buf, pos, len(buf))
    except (IndexError, struct.error) as exc:
        raise IncompleteError(f"data ends inside the value at offset {pos}") from exc


# ---------------------------------------------------------------------------------------------
# Message sections
# ---------------------------------------------------------------------------------------------

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

_SECTION_SYMBOLS = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}

# Value constructors accepted for the sections scan_message steps over (null is tolerated).
_LIST_CODES = frozenset((0x40, 0x45, 0xC0, 0xD0))
_MAP_CODES = frozenset((0x40, 0xC1, 0xD1))
_SECTION_VALUE_CODES = {
    HEADER: _LIST_CODES,
    DELIVERY_ANNOTATIONS: _MAP_CODES,
    MESSAGE_ANNOTATIONS: _MAP_CODES,
    PROPERTIES: _LIST_CODES,
    APPLICATION_PROPERTIES: _MAP_CODES,
}

Span = tuple[int, int]


class MessageInfo:
    """Where the sections before the body lie; spans are ``(start, end)`` offsets covering the
    whole described section (from its 0x00 constructor to the end of its value), so
    ``buf[start:end]`` is the section exactly as encoded.
    """

    __slots__ = (
        "to",
        "header",
        "delivery_annotations",
        "message_annotations",
        "properties",
        "application_properties",
        "body_start",
    )

    def __init__(
        self,
        to: str | None = None,
        header: Span | None = None,
        delivery_annotations: Span | None = None,
        message_annotations: Span | None = None,
        properties: Span | None = None,
        application_properties: Span | None = None,
        body_start: int = 0,
    ) -> None:
        self.to = to
        self.header = header
        self.delivery_annotations = delivery_annotations
        self.message_annotations = message_annotations
        self.properties = properties
        self.application_properties = application_properties
        self.body_start = body_start

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"MessageInfo({fields})"


def _section_code(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a section descriptor (after its 0x00) in its ulong or symbolic encodings."""
    descriptor, pos = _decode(buf, pos)
    if isinstance(descriptor, Symbol):
        code = _SECTION_SYMBOLS.get(descriptor, -1)
    elif isinstance(descriptor, int) and not isinstance(descriptor, bool):
        code = descriptor
    else:
        code = -1
    if not HEADER <= code <= FOOTER:
        raise MalformedError(f"not a message section descriptor: {descriptor!r}")
    return code, pos


def _properties_to(buf: Buffer, pos: int, n: int) -> tuple[str | None, int]:
    """Return ``(to, end)`` for the properties list whose constructor is at ``pos``."""
    code = buf[pos]
    if code == 0xC0:
        count = buf[pos + 2]
        p = pos + 3
        end = pos + 2 + buf[pos + 1]
    elif code == 0xD0:
        size, count = _U32X2_FROM(buf, pos + 1)
        p = pos + 9
        end = pos + 5 + size
    else:  # list0 or null
        return None, pos + 1
    if end > n:
        raise IncompleteError("data ends inside the properties section")
    if count < 3:
        if p > end:
            raise MalformedError("bad properties list size")
        return None, end
    for _ in (0, 1):  # step over message-id and user-id (inline fast paths for the usual forms)
        if p >= end:
            raise MalformedError("properties fields overrun the list")
        code = buf[p]
        if code == 0x40:
            p += 1
        elif code == 0xA1 or code == 0xA0 or code == 0xA3:
            p += 2 + buf[p + 1]
        else:
            try:
                p = _skip(buf, p, end)
            except IncompleteError as exc:
                raise MalformedError("properties fields overrun the list") from exc
    if p >= end:
        raise MalformedError("properties fields overrun the list")
    code = buf[p]
    if code == 0xA1 or code == 0xA3:
        start = p + 2
        stop = start + buf[p + 1]
    elif code == 0xB1 or code == 0xB3:
        start = p + 5
        stop = start + _U32_FROM(buf, p + 1)[0]
    elif code == 0x40:
        return None, end
    else:
        raise MalformedError(f"properties.to has constructor {code:#04x}, not a string")
    if stop > end:
        raise MalformedError("properties.to overruns the list")
    return str(buf[start:stop], "utf-8"), end


def _scan(buf: Buffer, complete: bool) -> MessageInfo:
    n = len(buf)
    spans: list[Span | None] = [None, None, None, None, None]  # indexed by section code - 0x70
    to = None
    pos = 0
    last = 0x6F
    while True:
        if pos >= n:
            if complete:
                return MessageInfo(to, *spans, n)
            raise IncompleteError("data ends before the message body")
        start = pos
        if buf[pos]:
            raise MalformedError(f"expected a described section at offset {pos}")
        if buf[pos + 1] == 0x53:  # smallulong descriptor, the usual form
            code = buf[pos + 2]
            pos += 3
        else:
            code, pos = _section_code(buf, pos + 1)
        if code <= last or code > 0x78:  # out of order, repeated, or not a section
            raise MalformedError(f"unexpected section {code:#04x} at offset {start}")
        if code >= 0x75:  # data, amqp-sequence, amqp-value, or footer (no body)
            return MessageInfo(to, *spans, start)
        last = code
        if pos >= n:
            raise IncompleteError("data ends inside a section")
        if buf[pos] not in _SECTION_VALUE_CODES[code]:
            raise MalformedError(f"section {code:#04x} has value constructor {buf[pos]:#04x}")
        if code == 0x73:
            to, pos = _properties_to(buf, pos, n)
        else:
            pos = _skip(buf, pos, n)
        spans[code - 0x70] = (start, pos)


def scan_message(buf: Buffer, complete: bool = False) -> MessageInfo:
    """Locate the sections before the body of the encoded message in ``buf``.

    ``buf`` may hold only the start of the message: everything up to the first body section
    (data, amqp-sequence, amqp-value; or the footer if there is no body) must be present, the
    body itself is never looked at. If ``buf`` ends before a body section starts,
    :class:`IncompleteError` is raised, unless ``complete`` says ``buf`` is the whole message,
    in which case a message without body (which Proton produces for an unset body) gets
    ``body_start == len(buf)``. Sections out of order or repeated raise :class:`MalformedError`.
    """
    buf = _as_bytes_like(buf)
    try:
        return _scan(buf, complete)
    except (IndexError, struct.error) as exc:
        raise IncompleteError("data ends inside a section") from exc
    except UnicodeDecodeError as exc:
        raise MalformedError("invalid UTF-8 in properties.to or a section descriptor") from exc
    except RecursionError as exc:
        raise MalformedError("section descriptor nested too deeply") from exc


def decode_section(buf: Buffer, span: Span) -> Any:
    """Decode the value of the described section at ``span`` (as reported by :func:`scan_message`)."""
    start, end = span
    section, pos = decode_value(buf, start)
    if pos != end or not isinstance(section, Described):
        raise MalformedError(f"no section spanning {span}")
    return section.value


def message_annotations(buf: Buffer, span: Span | None) -> dict[Any, Any]:
    """Decode the message-annotations section at ``span`` into a dict (``{}`` for ``None``)."""
    if span is None:
        return {}
    value = decode_section(buf, span)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedError("message annotations are not a map with hashable keys")
    return value


# ---------------------------------------------------------------------------------------------
# FLOW echo detection on the raw frame stream
# ---------------------------------------------------------------------------------------------

_FLOW_SMALL = b"\x00\x53\x13"
_FLOW_ULONG = b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x13"
_FLOW_SYMBOL = b"\x00\xa3\x0eamqp:flow:list"
_FLOW_PATTERNS = (_FLOW_SMALL, _FLOW_ULONG, _FLOW_SYMBOL)
_FRAME_HEADER = 8
# Header, descriptor, list8 constructor/size/count, then at least 4 one-byte fields.
_MIN_FLOW_FRAME = _FRAME_HEADER + len(_FLOW_SMALL) + 3 + 4
# Bytes of the stream kept between feeds: enough for a frame header plus the longest pattern
# minus one byte, so a header/descriptor split across feeds is still seen.
_TAIL = _FRAME_HEADER + max(len(p) for p in _FLOW_PATTERNS) - 1


def _flow_echo(frame: bytes) -> tuple[int, int | None] | None:
    """``(channel, handle)`` if ``frame`` (one whole frame) is a FLOW with echo=true, else None."""
    try:
        performative, end = decode_value(frame, _FRAME_HEADER)
    except MalformedError:
        return None
    if end != len(frame) or not isinstance(performative, Described):
        return None  # a FLOW frame has no payload: the performative must fill the frame
    fields = performative.value  # the descriptor is FLOW's: the candidate was found by it
    if not isinstance(fields, list) or len(fields) < 10 or fields[9] is not True:
        return None
    if not all(type(f) is int for f in fields[1:4]):  # the mandatory windows / next-outgoing-id
        return None
    handle = fields[4]
    if handle is not None and type(handle) is not int:
        return None
    return _U16.unpack_from(frame, 6)[0], handle


_ECHO_FIELD_COUNT = 10  # echo is FLOW field 9: a list with fewer fields cannot carry echo=true


def _too_short_for_echo(buf: Buffer, d: int) -> bool:
    """Cheap pre-check: the FLOW at ``buf[d:]`` (small descriptor form) has fewer than 10 fields.

    Clients omit trailing fields (Proton never encodes ``echo``), so this rejects almost every FLOW
    without decoding it. Returns False when unsure (other descriptor forms, bytes not there yet).
    """
    c = d + 3
    if len(buf) < c + 6 or buf[d : d + 3] != _FLOW_SMALL:
        return False
    code = buf[c]
    if code == 0x45:                       # list0
        return True
    if code == 0xC0:                       # list8: size, count
        return buf[c + 2] < _ECHO_FIELD_COUNT
    if code == 0xD0 and len(buf) >= c + 9:  # list32: size, count
        return _U32_FROM(buf, c + 5)[0] < _ECHO_FIELD_COUNT
    return False


class FlowEchoDetector:
    """Find FLOW performatives with ``echo=true`` in a raw incoming AMQP byte stream.

    Feed it every chunk read from the socket (after TLS decryption), in order; :meth:`feed`
    returns ``(channel, handle)`` for each echo FLOW completed by that chunk (``handle`` is
    ``None`` for a session-level flow).

    It does not track frame boundaries: it looks for the FLOW descriptor bytes ``00 53 13``
    (smallulong, what every common client sends) with ``bytes.find``; ``all_forms=True`` also
    looks for the ulong (``00 80 00..13``) and symbolic (``amqp:flow:list``) descriptor forms, at
    the price of two more passes over each chunk (about 1.8x the cost). Each candidate is
    confirmed by the 8-byte frame header in front of it (plausible size, doff == 2, type == 0)
    and by decoding it: a valid FLOW list whose encoding ends exactly at the frame end (a FLOW
    frame has no payload) and whose mandatory fields are integers.

    False positives: only a message payload that contains this whole pattern, frame header
    included — in practice a payload that embeds an encoded echo FLOW frame — is reported. The
    caller should ignore a result for a channel/handle it does not have attached; otherwise the
    cost is one unsolicited FLOW reply carrying the current (true) link/session state.

    Not reported: frames with an extended header (doff > 2) and FLOW frames larger than
    ``max_frame`` bytes (large ``properties`` maps). A candidate whose frame continues past the
    chunk is buffered (at most ``max_frame`` bytes each) until complete. The last few bytes of
    each chunk are kept so that a frame header or descriptor split across chunks is still found.
    """

    __slots__ = ("_tail", "_pending", "_max_frame", "_offset", "_patterns")

    def __init__(self, max_frame: int = 512, all_forms: bool = False) -> None:
        self._max_frame = max_frame
        self._patterns = _FLOW_PATTERNS if all_forms else (_FLOW_SMALL,)
        self._tail = b""  # the last _TAIL bytes of the stream so far
        self._offset = 0  # stream offset of the chunk being fed
        # Candidates whose frame continues past the data seen: (stream offset, bytes so far, size).
        self._pending: list[tuple[int, bytearray, int]] = []

    def feed(self, data: Buffer) -> list[tuple[int, int | None]]:
        """Scan the next chunk of the stream; return ``(channel, handle_or_None)`` per echo FLOW."""
        if isinstance(data, memoryview):
            data = data.tobytes()
        found: list[tuple[int, tuple[int, int | None]]] = []
        if self._pending:
            self._feed_pending(data, found)
        offset = self._offset
        tail = self._tail
        lt = len(tail)
        if lt:
            # Candidates whose frame header starts in the tail and whose descriptor ends in
            # ``data``: those the scan of ``data`` alone cannot see. A frame is at most
            # max_frame bytes, so ``seam`` holds every such frame that ``data`` completes.
            seam = tail + data[: self._max_frame]
            for pattern in self._patterns:
                stop = lt + _FRAME_HEADER + len(pattern) - 1
                i = seam.find(pattern, max(_FRAME_HEADER, lt - len(pattern) + 1), stop)
                while i >= 0:
                    self._candidate(seam, i - _FRAME_HEADER, offset - lt, found)
                    i = seam.find(pattern, i + 1, stop)
        for pattern in self._patterns:
            i = data.find(pattern, _FRAME_HEADER)
            while i >= 0:
                self._candidate(data, i - _FRAME_HEADER, offset, found)
                i = data.find(pattern, i + 1)
        self._tail = bytes(data[-_TAIL:]) if len(data) >= _TAIL else (tail + data)[-_TAIL:]
        self._offset = offset + len(data)
        if not found:
            return []
        found.sort(key=lambda item: item[0])
        return [result for _, result in found]

    def _candidate(
        self, buf: Buffer, h: int, base: int, found: list[tuple[int, tuple[int, int | None]]]
    ) -> None:
        """Check the frame header at ``buf[h:h+8]`` (stream offset ``base + h``); report, buffer
        or drop the candidate."""
        if buf[h + 4] != 2 or buf[h + 5] != 0:
            return
        size = _U32_FROM(buf, h)[0]
        if size < _MIN_FLOW_FRAME or size > self._max_frame:
            return
        if _too_short_for_echo(buf, h + _FRAME_HEADER):
            return
        frame = bytes(buf[h : h + size])
        if len(frame) < size:
            self._pending.append((base + h, bytearray(frame), size))
            return
        result = _flow_echo(frame)
        if result is not None:
            found.append((base + h, result))

    def _feed_pending(self, data: Buffer, found: list[tuple[int, tuple[int, int | None]]]) -> None:
        still: list[tuple[int, bytearray, int]] = []
        for where, frame, size in self._pending:
            frame += data[: size - len(frame)]
            if len(frame) < size:
                still.append((where, frame, size))
                continue
            result = _flow_echo(bytes(frame))
            if result is not None:
                found.append((where, result))
        self._pending = still
