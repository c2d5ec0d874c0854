"""The duplicate key of a flooded control message, read from its bytes without decoding the whole message.

A flooded RA or MAU reaches a node once per path, and every copy but the first is dropped by the link-state
engine's flood filter (router.linkstate.flood). Decoding a copy in full first costs ~20 ms for an MAU of
20,000 addresses. :func:`peek_flood_key` reads only what the key needs: the ``to`` and the application
properties' ``opcode`` (small sections before the body), then the body map's entries one by one,
decoding the few scalar fields of the key (``id``, ``instance``, ``ls_seq``, ``mobile_seq``) and jumping
over the others (``add``, ``del``, ``exist``: the address lists) by their size fields.

Anything unexpected (not a map body, a field of another type, malformed bytes) gives None: the message is
then decoded in full and validated as usual, so a peek can only save work, never reject a message.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from router.amqp.codec import MalformedError, decode_section, decode_value, scan_message, skip_value
from router.linkstate.flood import flood_key
from router.linkstate.messages import MAU, RA

_KEY_FIELDS = frozenset(("id", "instance", "ls_seq", "mobile_seq"))
_AMQP_VALUE = 0x77
_MAP8, _MAP32, _NULL = 0xC1, 0xD1, 0x40


def peek_flood_key(data: bytes) -> tuple[str | None, str, tuple[Hashable, ...]] | None:
    """``(to, opcode, key)`` of a flooded RA or differential MAU in `data`, None for anything else."""
    try:
        return _peek(memoryview(data))
    except (MalformedError, IndexError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _peek(buf: memoryview) -> tuple[str | None, str, tuple[Hashable, ...]] | None:
    info = scan_message(buf, complete=True)
    if info.application_properties is None:
        return None
    props = decode_section(buf, info.application_properties)
    opcode = props.get("opcode") if isinstance(props, dict) else None
    if opcode not in (RA, MAU):
        return None
    body = _body_fields(buf, info.body_start)
    if body is None:
        return None
    key = flood_key(opcode, body)
    return (info.to, opcode, key) if key is not None else None


def _body_fields(buf: memoryview, pos: int) -> dict[str, Any] | None:
    """The key fields of an amqp-value map body (``exist``: True when present and not null)."""
    # a described section: 0x00, then the descriptor (smallulong 0x53 0x77 or ulong 0x80 + 8 bytes)
    if buf[pos] != 0x00:
        return None
    if buf[pos + 1] == 0x53 and buf[pos + 2] == _AMQP_VALUE:
        pos += 3
    elif buf[pos + 1] == 0x80 and int.from_bytes(buf[pos + 2:pos + 10], "big") == _AMQP_VALUE:
        pos += 10
    else:
        return None
    code = buf[pos]
    if code == _MAP8:
        count, pos = buf[pos + 2], pos + 3
    elif code == _MAP32:
        count, pos = int.from_bytes(buf[pos + 5:pos + 9], "big"), pos + 9
    else:
        return None
    fields: dict[str, Any] = {}
    for _ in range(count // 2):
        name, pos = decode_value(buf, pos)
        if name in _KEY_FIELDS:
            fields[name], pos = decode_value(buf, pos)
        else:
            if name == "exist":
                fields["exist"] = True if buf[pos] != _NULL else None
            pos = skip_value(buf, pos)
    return fields
