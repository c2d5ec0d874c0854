"""Message mapping between AMQP 1.0 (encoded bytes, as the node forwards them) and AMQP 0-9-1
(encoded content-header properties + body towards the broker, pika ``BasicProperties`` + body from it).

=====================================  ======================================================
AMQP 1.0                               AMQP 0-9-1
=====================================  ======================================================
header.durable                         delivery-mode 2 (1 when not durable)
header.priority                        priority
header.ttl (ms)                        expiration (ms, as a string)
properties.message-id / correlation-id message-id / correlation-id (non-string ids as text,
                                       their type in ``x-amqp1-message-id-type`` /
                                       ``x-amqp1-correlation-id-type``: ulong, uuid, binary)
properties.reply-to                    reply-to
properties.content-type / -encoding    content-type / content-encoding
properties.subject                     type
properties.creation-time (ms)          timestamp (s), and ``x-amqp1-creation-time`` (ms) when it
                                       is not a whole second
properties.to                          not carried when it is the bridged address, else the
                                       header ``x-amqp1-to``; from the broker, ``to`` is the
                                       bridged address unless that header says otherwise
properties.group-id                    header ``x-amqp1-group-id``
application-properties                 headers (double, uuid and symbol values as text, their
                                       types in the table ``x-amqp1-types``)
one ``data`` section                   the body bytes
any other body (amqp-value,            the encoded body sections verbatim, marked by the
amqp-sequence, several data, footer)   header ``x-amqp1-body: sections``
=====================================  ======================================================

A durable address makes every message persistent (delivery-mode 2); a message that was not durable
carries ``x-amqp1-durable: false`` so the round trip restores it. Headers cost the broker (RabbitMQ
decodes the table of every publish: about 3 µs of broker CPU per entry here), so the mapping adds
them only where a field needs one. Headers starting with ``x-amqp1-``
are this mapping's own and never become application properties; neither do 0-9-1 header values that
AMQP 1.0 application properties cannot hold (tables and arrays, such as RabbitMQ's ``x-death``).
Message and delivery annotations and ``user-id`` are not carried.
"""

from __future__ import annotations

import datetime
import decimal
import struct
import uuid
from typing import Any

from pika import BasicProperties
from pika.data import encode_value
from pika.exceptions import UnsupportedAMQPFieldException

from router.amqp.codec import (
    Described,
    MalformedError,
    Symbol,
    decode_section,
    decode_value,
    scan_message,
    skip_value,
)
from router.gateway.amqp10 import (
    APPLICATION_PROPERTIES,
    DATA,
    HEADER,
    PROPERTIES,
    Timestamp,
    UByte,
    UInt,
    ULong,
    data_section,
    fields_list,
    section,
)
from router.gateway.amqp10 import encode_value as encode_1

MARK = "x-amqp1-"
BODY_MARK = "x-amqp1-body"
DURABLE_MARK = "x-amqp1-durable"
TYPES_MARK = "x-amqp1-types"       # application property -> AMQP 1.0 type pika cannot carry
TAG_HEADER = "x-amqp1-gw-seq"      # the gateway's publish sequence number (to match basic.return)


class MappingError(ValueError):
    """The AMQP 1.0 message cannot be read (malformed sections)."""


def _id_in(text: str | None, kind: Any) -> Any:
    if text is None or kind is None:
        return text
    try:
        if kind == "uuid":
            return uuid.UUID(text)
        if kind == "binary":
            return bytes.fromhex(text)
        if kind == "ulong":
            return ULong(int(text))
    except ValueError:
        pass
    return text


def _header_value(key: str, value: Any, types: dict[str, str]) -> Any:
    """A 0-9-1 header value for an application property (pika has no float or uuid field type)."""
    if isinstance(value, float):
        types[key] = "double"
        return repr(value)
    if isinstance(value, uuid.UUID):
        types[key] = "uuid"
        return str(value)
    if isinstance(value, Symbol):
        types[key] = "symbol"
        return str(value)
    if isinstance(value, Described | list | dict):
        return None
    return value


def _typed(value: Any, kind: Any) -> Any:
    try:
        if kind == "double":
            return float(value)
        if kind == "uuid":
            return uuid.UUID(value)
        if kind == "symbol":
            return Symbol(value)
    except (TypeError, ValueError):
        pass
    return value


class Outgoing:
    """A message mapped for basic.publish: the 0-9-1 properties, encoded, and the body.

    The headers table is kept as encoded entries so that the publisher can add its sequence number
    (:data:`TAG_HEADER`) without encoding the properties again (:meth:`properties`)."""

    __slots__ = ("flags", "head", "entries", "tail", "body")

    def __init__(self, flags: int, head: bytes, entries: bytes, tail: bytes, body: bytes) -> None:
        self.flags = flags          # property flags (the headers flag is added when there are headers)
        self.head = head            # content-type, content-encoding
        self.entries = entries      # the headers table's entries
        self.tail = tail            # delivery-mode ... type
        self.body = body

    def properties(self, seq: int | None = None) -> bytes:
        """The encoded property flags and list, with ``TAG_HEADER = seq`` in the headers if given."""
        entries = self.entries
        if seq is not None:
            return b"".join((_H.pack(self.flags | _HEADERS), self.head, _I.pack(len(entries) + _TAG_SIZE),
                             entries, _TAG_KEY, _Q.pack(seq), self.tail))
        if entries:
            return b"".join((_H.pack(self.flags | _HEADERS), self.head, _I.pack(len(entries)), entries,
                             self.tail))
        return b"".join((_H.pack(self.flags), self.head, self.tail))

    def basic_properties(self, seq: int | None = None) -> BasicProperties:
        """The same properties as pika's object (for pika's own basic_publish)."""
        props = BasicProperties()
        props.decode(self.properties(seq))
        return props


_H, _I, _Q, _B = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">q"), struct.Struct(">Q")
_II = struct.Struct(">II")
_TAG_KEY = bytes((len(TAG_HEADER),)) + TAG_HEADER.encode() + b"l"
_TAG_SIZE = len(_TAG_KEY) + 8
# 0-9-1 property flags
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS, _DELIVERY_MODE = 1 << 15, 1 << 14, 1 << 13, 1 << 12
_PRIORITY, _CORRELATION_ID, _REPLY_TO, _EXPIRATION = 1 << 11, 1 << 10, 1 << 9, 1 << 8
_MESSAGE_ID, _TIMESTAMP, _TYPE = 1 << 7, 1 << 6, 1 << 5
_SECTION_CODES = {HEADER: 0, PROPERTIES: 1, APPLICATION_PROPERTIES: 2}


def _shortstr(value: Any, what: str) -> bytes:
    raw = value.encode() if isinstance(value, str) else str(value).encode()
    if len(raw) > 255:
        raise MappingError(f"{what} is longer than 255 bytes: AMQP 0-9-1 cannot carry it")
    return bytes((len(raw),)) + raw


def _sections(data: bytes) -> tuple[list[Any], bytes, bool]:
    """``([header, properties, application-properties], body sections, body is one data section)``."""
    found: list[Any] = [None, None, None]
    n = len(data)
    pos = 0
    last = 0x6F
    while pos < n:
        if data[pos] != 0 or data[pos + 1] != 0x53:
            return _sections_slow(data)                  # a symbolic or ulong descriptor: rare
        code = data[pos + 2]
        if code <= last or code > 0x78:
            raise MalformedError(f"unexpected section {code:#04x} at offset {pos}")
        if code >= DATA:
            break
        last = code
        slot = _SECTION_CODES.get(code)
        if slot is None:                                  # annotations: not carried
            pos = skip_value(data, pos + 3)
        elif slot < 2:
            found[slot], pos = _fields(data, pos + 3)     # header, properties: lists
        else:
            found[slot], pos = decode_value(data, pos + 3)
    body = data[pos:]
    single = False
    if body[:3] == b"\x00\x53\x75":
        if body[3] == 0xA0:
            start, size = 5, body[4]
        elif body[3] == 0xB0:
            start, size = 8, _I.unpack_from(body, 4)[0]
        else:
            raise MalformedError("a data section that is not binary")
        if start + size == len(body):
            return found, body[start:], True
        if start + size > len(body):
            raise MalformedError("the data section overruns the message")
    return found, body, single


def _fields(data: bytes, pos: int) -> tuple[Any, int]:
    """A header or properties list: the usual small encodings inline, anything else by the codec."""
    c = data[pos]
    if c == 0x45:
        return [], pos + 1                               # list0: an empty header (Proton's default)
    if c == 0xC0:
        count, p, end = data[pos + 2], pos + 3, pos + 2 + data[pos + 1]
    elif c == 0xD0:
        size, count = _II.unpack_from(data, pos + 1)
        p, end = pos + 9, pos + 5 + size
    else:
        return decode_value(data, pos)                   # list0, null, or malformed
    out: list[Any] = []
    append = out.append
    for _ in range(count):
        c = data[p]
        if c == 0x40:
            append(None)
            p += 1
        elif c == 0xA1 or c == 0xA3:
            k = data[p + 1]
            text = data[p + 2:p + 2 + k].decode()
            append(text if c == 0xA1 else Symbol(text))
            p += 2 + k
        elif c == 0x53 or c == 0x50 or c == 0x52:         # smallulong, ubyte, smalluint
            append(data[p + 1])
            p += 2
        elif c == 0x41 or c == 0x42:
            append(c == 0x41)
            p += 1
        else:
            value, p = decode_value(data, p)
            append(value)
    if p != end:
        raise MalformedError("list fields do not fill the list")
    return out, end


def _sections_slow(data: bytes) -> tuple[list[Any], bytes, bool]:
    info = scan_message(data, complete=True)
    found = [decode_section(data, span) if span else None
             for span in (info.header, info.properties, info.application_properties)]
    body = data[info.body_start:]
    if body:
        value, end = decode_value(body, 0)
        if end == len(body) and isinstance(value, Described) and value.descriptor == DATA:
            return found, bytes(value.value), True
    return found, body, False


def to_091(data: bytes, persistent: bool = False, address: str | None = None) -> Outgoing:
    """Map an encoded AMQP 1.0 message to encoded 0-9-1 properties and a body.

    ``persistent`` forces delivery-mode 2 (a durable bridged address); a ``to`` equal to ``address``
    (the bridged address) is not carried. Raises :class:`MappingError` for a message that cannot be
    read or carried."""
    try:
        sections = _sections(data)
    except (MalformedError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise MappingError(str(exc) or "truncated message") from None
    try:
        return _outgoing(*sections, persistent, address)
    except (TypeError, ValueError, AttributeError) as exc:   # fields of the wrong AMQP types
        if isinstance(exc, MappingError):
            raise
        raise MappingError(f"unexpected field types: {exc}") from None


def _entry(key: str, value: Any) -> bytes:
    """One encoded headers-table entry (pika's field types: str -> S, bool -> t, int -> l, ...)."""
    k = key.encode()
    if len(k) > 255:
        raise MappingError(f"application property name longer than 255 bytes: {key[:40]!r}...")
    t = type(value)
    if t is str:
        v = value.encode()
        return b"".join((bytes((len(k),)), k, b"S", _I.pack(len(v)), v))
    if t is int:
        return b"".join((bytes((len(k),)), k, b"l", _Q.pack(value)))
    pieces = [bytes((len(k),)), k]
    encode_value(pieces, value)
    return b"".join(pieces)


def _text_entry(prefix: bytes, value: str) -> bytes:
    v = value.encode()
    return b"".join((prefix, _I.pack(len(v)), v))


def _text_prefix(key: str) -> bytes:
    return bytes((len(key),)) + key.encode() + b"S"


_SECTIONS_ENTRY = _entry(BODY_MARK, "sections")
_NOT_DURABLE_ENTRY = _entry(DURABLE_MARK, False)
_ID_TYPE_ENTRY = {(name, kind): _entry(f"{MARK}{name}-type", kind)
                  for name in ("message-id", "correlation-id") for kind in ("uuid", "binary", "ulong")}
_TO, _GROUP_ID = _text_prefix(f"{MARK}to"), _text_prefix(f"{MARK}group-id")
_CREATION_TIME = bytes((len(f"{MARK}creation-time"),)) + f"{MARK}creation-time".encode() + b"l"


def _id_text(value: Any, name: str, entries: list[bytes]) -> str | None:
    """A message / correlation id as 0-9-1 text; non-string ids add their type to the headers."""
    if value is None or type(value) is str:
        return value
    if isinstance(value, uuid.UUID):
        kind, text = "uuid", str(value)
    elif isinstance(value, bytes):
        kind, text = "binary", value.hex()
    elif isinstance(value, int) and not isinstance(value, bool):
        kind, text = "ulong", str(value)
    elif isinstance(value, str):
        return str(value)
    else:
        raise MappingError(f"{name} of unsupported type {type(value).__name__}")
    entries.append(_ID_TYPE_ENTRY[name, kind])
    return text


def _outgoing(found: list[Any], payload: bytes, single_data: bool, persistent: bool,
              address: str | None) -> Outgoing:
    hdr, prop, app = found
    entries: list[bytes] = []
    if isinstance(app, dict) and app:
        types: dict[str, str] = {}
        try:
            for k, v in app.items():
                if isinstance(k, str) and not k.startswith(MARK):
                    entries.append(_entry(str(k), _header_value(str(k), v, types)))
            if types:
                entries.append(_entry(TYPES_MARK, types))
        except (UnsupportedAMQPFieldException, struct.error) as exc:
            raise MappingError(f"an application property cannot be a 0-9-1 header: {exc!r}") from None
    if not single_data:
        entries.append(_SECTIONS_ENTRY)
    if type(hdr) is not list:
        hdr = []
    nh = len(hdr)
    durable = nh > 0 and bool(hdr[0])
    if persistent and not durable:
        entries.append(_NOT_DURABLE_ENTRY)
    flags = _DELIVERY_MODE
    head = b""
    tail = [b"\x02" if durable or persistent else b"\x01"]
    if nh > 1 and hdr[1] is not None:
        flags |= _PRIORITY
        tail.append(bytes((hdr[1] & 0xFF,)))
    p = prop if type(prop) is list else []
    if len(p) < 11:
        p = p + [None] * (11 - len(p))
    if p[6] is not None:
        flags |= _CONTENT_TYPE
        head = _shortstr(p[6], "content-type")
    if p[7] is not None:
        flags |= _CONTENT_ENCODING
        head += _shortstr(p[7], "content-encoding")
    correlation_id = _id_text(p[5], "correlation-id", entries)
    if correlation_id is not None:
        flags |= _CORRELATION_ID
        tail.append(_shortstr(correlation_id, "correlation-id"))
    if p[4] is not None:
        flags |= _REPLY_TO
        tail.append(_shortstr(p[4], "reply-to"))
    if nh > 2 and hdr[2] is not None:
        flags |= _EXPIRATION
        tail.append(_shortstr(str(hdr[2]), "ttl"))
    message_id = _id_text(p[0], "message-id", entries)
    if message_id is not None:
        flags |= _MESSAGE_ID
        tail.append(_shortstr(message_id, "message-id"))
    created = p[9]
    if created is not None:
        if not isinstance(created, int) or created < 0:
            raise MappingError("creation-time is not a timestamp after 1970")
        flags |= _TIMESTAMP
        tail.append(_B.pack(created // 1000))
        if created % 1000:                   # the 0-9-1 timestamp has whole seconds only
            entries.append(_CREATION_TIME + _Q.pack(created))
    if p[3] is not None:
        flags |= _TYPE
        tail.append(_shortstr(p[3], "subject"))
    if p[2] is not None and p[2] != address:
        entries.append(_text_entry(_TO, str(p[2])))
    if p[10] is not None:
        entries.append(_text_entry(_GROUP_ID, str(p[10])))
    return Outgoing(flags, head, b"".join(entries), b"".join(tail), payload)


def _app_value(value: Any) -> tuple[bool, Any]:
    if isinstance(value, bool | int | float | str | bytes) or value is None:
        return True, value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return True, Timestamp(int(value.timestamp() * 1000))
    if isinstance(value, decimal.Decimal):
        return True, str(value)
    return False, None       # tables and arrays: not allowed in application-properties


_NO_HEADERS: dict[str, Any] = {}
_K_MSGID_TYPE, _K_CORRID_TYPE = f"{MARK}message-id-type", f"{MARK}correlation-id-type"
_K_TO, _K_GROUP_ID, _K_CREATION = f"{MARK}to", f"{MARK}group-id", f"{MARK}creation-time"
_PROPERTIES_HEAD = bytes((0x00, 0x53, PROPERTIES))


def _str(value: Any) -> bytes:
    raw = value.encode() if type(value) is str else str(value).encode()
    n = len(raw)
    return b"\xa1" + bytes((n,)) + raw if n < 256 else b"\xb1" + _I.pack(n) + raw


def _sym(value: Any) -> bytes:
    raw = value.encode() if type(value) is str else str(value).encode()
    n = len(raw)
    return b"\xa3" + bytes((n,)) + raw if n < 256 else b"\xb3" + _I.pack(n) + raw


def _properties_section(fields: list[bytes | None]) -> bytes:
    """The properties section from encoded fields (None: null), trailing nulls dropped."""
    n = len(fields)
    while n and fields[n - 1] is None:
        n -= 1
    if not n:
        return b""
    items = b"".join(b"\x40" if f is None else f for f in fields[:n])
    if len(items) + 1 < 256:
        return _PROPERTIES_HEAD + bytes((0xC0, len(items) + 1, n)) + items
    return _PROPERTIES_HEAD + b"\xd0" + _I.pack(len(items) + 4) + _I.pack(n) + items


def from_091(props: BasicProperties, body: bytes, address: str | None = None) -> bytes:
    """Encode a 0-9-1 message (properties and body) as an AMQP 1.0 message; ``to`` is ``address``
    (the bridged address) unless the message carries another one."""
    headers = props.headers or _NO_HEADERS
    get = headers.get
    out = []
    durable = props.delivery_mode == 2 and get(DURABLE_MARK) is not False
    ttl = None
    if props.expiration is not None:
        try:
            ttl = UInt(int(props.expiration))
        except ValueError:
            ttl = None
    priority = UByte(props.priority) if props.priority is not None else None
    if durable or priority is not None or ttl is not None:
        out.append(section(HEADER, fields_list([durable, priority, ttl])))
    creation = get(_K_CREATION)
    if creation is None and props.timestamp is not None:
        creation = props.timestamp * 1000
    message_id = _id_in(props.message_id, get(_K_MSGID_TYPE))
    correlation_id = _id_in(props.correlation_id, get(_K_CORRID_TYPE))
    to = get(_K_TO, address)
    group_id = get(_K_GROUP_ID)
    out.append(_properties_section([
        None if message_id is None else _str(message_id) if type(message_id) is str else encode_1(message_id),
        None,
        None if to is None else _str(to),
        None if props.type is None else _str(props.type),
        None if props.reply_to is None else _str(props.reply_to),
        None if correlation_id is None else _str(correlation_id) if type(correlation_id) is str
        else encode_1(correlation_id),
        None if props.content_type is None else _sym(props.content_type),
        None if props.content_encoding is None else _sym(props.content_encoding),
        None,
        None if creation is None else encode_1(Timestamp(creation)),
        None if group_id is None else _str(group_id),
    ]))
    if headers:
        app = {}
        types = get(TYPES_MARK)
        if not isinstance(types, dict):
            types = {}
        for k, v in headers.items():
            if not isinstance(k, str) or k.startswith(MARK):
                continue
            ok, value = _app_value(v)
            if ok:
                app[k] = _typed(value, types.get(k)) if k in types else value
        if app:
            out.append(section(APPLICATION_PROPERTIES, app))
    if get(BODY_MARK) == "sections":
        out.append(bytes(body))
    else:
        out.append(data_section(bytes(body)))
    return b"".join(out)
