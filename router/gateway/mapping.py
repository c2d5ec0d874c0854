"""Message mapping between AMQP 1.0 (encoded bytes, as the node forwards them) and AMQP 0-9-1
(pika ``BasicProperties`` + body).

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
properties.creation-time (ms)          timestamp (s) and ``x-amqp1-creation-time`` (ms)
properties.to / group-id               headers ``x-amqp1-to`` / ``x-amqp1-group-id``
application-properties                 headers (double, uuid and symbol values as text, their
                                       types in the table ``x-amqp1-types``)
one ``data`` section                   the body bytes
any other body (amqp-value,            the encoded body sections verbatim, marked by the
amqp-sequence, several data, footer)   header ``x-amqp1-body: sections``
=====================================  ======================================================

A durable address makes every message persistent (delivery-mode 2); a message that was not durable
carries ``x-amqp1-durable: false`` so the round trip restores it. Headers starting with ``x-amqp1-``
are this mapping's own and never become application properties; neither do 0-9-1 header values that
AMQP 1.0 application properties cannot hold (tables and arrays, such as RabbitMQ's ``x-death``).
Message and delivery annotations and ``user-id`` are not carried.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

from pika import BasicProperties

from router.amqp.codec import Described, MalformedError, Symbol, decode_section, decode_value, scan_message
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

MARK = "x-amqp1-"
BODY_MARK = "x-amqp1-body"
DURABLE_MARK = "x-amqp1-durable"
TYPES_MARK = "x-amqp1-types"       # application property -> AMQP 1.0 type pika cannot carry
TAG_HEADER = "x-amqp1-gw-seq"      # the gateway's publish sequence number (to match basic.return)


class MappingError(ValueError):
    """The AMQP 1.0 message cannot be read (malformed sections)."""


def _id_out(value: Any, name: str, headers: dict[str, Any]) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID):
        kind, text = "uuid", str(value)
    elif isinstance(value, bytes):
        kind, text = "binary", value.hex()
    elif isinstance(value, int) and not isinstance(value, bool):
        kind, text = "ulong", str(value)
    else:
        raise MappingError(f"{name} of unsupported type {type(value).__name__}")
    headers[f"{MARK}{name}-type"] = kind
    return text


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


def to_091(data: bytes, persistent: bool = False) -> tuple[BasicProperties, bytes]:
    """Map an encoded AMQP 1.0 message to 0-9-1 properties and body.

    ``persistent`` forces delivery-mode 2 (a durable bridged address)."""
    try:
        info = scan_message(data, complete=True)
        hdr = decode_section(data, info.header) if info.header else None
        prop = decode_section(data, info.properties) if info.properties else None
        app = decode_section(data, info.application_properties) if info.application_properties else None
        body = data[info.body_start:]
        single_data = False
        if body:
            value, end = decode_value(body, 0)
            single_data = end == len(body) and isinstance(value, Described) and value.descriptor == DATA
    except MalformedError as exc:
        raise MappingError(str(exc)) from None
    headers: dict[str, Any] = {}
    if isinstance(app, dict):
        types: dict[str, str] = {}
        for k, v in app.items():
            if isinstance(k, str) and not k.startswith(MARK):
                headers[str(k)] = _header_value(str(k), v, types)
        if types:
            headers[TYPES_MARK] = types
    if single_data:
        payload = value.value
    else:
        payload = bytes(body)
        headers[BODY_MARK] = "sections"
    hdr = hdr or []
    durable = bool(hdr[0]) if len(hdr) > 0 and hdr[0] is not None else False
    priority = hdr[1] if len(hdr) > 1 else None
    ttl = hdr[2] if len(hdr) > 2 else None
    if persistent and not durable:
        headers[DURABLE_MARK] = False
    props = BasicProperties(delivery_mode=2 if durable or persistent else 1)
    if priority is not None:
        props.priority = priority
    if ttl is not None:
        props.expiration = str(ttl)
    p = (prop or []) + [None] * 13
    props.message_id = _id_out(p[0], "message-id", headers)
    if p[2] is not None:
        headers[f"{MARK}to"] = str(p[2])
    if p[3] is not None:
        props.type = str(p[3])
    if p[4] is not None:
        props.reply_to = str(p[4])
    props.correlation_id = _id_out(p[5], "correlation-id", headers)
    if p[6] is not None:
        props.content_type = str(p[6])
    if p[7] is not None:
        props.content_encoding = str(p[7])
    if p[9] is not None:
        props.timestamp = p[9] // 1000
        headers[f"{MARK}creation-time"] = p[9]
    if p[10] is not None:
        headers[f"{MARK}group-id"] = str(p[10])
    if headers:
        props.headers = headers
    return props, payload


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


def from_091(props: BasicProperties, body: bytes) -> bytes:
    """Encode a 0-9-1 message (properties and body) as an AMQP 1.0 message."""
    headers = dict(props.headers or {})
    out = []
    durable = props.delivery_mode == 2 and headers.get(DURABLE_MARK) is not False
    ttl = None
    if props.expiration is not None:
        try:
            ttl = UInt(int(props.expiration))
        except ValueError:
            ttl = None
    priority = UByte(props.priority) if props.priority is not None else None
    if durable or priority is not None or ttl is not None:
        out.append(section(HEADER, fields_list([durable, priority, ttl])))
    creation = headers.get(f"{MARK}creation-time")
    if creation is None and props.timestamp is not None:
        creation = props.timestamp * 1000
    fields = [
        _id_in(props.message_id, headers.get(f"{MARK}message-id-type")),
        None,
        headers.get(f"{MARK}to"),
        props.type,
        props.reply_to,
        _id_in(props.correlation_id, headers.get(f"{MARK}correlation-id-type")),
        Symbol(props.content_type) if props.content_type is not None else None,
        Symbol(props.content_encoding) if props.content_encoding is not None else None,
        None,
        Timestamp(creation) if creation is not None else None,
        headers.get(f"{MARK}group-id"),
    ]
    fields = fields_list(fields)
    if fields:
        out.append(section(PROPERTIES, fields))
    app = {}
    types = headers.get(TYPES_MARK)
    if not isinstance(types, dict):
        types = {}
    for k, v in headers.items():
        if k.startswith(MARK):
            continue
        ok, value = _app_value(v)
        if ok:
            app[k] = _typed(value, types.get(k)) if k in types else value
    if app:
        out.append(section(APPLICATION_PROPERTIES, app))
    if headers.get(BODY_MARK) == "sections":
        out.append(bytes(body))
    else:
        out.append(data_section(bytes(body)))
    return b"".join(out)
