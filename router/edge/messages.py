"""The control messages between an edge and its interior, on the control link of their connection.

Two opcodes, each a map body of key lists (routing keys of mobile addresses, router.addressing):

* ``EDGE_ADDR`` (edge -> interior): ``add`` / ``del``: addresses with consumers on the edge (the interior
  routes them to the edge and advertises them as its own); ``watch`` / ``unwatch``: addresses the edge
  wants to hear about (its producers' and consumers'); ``full`` true: the lists replace what the
  interior held (the first message on a newly active uplink); ``active`` false (with ``full``): the edge
  moved to another uplink, so this interior drops what the edge proxied.
* ``EDGE_REACH`` (interior -> edge): ``add`` / ``del``: watched addresses that gained or lost every
  destination other than the edge itself; ``full`` as above.

A message that is not of this form raises `EdgeMessageError` (the caller logs it and drops it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from router.amqp.codec import MalformedError
from router.amqp.message import SectionTypeError, decode_message, encode_message

EDGE_ADDR = "EDGE_ADDR"
EDGE_REACH = "EDGE_REACH"
CONTROL_ADDRESS = "_local/qdedge"
MAX_KEY = 4096                  # bytes of one routing key; longer ones are refused
MAX_KEYS = 200_000              # keys in one message


class EdgeMessageError(ValueError):
    """A control message from the other end is not an edge message."""


@dataclass
class EdgeMessage:
    """One edge control message; lists of routing keys."""

    opcode: str
    add: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    watch: list[str] = field(default_factory=list)
    unwatch: list[str] = field(default_factory=list)
    full: bool = False
    active: bool = True         # EDGE_ADDR: false when the edge moves its traffic to another uplink

    def empty(self) -> bool:
        return not (self.full or self.add or self.remove or self.watch or self.unwatch)


def encode(m: EdgeMessage) -> bytes:
    """The message as AMQP message bytes."""
    body: dict[str, Any] = {"add": list(m.add), "del": list(m.remove), "full": m.full}
    if m.opcode == EDGE_ADDR:
        body["watch"] = list(m.watch)
        body["unwatch"] = list(m.unwatch)
        body["active"] = m.active
    return encode_message(to=CONTROL_ADDRESS, application_properties={"opcode": m.opcode}, body=body)


def _keys(body: Mapping, name: str) -> list[str]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise EdgeMessageError(f"{name} must be a list of addresses")
    if len(value) > MAX_KEYS:
        raise EdgeMessageError(f"{name} has {len(value)} addresses (at most {MAX_KEYS})")
    for k in value:
        if not isinstance(k, str) or not k or len(k) > MAX_KEY:
            raise EdgeMessageError(f"{name} holds something that is not an address: {str(k)[:60]!r}")
        if k.startswith("_topo/") or k.startswith("_edge/"):
            raise EdgeMessageError(f"{name} holds a node-scoped address {k[:60]!r}")
    return value


def decode(data: bytes, expect: str) -> EdgeMessage:
    """Bytes from the other end as an `EdgeMessage` of opcode `expect` (EdgeMessageError otherwise)."""
    try:
        msg = decode_message(data)
    except (SectionTypeError, MalformedError) as exc:
        raise EdgeMessageError(f"undecodable edge control message: {exc}") from None
    props = msg.application_properties or {}
    opcode = props.get("opcode") if isinstance(props, Mapping) else None
    if opcode != expect:
        raise EdgeMessageError(f"unexpected opcode {str(opcode)[:40]!r} (expected {expect})")
    body = msg.body
    if not isinstance(body, Mapping):
        raise EdgeMessageError("the body must be a map")
    full = body.get("full", False)
    if not isinstance(full, bool):
        raise EdgeMessageError("full must be a boolean")
    m = EdgeMessage(expect, _keys(body, "add"), _keys(body, "del"), full=full)
    if expect == EDGE_ADDR:
        m.watch = _keys(body, "watch")
        m.unwatch = _keys(body, "unwatch")
        active = body.get("active", True)
        if not isinstance(active, bool):
            raise EdgeMessageError("active must be a boolean")
        m.active = active
    return m


def diff(old: set[str], new: Iterable[str]) -> tuple[list[str], list[str]]:
    """(added, removed) from `old` to `new`, sorted (stable messages)."""
    new = set(new)
    return sorted(new - old), sorted(old - new)
