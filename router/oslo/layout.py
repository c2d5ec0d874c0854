"""The messages on the wire, laid out as oslo.messaging 14.x's ``amqp`` driver lays them out
(``impl_amqp1.py`` marshal_request / marshal_response), so a 14.x peer reads ours and we read theirs.

- request (call, cast, notification): body an AMQP string holding JSON
  ``{"request": MESSAGE, "context": CTXT[, "call_monitor_timeout": S]}`` (notifications of envelope
  version 2.0 carry ``common.serialize_msg(MESSAGE)``); a call has ``message-id`` (32 hex digits) and
  ``reply-to`` (the caller's dynamic reply address); with a timeout, ``ttl`` and ``absolute-expiry-time``;
- reply: ``correlation-id`` = the request's ``message-id``, body a JSON string ``{"response": R}`` or
  ``{"failure": SERIALIZED}``;
- heartbeat (``call_monitor_timeout``): a message with no body, the ``correlation-id`` and a ``ttl``.
"""

from __future__ import annotations

import time
from typing import Any

from oslo_messaging._drivers import common
from oslo_serialization import jsonutils
from proton import Message


def request(message: dict, ctxt: dict, envelope: bool = False, monitor: float | None = None,
            timeout: float | None = None) -> Message:
    """A request or notification."""
    msg = Message(inferred=True)
    data: dict[str, Any] = {"request": common.serialize_msg(message) if envelope else message,
                            "context": ctxt}
    if monitor is not None:
        data["call_monitor_timeout"] = monitor
    msg.body = jsonutils.dumps(data)
    if timeout:
        msg.ttl = timeout
        msg.expiry_time = time.time() + timeout
    return msg


def read_request(msg: Message) -> tuple[dict, dict, float | None]:
    """(message, context, call_monitor_timeout) of a request."""
    data = jsonutils.loads(msg.body)
    return common.deserialize_msg(data.get("request")), data.get("context"), data.get("call_monitor_timeout")


def reply(correlation_id: Any, result: Any = None, failure: Any = None) -> Message:
    """A reply: the result, or the failure (an exc_info tuple) serialized the oslo way."""
    msg = Message(inferred=True)
    data = {"failure": common.serialize_remote_exception(failure)} if failure else {"response": result}
    msg.body = jsonutils.dumps(data)
    msg.correlation_id = correlation_id
    return msg


def read_reply(msg: Message, allowed_exmods: list[str]) -> Any:
    """The result of a reply; raises the remote exception it carries."""
    data = jsonutils.loads(msg.body)
    failure = data.get("failure")
    if failure is not None:
        raise common.deserialize_remote_exception(failure, allowed_exmods)
    return data.get("response")


def heartbeat(correlation_id: Any, ttl: float | None) -> Message:
    """An empty message that resets the caller's call-monitor timer."""
    msg = Message()
    msg.correlation_id = correlation_id
    if ttl:
        msg.ttl = ttl
    return msg


def is_heartbeat(msg: Message) -> bool:
    return msg.body is None
