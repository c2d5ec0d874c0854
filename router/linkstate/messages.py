"""Control messages (HELLO, RA, LSR, LSU, MAU, MAR) and their body maps.

Every body carries ``id`` (sender), ``pv`` (protocol version, 1), ``area`` ("0") and ``instance`` (the
sender's boot epoch). ``from_map`` validates types and raises :class:`ControlMessageError` on anything
malformed; a body whose ``pv`` is above ours raises its subclass :class:`UnsupportedVersionError` (checked
before the opcode-specific keys, whose shape a newer version may have changed).

The message classes are slotted dataclasses, not frozen (much cheaper to build, and the engine builds
hundreds of thousands): treat them as immutable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

PROTOCOL_VERSION = 1
AREA = "0"

HELLO = "HELLO"
RA = "RA"
LSR = "LSR"
LSU = "LSU"
MAU = "MAU"
MAR = "MAR"
OPCODES = (HELLO, RA, LSR, LSU, MAU, MAR)


class ControlMessageError(ValueError):
    """A control message that cannot be used; ``sender`` is its ``id`` when that could be read."""

    def __init__(self, reason: str, sender: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.sender = sender


class UnsupportedVersionError(ControlMessageError):
    """A control message from a newer protocol version (``pv`` above ours)."""

    def __init__(self, version: int, sender: str) -> None:
        super().__init__(f"protocol version {version} is newer than ours ({PROTOCOL_VERSION})", sender)
        self.version = version


# -- field readers ---------------------------------------------------------------------------------------

def _field(body: Mapping[str, Any], key: str, sender: str | None) -> Any:
    if key not in body:
        raise ControlMessageError(f"missing {key!r}", sender)
    return body[key]


def _is_int(value: Any) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def _int(body: Mapping[str, Any], key: str, sender: str | None, minimum: int = 0) -> int:
    value = body.get(key)
    if type(value) is int and value >= minimum:
        return value
    if value is None and key not in body:
        raise ControlMessageError(f"missing {key!r}", sender)
    if not _is_int(value) or value < minimum:
        raise ControlMessageError(f"{key!r} must be an integer >= {minimum}, not {value!r}", sender)
    return int(value)


MAX_NODE_ID = 255       # characters in a node id (the config allows no more)


def short(value: Any, limit: int = 80) -> str:
    """`value` for a log line: its repr, cut at `limit` characters (peers choose what they send)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _node_id(value: Any, what: str, sender: str | None) -> str:
    if not isinstance(value, str) or not value or "/" in value or len(value) > MAX_NODE_ID:
        raise ControlMessageError(f"{what} must be a node id of 1 to {MAX_NODE_ID} characters without '/', "
                                  f"not {short(value)}", sender)
    return value if type(value) is str else str(value)


def _str_list(value: Any, key: str, sender: str | None) -> tuple[str, ...]:
    if type(value) in (list, tuple) and set(map(type, value)) <= _STR:   # the usual case, at C speed
        return tuple(value)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ControlMessageError(f"{key!r} must be a list of strings", sender)
    return tuple(str(v) for v in value)


_STR = {str}
_INT = {int}


def _optional(body: Mapping[str, Any], key: str) -> Any:
    """``body[key]``, with a present ``None`` treated as absent."""
    return body.get(key)


def _header(body: Any) -> tuple[str, int]:
    """Check the common keys; return ``(id, instance)``."""
    if type(body) is not dict and not isinstance(body, Mapping):
        raise ControlMessageError(f"body must be a map, not {type(body).__name__}")
    sender = body.get("id")
    pv = body.get("pv")
    instance = body.get("instance")
    if type(sender) is str and sender and "/" not in sender and len(sender) <= MAX_NODE_ID \
            and pv == PROTOCOL_VERSION and type(pv) is int \
            and type(instance) is int and instance >= 0 and body.get("area", AREA) == AREA:
        return sender, instance  # the usual case, checked in one go
    sender = _node_id(sender, "'id'", None)
    if pv != PROTOCOL_VERSION or not _is_int(pv):
        if not _is_int(pv):
            raise ControlMessageError(f"'pv' must be an integer, not {pv!r}", sender)
        if pv > PROTOCOL_VERSION:
            raise UnsupportedVersionError(pv, sender)
        raise ControlMessageError(f"protocol version {pv} is not supported", sender)
    area = body.get("area", AREA)
    if area != AREA:
        raise ControlMessageError(f"area {area!r} is not supported (only {AREA!r})", sender)
    return sender, _int(body, "instance", sender)


def _base(sender: str, instance: int) -> dict[str, Any]:
    return {"id": sender, "pv": PROTOCOL_VERSION, "area": AREA, "instance": instance}


# -- messages ---------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Hello:
    """HELLO: one hop; ``seen`` lists the ids the sender heard within hello max age."""

    opcode: ClassVar[str] = HELLO
    id: str
    instance: int
    seen: tuple[str, ...] = ()

    def to_map(self) -> dict[str, Any]:
        return {**_base(self.id, self.instance), "seen": list(self.seen)}

    @classmethod
    def from_map(cls, body: Any) -> Hello:
        sender, instance = _header(body)
        return cls(sender, instance, _str_list(_field(body, "seen", sender), "seen", sender))


@dataclass(slots=True)
class RouterAdvertisement:
    """RA: flooded; the sender's current link-state and mobile-address sequence numbers."""

    opcode: ClassVar[str] = RA
    id: str
    instance: int
    ls_seq: int
    mobile_seq: int

    def to_map(self) -> dict[str, Any]:
        return {**_base(self.id, self.instance), "ls_seq": self.ls_seq, "mobile_seq": self.mobile_seq}

    @classmethod
    def from_map(cls, body: Any) -> RouterAdvertisement:
        sender, instance = _header(body)
        return cls(sender, instance, _int(body, "ls_seq", sender), _int(body, "mobile_seq", sender))


@dataclass(slots=True)
class LinkState:
    """One node's link state: its bidirectional neighbours and the cost of each link."""

    id: str
    ls_seq: int
    peers: Mapping[str, int]

    def to_map(self) -> dict[str, Any]:
        return {"id": self.id, "area": AREA, "ls_seq": self.ls_seq, "peers": dict(self.peers)}

    @classmethod
    def from_map(cls, ls: Any, sender: str | None = None) -> LinkState:
        if not isinstance(ls, Mapping):
            raise ControlMessageError("'ls' must be a map", sender)
        node = _node_id(ls.get("id"), "'ls.id'", sender)
        if ls.get("area", AREA) != AREA:
            raise ControlMessageError(f"'ls.area' {ls.get('area')!r} is not supported", sender)
        peers_in = _field(ls, "peers", sender)
        if not isinstance(peers_in, Mapping):
            raise ControlMessageError("'ls.peers' must be a map of node id to cost", sender)
        ls_seq = _int(ls, "ls_seq", sender)
        if type(peers_in) is dict and node not in peers_in \
                and all(type(c) is int and c >= 1 for c in peers_in.values()) \
                and all(type(p) is str and p and "/" not in p and len(p) <= MAX_NODE_ID for p in peers_in):
            return cls(node, ls_seq, dict(peers_in))  # the usual case, checked in bulk
        peers: dict[str, int] = {}
        for peer, cost in peers_in.items():
            peer = _node_id(peer, "a peer id", sender)
            if not _is_int(cost) or cost < 1:
                raise ControlMessageError(f"cost of peer {peer!r} must be an integer >= 1, not {cost!r}",
                                          sender)
            if peer == node:
                raise ControlMessageError(f"node {node!r} lists itself as a peer", sender)
            peers[peer] = int(cost)
        return cls(node, ls_seq, peers)


@dataclass(slots=True)
class LinkStateRequest:
    """LSR: addressed to one node, which answers with an LSU."""

    opcode: ClassVar[str] = LSR
    id: str
    instance: int

    def to_map(self) -> dict[str, Any]:
        return _base(self.id, self.instance)

    @classmethod
    def from_map(cls, body: Any) -> LinkStateRequest:
        return cls(*_header(body))


@dataclass(slots=True)
class LinkStateUpdate:
    """LSU: the sender's link state, only ever as the answer to an LSR."""

    opcode: ClassVar[str] = LSU
    id: str
    instance: int
    ls: LinkState

    @property
    def ls_seq(self) -> int:
        return self.ls.ls_seq

    def to_map(self) -> dict[str, Any]:
        return {**_base(self.id, self.instance), "ls_seq": self.ls.ls_seq, "ls": self.ls.to_map()}

    @classmethod
    def from_map(cls, body: Any) -> LinkStateUpdate:
        sender, instance = _header(body)
        ls_seq = _int(body, "ls_seq", sender)
        ls = LinkState.from_map(_field(body, "ls", sender), sender)
        if ls.id != sender:
            raise ControlMessageError(f"'ls.id' {ls.id!r} differs from the sender", sender)
        if ls.ls_seq != ls_seq:
            raise ControlMessageError(f"'ls.ls_seq' {ls.ls_seq} differs from 'ls_seq' {ls_seq}", sender)
        return cls(sender, instance, ls)


@dataclass(slots=True)
class MobileAddressUpdate:
    """MAU: a diff (``add`` + ``delete``, flooded) or absolute (``exist``, to one requester).

    ``hints`` is parallel to ``add`` (diff) or ``exist`` (absolute); hints of another length are dropped.
    """

    opcode: ClassVar[str] = MAU
    id: str
    instance: int
    mobile_seq: int
    add: tuple[str, ...] | None = None
    delete: tuple[str, ...] | None = None
    exist: tuple[str, ...] | None = None
    hints: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.exist is not None:
            if self.add is not None or self.delete is not None:
                raise ControlMessageError("MAU carries 'exist' together with 'add'/'del'", self.id)
        elif self.add is None or self.delete is None:
            raise ControlMessageError("differential MAU lacks 'add' or 'del'", self.id)
        listed = self.exist if self.exist is not None else self.add
        if self.hints is not None and len(self.hints) != len(listed or ()):
            self.hints = None

    @property
    def is_absolute(self) -> bool:
        return self.exist is not None

    def hinted(self) -> dict[str, int | None]:
        """``address -> hint`` for the addresses this MAU adds (diff) or lists (absolute)."""
        listed = (self.exist if self.exist is not None else self.add) or ()
        if self.hints is None:
            return dict.fromkeys(listed)
        return dict(zip(listed, self.hints, strict=True))

    def to_map(self) -> dict[str, Any]:
        body = {**_base(self.id, self.instance), "mobile_seq": self.mobile_seq}
        if self.exist is not None:
            body["exist"] = list(self.exist)
        else:
            body["add"] = list(self.add or ())
            body["del"] = list(self.delete or ())
        if self.hints is not None:
            body["hints"] = list(self.hints)
        return body

    @classmethod
    def from_map(cls, body: Any) -> MobileAddressUpdate:
        sender, instance = _header(body)
        seq = _int(body, "mobile_seq", sender)
        exist, add, delete = (_optional(body, k) for k in ("exist", "add", "del"))
        hints = _optional(body, "hints")
        if hints is None:
            pass
        elif type(hints) in (list, tuple) and set(map(type, hints)) <= _INT:
            hints = tuple(hints)            # the usual case, at C speed (the 20,000 hints of a resync)
        elif isinstance(hints, list | tuple) and all(_is_int(h) for h in hints):
            hints = tuple(int(h) for h in hints)
        else:
            raise ControlMessageError("'hints' must be a list of integers", sender)
        return cls(  # __post_init__ checks the exist / add+del combination
            sender, instance, seq,
            add=None if add is None else _str_list(add, "add", sender),
            delete=None if delete is None else _str_list(delete, "del", sender),
            exist=None if exist is None else _str_list(exist, "exist", sender),
            hints=hints,
        )


@dataclass(slots=True)
class MobileAddressRequest:
    """MAR: asks one node for an absolute MAU; ``have_seq`` is the mobile_seq the requester holds."""

    opcode: ClassVar[str] = MAR
    id: str
    instance: int
    have_seq: int

    def to_map(self) -> dict[str, Any]:
        return {**_base(self.id, self.instance), "have_seq": self.have_seq}

    @classmethod
    def from_map(cls, body: Any) -> MobileAddressRequest:
        sender, instance = _header(body)
        return cls(sender, instance, _int(body, "have_seq", sender))


ControlMessage = (Hello | RouterAdvertisement | LinkStateRequest | LinkStateUpdate | MobileAddressUpdate
                  | MobileAddressRequest)

_CLASSES: dict[str, Any] = {cls.opcode: cls for cls in (
    Hello, RouterAdvertisement, LinkStateRequest, LinkStateUpdate, MobileAddressUpdate, MobileAddressRequest)}


def parse(opcode: Any, body: Any) -> ControlMessage:
    """Decode a control message from its ``opcode`` application property and body map."""
    cls = _CLASSES.get(opcode) if isinstance(opcode, str) else None
    if cls is None:
        sender, _ = _header(body)  # a newer version may add opcodes: report that first
        raise ControlMessageError(f"unknown opcode {opcode!r}", sender)
    return cls.from_map(body)
