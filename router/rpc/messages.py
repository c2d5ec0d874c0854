"""The messages `router.rpc` exchanges: requests, replies, error replies and notifications.

- A request (call) carries ``id`` (unique per client), ``reply_to`` (the client's dynamic reply address),
  ``address`` (the target), the body and optional application properties. A cast is the same without
  ``reply_to``.
- A reply carries ``correlation_id`` = the request's ``id`` and goes to the request's ``reply_to``.
- An error reply has no body and the application property ``error`` = ``"ExcType: message"`` (plus
  ``error_type`` = ``"ExcType"``); the caller raises it as :class:`~router.rpc.errors.RpcError`.
- A notification's body is a map ``{"event_type", "payload", "priority", "publisher_id", "timestamp",
  "message_id"}`` (the fields of an oslo.messaging notification), with ``event_type`` and ``priority``
  also as application properties so a router or listener can look at them without decoding the body.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proton import Message

from router.amqp.message import encode_message

from .errors import RpcError

ERROR_PROPERTY = "error"
ERROR_TYPE_PROPERTY = "error_type"


@dataclass
class Reply:
    """What a server handler may return instead of a bare body, to add application properties."""

    body: Any = None
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass
class Notification:
    """One notification as a listener receives it."""

    event_type: str
    payload: Any
    priority: str
    publisher_id: str | None = None
    timestamp: float | None = None
    message_id: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)


def request(address: str, body: Any, message_id: str, reply_to: str | None,
            properties: Mapping[str, Any] | None = None) -> Message:
    """A call (with ``reply_to``) or cast (without) message."""
    return Message(body=body, id=message_id, address=address, reply_to=reply_to,
                   properties=dict(properties) if properties else None)


_SCALARS = frozenset((str, bytes, bool, float, type(None)))
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _plain(value: Any, depth: int = 0) -> bool:
    """True if ``value`` is made of plain Python types only (exactly ``str``, ``bytes``, ``bool``,
    ``float``, ``None``, ``int`` in the long range, ``list``, ``tuple``, ``dict``), which router.amqp's
    encoder writes as python-qpid-proton does. Proton's own types (``symbol``, ``ulong``, ``Described``,
    ...) and subclasses are not plain."""
    t = type(value)
    if t in _SCALARS:
        return True
    if t is int:
        return _LONG_MIN <= value <= _LONG_MAX
    if depth > 32:
        return False
    if t is list or t is tuple:
        return all(_plain(v, depth + 1) for v in value)
    if t is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _plain_properties(properties: Mapping[str, Any] | None) -> bool:
    return properties is None or (type(properties) is dict
                                  and all(type(k) is str and _plain(v) for k, v in properties.items()))


def encode_request(address: str, body: Any, message_id: str, reply_to: str | None,
                   properties: Mapping[str, Any] | None = None) -> bytes:
    """The encoded :func:`request`. Plain bodies and properties (see :func:`_plain`) are encoded by
    router.amqp, about 5x cheaper than building a ``proton.Message``; the receiver decodes the same
    message (only the all-default header section is left out). Anything else goes through Proton."""
    if type(message_id) is str and _plain(body) and _plain_properties(properties):
        return encode_message(body=body, message_id=message_id, to=address, reply_to=reply_to,
                              application_properties=dict(properties) if properties else None)
    return bytes(request(address, body, message_id, reply_to, properties).encode())


def encode_reply(req: Message, result: Any) -> bytes:
    """The encoded :func:`reply` (router.amqp for plain results, as :func:`encode_request`)."""
    if isinstance(result, Reply):
        body, props = result.body, dict(result.properties) or None
    else:
        body, props = result, None
    cid, reply_to = req.id, req.reply_to        # (properties of proton.Message: each read goes to C)
    if type(cid) is str and type(reply_to) is str and _plain(body) and _plain_properties(props):
        return encode_message(body=body, to=reply_to, correlation_id=cid, application_properties=props)
    return bytes(reply(req, result).encode())


def reply(req: Message, result: Any) -> Message:
    """The reply to ``req`` carrying a handler's result (a body, or a :class:`Reply`)."""
    if isinstance(result, Reply):
        body, props = result.body, dict(result.properties) or None
    else:
        body, props = result, None
    return Message(body=body, address=req.reply_to, correlation_id=req.id, properties=props)


def describe_exception(exc: BaseException) -> str:
    """``"ExcType: message"`` (just ``"ExcType"`` when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def error_reply(req: Message, exc: BaseException) -> Message:
    """The reply telling the caller that the handler raised ``exc``."""
    return Message(body=None, address=req.reply_to, correlation_id=req.id,
                   properties={ERROR_PROPERTY: describe_exception(exc),
                               ERROR_TYPE_PROPERTY: type(exc).__name__})


def reply_error(msg: Message) -> str | None:
    """The ``error`` property of a reply, or None for a normal reply."""
    props = msg.properties or {}
    err = props.get(ERROR_PROPERTY)
    return None if err is None else str(err)


def unpack_reply(msg: Message) -> Any:
    """A reply's body, or raise :class:`RpcError` for an error reply."""
    err = reply_error(msg)
    if err is not None:
        raise RpcError(err)
    return msg.body


def notification(address: str, event_type: str, payload: Any, priority: str = "info",
                 publisher_id: str | None = None, properties: Mapping[str, Any] | None = None) -> Message:
    """A notification message (see the module docstring for its layout)."""
    message_id = str(uuid.uuid4())
    body = {"event_type": event_type, "payload": payload, "priority": priority,
            "publisher_id": publisher_id, "timestamp": time.time(), "message_id": message_id}
    props = dict(properties or {})
    props.update(event_type=event_type, priority=priority)
    return Message(body=body, id=message_id, address=address, properties=props)


def parse_notification(msg: Message) -> Notification:
    """A received notification; a message that is not one becomes ``event_type=""`` with the body as
    payload."""
    props = dict(msg.properties or {})
    body = msg.body
    if isinstance(body, dict) and "event_type" in body:
        return Notification(event_type=str(body.get("event_type")), payload=body.get("payload"),
                            priority=str(body.get("priority") or props.get("priority") or ""),
                            publisher_id=body.get("publisher_id"), timestamp=body.get("timestamp"),
                            message_id=body.get("message_id"), properties=props)
    return Notification(event_type=str(props.get("event_type") or ""), payload=body,
                        priority=str(props.get("priority") or ""), properties=props)
