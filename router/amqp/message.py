"""Bare AMQP 1.0 messages as plain Python values, for the node's own control and management messages.

:func:`encode_message` builds the bytes of a message from keyword arguments; :func:`decode_message`
reads a whole encoded message into an :class:`AmqpMessage`, and :func:`decode_message_steps` does the same
in steps of a bounded number of values (a generator), for a message too large to decode in one loop turn.
Values are encoded by :func:`router.amqp.encode.encode_value` and decoded by
:func:`router.amqp.codec.decode_value` (see their modules for the type mapping). No ``proton``: the node's
code above the adapter uses this instead of python-qpid-proton's ``Message``, whose clients read these
messages unchanged.

Rules :func:`decode_message` enforces (each broken rule raises :class:`MalformedError` naming the
section and its offset; data that ends too early raises its subclass ``IncompleteError``):

* the message is a sequence of described sections, with ulong or symbolic descriptors, in the order
  AMQP 1.0 fixes: header, delivery-annotations, message-annotations, properties,
  application-properties, body, footer; each at most once, except that the body is either one
  amqp-value section or one or more data sections or one or more amqp-sequence sections (not
  mixed); nothing follows the footer; a message with no section at all is refused;
* header and properties are lists (at most 5 and 13 fields, each of its AMQP type or null);
  delivery-annotations, message-annotations, application-properties and footer are maps; data is
  binary; amqp-sequence a list. A null section counts as an absent one. A section value of the
  wrong type raises the subclass :class:`SectionTypeError`;
* map keys may be of any AMQP type that is hashable once decoded (binary keys become ``bytes``); a
  key that is not (a list or a map) is refused wherever the map is;
* every value decodes: UTF-8 strings, sizes and counts that fit, known constructors.

Deviations from python-qpid-proton's ``Message.decode`` (which reads the same messages otherwise):
Proton accepts sections out of order or repeated and bytes after the last section, silently drops
a properties field of the wrong type, and cannot read a map with binary keys (it decodes them as
unhashable ``memoryview``); here the first three are errors and binary keys are ``bytes``.
Application-property keys and values are not restricted to strings and simple types (Proton does
not restrict them either). A key repeated in a map is not detected: the last value wins (as in
Proton).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from router.amqp.codec import _DEC as _DECODERS  # the codec's own table: one call per value in the loop below
from router.amqp.codec import Described, IncompleteError, MalformedError, Symbol, decode_value, scan_message
from router.amqp.encode import ULong, encode_value

__all__ = ["AmqpMessage", "MessageId", "SectionTypeError", "decode_message", "decode_message_steps",
           "encode_message"]

MessageId = int | str | bytes | uuid.UUID
"""The types of ``message-id`` and ``correlation-id``: ulong, string, binary, uuid."""

Buffer = bytes | bytearray | memoryview

PROPERTY_FIELDS = (
    "message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
    "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
    "reply_to_group_id",
)


@dataclass(slots=True, kw_only=True)
class AmqpMessage:
    """A decoded bare message: the properties fields, application properties, message annotations
    and body. ``None`` stands for an absent field or section.

    ``body_type`` says which body sections the message has: ``"amqp-value"`` (``body`` is the
    value), ``"data"`` (``body`` is a list of ``bytes``, one per data section), ``"amqp-sequence"``
    (``body`` is a list of lists, one per section), or ``None`` (no body section; ``body`` is None).
    """

    message_id: MessageId | None = None
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: MessageId | None = None
    content_type: str | None = None
    content_encoding: str | None = None
    absolute_expiry_time: int | None = None
    creation_time: int | None = None
    group_id: str | None = None
    group_sequence: int | None = None
    reply_to_group_id: str | None = None
    application_properties: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    body: Any = None
    body_type: str | None = None


class SectionTypeError(MalformedError):
    """A section holds a value of the wrong type; ``section`` is its name (e.g.
    ``"application-properties"`` holding a list)."""

    def __init__(self, message: str, section: str) -> None:
        super().__init__(message)
        self.section = section


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------

_MESSAGE_ANNOTATIONS = b"\x00\x53\x72"
_PROPERTIES = b"\x00\x53\x73"
_APPLICATION_PROPERTIES = b"\x00\x53\x74"
_AMQP_VALUE = b"\x00\x53\x77"


def _id_field(name: str, value: Any) -> Any:
    """A message-id / correlation-id as the value to encode (an ``int`` becomes a ulong)."""
    if value is None or isinstance(value, bytes | bytearray | memoryview | uuid.UUID):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return ULong(value)
    if isinstance(value, str):
        return str(value)               # a string, even if it came in as a Symbol
    raise TypeError(f"{name} must be an int, str, bytes or uuid.UUID, not {type(value).__qualname__}")


def _string_field(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__qualname__}")
    return str(value)


def encode_message(
    *,
    body: Any = None,
    to: str | None = None,
    subject: str | None = None,
    reply_to: str | None = None,
    message_id: MessageId | None = None,
    correlation_id: MessageId | None = None,
    application_properties: Mapping[str, Any] | None = None,
    message_annotations: Mapping[Any, Any] | None = None,
) -> bytes:
    """A bare message: message-annotations, properties, application-properties and an amqp-value
    body, in AMQP order, each only when given (``body=None``: no body section, as Proton does,
    unless nothing else is given: then a null amqp-value, so that the message is not empty).

    Message-annotation keys given as ``str`` are encoded as symbols and ``int`` keys as ulong (as
    AMQP requires); application-property keys must be strings; an ``int`` message or correlation
    id is a ulong. Raises ``TypeError`` / ``ValueError`` for what cannot be encoded.
    """
    parts = []
    if message_annotations is not None:
        annotations = {}
        for key, value in message_annotations.items():
            if isinstance(key, str):
                key = Symbol(key)
            elif isinstance(key, int) and not isinstance(key, bool):
                key = ULong(key)
            annotations[key] = value
        parts.append(_MESSAGE_ANNOTATIONS + encode_value(annotations))
    fields = [_id_field("message_id", message_id), None, _string_field("to", to),
              _string_field("subject", subject), _string_field("reply_to", reply_to),
              _id_field("correlation_id", correlation_id)]
    while fields and fields[-1] is None:
        fields.pop()
    if fields:
        parts.append(_PROPERTIES + encode_value(fields))
    if application_properties is not None:
        properties = {}
        for key, value in application_properties.items():
            if not isinstance(key, str):
                raise TypeError(f"application property keys must be str, not {type(key).__qualname__}")
            properties[str(key)] = value
        parts.append(_APPLICATION_PROPERTIES + encode_value(properties))
    if body is not None or not parts:        # an empty message is no message: a null body then
        parts.append(_AMQP_VALUE + encode_value(body))
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = range(0x70, 0x75)
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = range(0x75, 0x79)

# code -> (name, the kind in its symbolic descriptor, its rank in the section order)
_SECTIONS = {
    HEADER: ("header", "list", 0),
    DELIVERY_ANNOTATIONS: ("delivery-annotations", "map", 1),
    MESSAGE_ANNOTATIONS: ("message-annotations", "map", 2),
    PROPERTIES: ("properties", "list", 3),
    APPLICATION_PROPERTIES: ("application-properties", "map", 4),
    DATA: ("data", "binary", 5),
    AMQP_SEQUENCE: ("amqp-sequence", "list", 5),
    AMQP_VALUE: ("amqp-value", "*", 5),
    FOOTER: ("footer", "map", 6),
}
_BY_SYMBOL = {f"amqp:{name}:{kind}": code for code, (name, kind, _) in _SECTIONS.items()}
_REPEATABLE = (DATA, AMQP_SEQUENCE)
_MAPS = (DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, APPLICATION_PROPERTIES, FOOTER)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id(value: Any) -> bool:
    if isinstance(value, int):
        return not isinstance(value, bool) and value >= 0     # ulong: the only integer id type
    return isinstance(value, str | bytes | uuid.UUID)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_binary(value: Any) -> bool:
    return isinstance(value, bytes)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# The AMQP type of each field, as a check of its decoded value (null is always allowed).
_HEADER_CHECKS = (("durable", _is_bool), ("priority", _is_int), ("ttl", _is_int),
                  ("first-acquirer", _is_bool), ("delivery-count", _is_int))
_PROPERTY_CHECKS = tuple(zip(PROPERTY_FIELDS, (
    _is_id, _is_binary, _is_str, _is_str, _is_str, _is_id, _is_str, _is_str, _is_int, _is_int,
    _is_str, _is_int, _is_str), strict=True))


def _described_section(buf: Buffer, pos: int, n: int) -> tuple[int, int]:
    """``(section code, position of its value)`` for the section starting at ``pos``."""
    if pos + 2 < n and buf[pos + 1] == 0x53:      # smallulong descriptor: the usual form
        code, at = buf[pos + 2], pos + 3
    else:
        descriptor, at = _decode(buf, pos + 1, "section descriptor", pos)
        if isinstance(descriptor, Symbol):
            code = _BY_SYMBOL.get(descriptor, -1)
        elif _is_int(descriptor):
            code = descriptor
        else:
            code = -1
        if code not in _SECTIONS:
            raise MalformedError(f"not a message section descriptor at offset {pos}: {descriptor!r}")
    if code not in _SECTIONS:
        raise MalformedError(f"not a message section descriptor at offset {pos}: {code:#04x}")
    return code, at


def _decode(buf: Buffer, pos: int, what: str, start: int) -> tuple[Any, int]:
    """decode_value, with the section named in the error."""
    try:
        return decode_value(buf, pos)
    except IncompleteError as exc:
        raise IncompleteError(f"truncated: the {what} at offset {start} ends early ({exc})") from None
    except MalformedError as exc:
        cause = exc.__cause__
        if isinstance(cause, UnicodeDecodeError):
            raise MalformedError(f"{cause} (in the {what} at offset {start})") from None
        raise MalformedError(f"the {what} at offset {start}: {exc}") from None


def _check_keys(value: Any, name: str) -> None:
    """Refuse maps with an unhashable key: decode_value returns those as lists of (key, value)
    tuples, and a tuple appears nowhere else in decoded values (Described is its own type)."""
    todo = [value]
    while todo:
        v = todo.pop()
        t = type(v)
        if t is list:
            items = v
        elif t is dict:
            items = v.values()
        elif t is Described:
            items = v
        else:
            continue
        for item in items:
            ti = type(item)
            if ti is tuple:
                raise MalformedError(f"a map in the {name} section has a key of unhashable type "
                                     f"{type(item[0]).__name__}")
            if ti is list or ti is dict or ti is Described:
                todo.append(item)


def _fields(value: Any, checks: tuple[tuple[str, Any], ...], name: str, start: int) -> list[Any]:
    """The fields of a list section, each checked against its type."""
    if value is None:
        return []
    if type(value) is not list:
        raise SectionTypeError(f"the {name} section at offset {start} holds a value of type "
                               f"{_kind(value)}, not a list", name)
    if len(value) > len(checks):
        raise MalformedError(f"the {name} section at offset {start} has {len(value)} fields, "
                             f"at most {len(checks)}")
    for (field, check), item in zip(checks, value, strict=False):
        if item is not None and not check(item):
            raise MalformedError(f"{name}.{field} cannot be of type {_kind(item)} ({item!r:.60})")
    return value


def decode_message(data: Buffer) -> AmqpMessage:
    """The message encoded in ``data`` (the whole message, nothing else); MalformedError if the
    bytes break a rule of the module docstring."""
    buf = data if isinstance(data, bytes | bytearray) else bytes(data)
    n = len(buf)
    if not n:
        raise IncompleteError("empty message: no sections")
    msg = AmqpMessage()
    pos = 0
    last = -1                       # the code of the previous section
    body: list[Any] = []
    while pos < n:
        start = pos
        if buf[pos]:
            after = f" after the {_SECTIONS[last][0]} section" if last >= 0 else ""
            raise MalformedError(f"{n - pos} bytes at offset {pos}{after} are not a message section "
                                 f"(constructor {buf[pos]:#04x})")
        code, pos = _described_section(buf, pos, n)
        name, _, rank = _SECTIONS[code]
        if last >= 0:
            last_name, _, last_rank = _SECTIONS[last]
            if code == last and code not in _REPEATABLE:
                raise MalformedError(f"a second {name} section at offset {start}")
            if last == FOOTER:
                raise MalformedError(f"the {name} section at offset {start} follows the footer")
            if rank < last_rank:
                raise MalformedError(f"the {name} section at offset {start} comes after the "
                                     f"{last_name} section (AMQP fixes their order)")
            if rank == last_rank and code != last:
                raise MalformedError(f"the {name} section at offset {start} follows {last_name} "
                                     "section(s): a body is one amqp-value section, or data sections, "
                                     "or amqp-sequence sections")
        if pos >= n:
            raise IncompleteError(f"truncated: the {name} section at offset {start} has no value")
        value, pos = _decode(buf, pos, f"{name} section", start)
        _check_keys(value, name)
        last = code
        if code in _MAPS:
            if value is not None and type(value) is not dict:
                raise SectionTypeError(f"the {name} section at offset {start} holds a value of type "
                                       f"{_kind(value)}, not a map", name)
            if code == MESSAGE_ANNOTATIONS:
                msg.message_annotations = value
            elif code == APPLICATION_PROPERTIES:
                msg.application_properties = value
        elif code == PROPERTIES:
            for field, item in zip(PROPERTY_FIELDS, _fields(value, _PROPERTY_CHECKS, name, start),
                                   strict=False):
                setattr(msg, field, item)
        elif code == HEADER:
            _fields(value, _HEADER_CHECKS, name, start)
        elif code == AMQP_VALUE:
            msg.body, msg.body_type = value, name
        else:                                     # data, amqp-sequence: one or more
            if type(value) is not (bytes if code == DATA else list):
                raise SectionTypeError(f"the {name} section at offset {start} holds a value of type "
                                       f"{_kind(value)}, not {'binary' if code == DATA else 'a list'}", name)
            body.append(value)
            msg.body, msg.body_type = body, name
    return msg


_AMQP_VALUE_SECTION = b"\x00\x53\x77"
_LIST32, _MAP32 = 0xD0, 0xD1
_U32X2 = struct.Struct(">II")


def decode_message_steps(data: Buffer, chunk: int = 500) -> Generator[None, None, AmqpMessage]:
    """:func:`decode_message` in steps, for a large message: a generator that yields after every ``chunk``
    values of the body and returns the message (``yield from``, or ``StopIteration.value``).

    Only the usual shape of a large control message is taken in steps: an amqp-value body, last in the
    message, whose value is a map32 or list32 (its entries, and those of list32 entries of a map32, are
    decoded ``chunk`` at a time, each by :func:`decode_value`); any other message is decoded at once. The
    result, and the errors raised (:class:`MalformedError` and its subclasses), are those of
    :func:`decode_message`, except for the wording of some messages.
    """
    buf = data if isinstance(data, bytes | bytearray) else bytes(data)
    n = len(buf)
    try:
        start = scan_message(buf, complete=True).body_start
        value_at = start + len(_AMQP_VALUE_SECTION)
        shaped = buf[start:value_at] == _AMQP_VALUE_SECTION and value_at < n and buf[value_at] in (_LIST32,
                                                                                                 _MAP32)
    except MalformedError:
        shaped = False
    if not shaped:
        return decode_message(buf)
    msg = decode_message(buf[:start]) if start else AmqpMessage()
    counter = [0]
    name = "amqp-value section"
    try:
        value, pos = yield from _compound_steps(buf, value_at, chunk, counter, top=True)
    except (IndexError, struct.error) as exc:
        raise IncompleteError(f"truncated: the {name} at offset {start} ends early") from exc
    except UnicodeDecodeError as exc:
        raise MalformedError(f"{exc} (in the {name} at offset {start})") from None
    except RecursionError:
        raise MalformedError(f"the {name} at offset {start} is nested too deeply") from None
    if pos != n:
        raise MalformedError(f"{n - pos} bytes at offset {pos} after the {name} are not a message section")
    msg.body, msg.body_type = value, "amqp-value"
    return msg


def _compound_steps(buf: bytes | bytearray, pos: int, chunk: int, counter: list[int],
                    top: bool) -> Generator[None, None, tuple[Any, int]]:
    """The list32 / map32 at ``pos`` (a map32's list32 values in steps too when ``top``): (value, end)."""
    code = buf[pos]
    size, count = _U32X2.unpack_from(buf, pos + 1)
    if size < 4:
        raise MalformedError(f"{'map' if code == _MAP32 else 'list'}32 size too small")
    pos, end = pos + 9, pos + 5 + size
    if end > len(buf):
        raise IncompleteError(f"value needs {end} bytes, only {len(buf)} available")
    if count > end - pos:
        raise MalformedError(f"compound count {count} does not fit in its size")
    if code == _MAP32 and count % 2:
        raise MalformedError("map has an odd number of elements")
    items: list[Any] = []
    append, decoders, containers = items.append, _DECODERS, (list, dict, Described)
    nested = top and code == _MAP32
    for i in range(count):
        if pos >= end:
            raise MalformedError("compound items do not match its size field")
        if nested and i % 2 and buf[pos] == _LIST32:
            item, pos = yield from _compound_steps(buf, pos, chunk, counter, top=False)
        else:
            item, pos = decoders[buf[pos]](buf, pos + 1)
            if type(item) in containers:
                _check_keys(item, "amqp-value")
        append(item)
        counter[0] += 1
        if counter[0] >= chunk:
            counter[0] = 0
            yield
    if pos != end:
        raise MalformedError("compound items do not match its size field")
    if code == _LIST32:
        return items, end
    pairs = list(zip(items[::2], items[1::2], strict=True))
    try:
        return dict(pairs), end
    except TypeError:
        raise MalformedError("a map in the amqp-value section has a key of unhashable type") from None
