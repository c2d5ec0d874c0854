"""Glue between the sans-IO link-state engine (router.linkstate) and the node's inter-router links.

The engine decides; this module only carries its messages: each `Outgoing` becomes one AMQP message per
link (`to` = its address, application property `opcode`, map body, `x-opt-qd.trace` annotation), sent
pre-settled on the control link of that inter-router connection; control messages that arrive are decoded
back into the engine's message maps. The messages are encoded and decoded by the node's own codec
(router.amqp.message): the control plane floods them during address changes, and the node's code
above the adapter does not use python-qpid-proton.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Generator, Mapping
from typing import Any

from router.amqp.codec import MalformedError, Symbol
from router.amqp.message import (
    AmqpMessage,
    SectionTypeError,
    decode_message,
    decode_message_steps,
    encode_message,
)
from router.linkstate import ControlMessageError, LinkStateConfig, LinkStateEngine, Outgoing
from router.linkstate.messages import MAU, RA
from router.logs import LogOnce, cut
from router.node.controlpeek import peek_flood_key

log = logging.getLogger(__name__)

TRACE = Symbol("x-opt-qd.trace")
_MAP_SECTIONS = ("application-properties", "message-annotations")
# A control message this large (an MAU of many addresses) waits in the inbox, handled in turns of at most
# CONTROL_BUDGET seconds per pump, so that data and other connections are served in between. While a link
# has messages waiting, its RAs and MAUs queue behind them: they carry the sender's mobile seq, and an RA
# handled before the MAUs whose seq it advertises would make this node ask for a full resync. HELLOs and
# link-state messages (LSU, LSR) and MARs never wait.
BULK_BYTES = 2048
CONTROL_BUDGET = 0.002
# at most this many queued messages and bytes (a peer flooding faster than the turns: the oldest is handled
# at once, in order, before a new one is queued)
INBOX_LIMIT = 1000
INBOX_BYTES = 64 * 1024 * 1024
# A queued message this large (an absolute MAU of thousands of addresses: 20,000 are ~930 KB, ~10 ms to decode
# at once) is decoded in steps of STEP_VALUES values, within the turns' CONTROL_BUDGET, so that no turn
# decodes it whole; it stays at the head of the inbox (the messages behind it wait) until it is decoded.
STEP_BYTES = 64 * 1024
STEP_VALUES = 500
_IN_ORDER = (RA, MAU)


def encode_control(message: Mapping[str, Any]) -> bytes:
    """An engine message map as AMQP message bytes."""
    return encode_message(
        to=message["to"], application_properties={"opcode": message["opcode"]}, body=message["body"],
        message_annotations={TRACE: [f"0/{node}" for node in message.get("trace") or ()]})


def decode_control(data: bytes) -> dict[str, Any]:
    """AMQP message bytes as an engine message map (ControlMessageError if unreadable)."""
    try:
        m = decode_message(data)
    except MalformedError as exc:
        raise _unreadable(exc) from None
    return _control_map(m)


def decode_control_steps(data: bytes, chunk: int = STEP_VALUES) -> Generator[None, None, dict[str, Any]]:
    """`decode_control` in steps of `chunk` values of the body (router.amqp.message.decode_message_steps):
    a generator that returns the engine message map."""
    try:
        m = yield from decode_message_steps(data, chunk)
    except MalformedError as exc:
        raise _unreadable(exc) from None
    return _control_map(m)


def _unreadable(exc: MalformedError) -> ControlMessageError:
    if isinstance(exc, SectionTypeError) and exc.section in _MAP_SECTIONS:
        return ControlMessageError("application properties and message annotations must be maps")
    return ControlMessageError(f"undecodable control message: {exc}")


def _control_map(m: AmqpMessage) -> dict[str, Any]:
    props = m.application_properties or {}
    trace = (m.message_annotations or {}).get(TRACE) or []
    if not isinstance(trace, list):
        raise ControlMessageError("x-opt-qd.trace must be a list")
    return {"to": m.to, "opcode": props.get("opcode"), "body": m.body,
            "trace": [t[2:] if isinstance(t, str) and t.startswith("0/") else t for t in trace]}


_DROPPED = object()         # what _decode_step returns for a message not to handle


class _Decoding:
    """A queued control message over STEP_BYTES being decoded in steps (`decode_control_steps`)."""

    __slots__ = ("data", "steps")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.steps = decode_control_steps(data)

    def __len__(self) -> int:
        return len(self.data)


def _size(item: object) -> int:
    """Bytes an inbox entry holds (a decoded message map: counted as none)."""
    return len(item) if isinstance(item, bytes | _Decoding) else 0


class MeshControl:
    """Runs the link-state engine of one node over its inter-router connections."""

    def __init__(self, node_id: str, timers: Mapping[str, float], send: Callable[[object, bytes], None],
                 clock: Callable[[], float] = time.monotonic,
                 close: Callable[[object], None] | None = None) -> None:
        # the link-state instance: the start time in microseconds, so that two processes started in the
        # same second (a restart, or an impostor) still differ; later starts have larger instances
        self.ls = LinkStateEngine(node_id, time.time_ns() // 1000, LinkStateConfig(**timers))
        self._send_bytes = send
        self._close = close         # closes an inter-router connection (an impostor's)
        self._clock = clock
        self._bad = LogOnce(log)
        # something happened that the engine's timers would otherwise act on only at the next tick (a
        # control message, a link up or down, a local address): the node runs `tick` after this pump
        self.pending = False
        self._inbox: deque[tuple[object, bytes | dict[str, Any]]] = deque()
        self._waiting: Counter[object] = Counter()      # link -> its messages in the inbox
        self._inbox_bytes = 0       # of the undecoded messages in the inbox
        self.queued = 0             # control messages that waited in the inbox (management: controlQueued)
        self.early_duplicates = 0   # copies of large flooded messages dropped before they were decoded
        self.stepped = 0            # messages over STEP_BYTES decoded in steps

    # ---- events from the node ---------------------------------------------------------------------------
    def link_up(self, conn: object, peer: object) -> None:
        self.pending = True
        self._send(self.ls.link_up(conn, peer.cost, self._clock()))

    def link_down(self, conn: object, peer: object) -> None:
        log.info("inter-router connection to %s lost", cut(peer.node_id))
        self.pending = True
        if self._waiting.pop(conn, 0):      # what it sent and we did not handle yet goes with it
            self._inbox = deque(item for item in self._inbox if item[0] is not conn)
            self._inbox_bytes = sum(_size(data) for _, data in self._inbox)
        self._send(self.ls.link_down(conn, self._clock()))

    def on_control(self, conn: object, data: bytes) -> None:
        """A control message arrived on `conn`: handled now, or queued (see BULK_BYTES)."""
        self.pending = True
        if len(data) > BULK_BYTES:
            self._queue(conn, data)
        elif not self._waiting[conn]:
            self._handle(conn, data)
        else:
            try:
                message = decode_control(data)
            except ControlMessageError as exc:
                self._dropped(conn, exc)
                return
            if message["opcode"] in _IN_ORDER:   # a tuple: an unhashable forged opcode compares unequal
                self._queue(conn, message)
            else:
                self._handle(conn, message)

    def _queue(self, conn: object, data: bytes | dict[str, Any]) -> None:
        while self._inbox and (len(self._inbox) >= INBOX_LIMIT or self._inbox_bytes >= INBOX_BYTES):
            self.handle_backlog(budget=0, whole=True)   # one, in order: the memory it takes stays bounded
        self._inbox.append((conn, data))
        self._inbox_bytes += _size(data)
        self._waiting[conn] += 1
        self.queued += 1

    @property
    def backlog(self) -> bool:
        """Queued control messages wait for the next pump."""
        return bool(self._inbox)

    def handle_backlog(self, budget: float = CONTROL_BUDGET, whole: bool = False) -> None:
        """Handle queued control messages in order until `budget` seconds went by: at least one, or at least
        a step of decoding one over STEP_BYTES (`whole`: at least one, decoded to its end)."""
        inbox, waiting = self._inbox, self._waiting
        deadline = time.perf_counter() + budget
        while inbox:
            conn, item = inbox[0]
            size = _size(item)
            message = item if size <= STEP_BYTES else self._decode_step(conn, item, deadline, whole)
            if message is None:
                break                       # decoded in part: it stays first, the next turn goes on
            inbox.popleft()
            self._inbox_bytes -= size
            waiting[conn] -= 1
            if not waiting[conn]:
                del waiting[conn]
            if message is not _DROPPED:
                self._handle(conn, message)
            if time.perf_counter() >= deadline:
                break

    def _decode_step(self, conn: object, item: bytes | _Decoding, deadline: float,
                     whole: bool) -> dict[str, Any] | object | None:
        """Decode more of the large message first in the inbox, until `deadline` (at least one step): its
        message map once decoded, _DROPPED if it is a copy already handled or unreadable, else None."""
        if isinstance(item, bytes):
            peek = peek_flood_key(item)     # a copy of a flooded message already handled: not decoded
            if peek is not None and self.ls.flood_duplicate(*peek, self._clock()):
                self.early_duplicates += 1
                return _DROPPED
            item = _Decoding(item)
            self._inbox[0] = (conn, item)
        steps = item.steps
        try:
            while True:
                next(steps)
                if not whole and time.perf_counter() >= deadline:
                    return None
        except StopIteration as done:
            self.stepped += 1
            return done.value
        except ControlMessageError as exc:
            self._dropped(conn, exc)
            return _DROPPED

    def _handle(self, conn: object, data: bytes | dict[str, Any]) -> None:
        if isinstance(data, bytes) and len(data) > BULK_BYTES:
            peek = peek_flood_key(data)         # a copy of a flooded message already handled: not decoded
            if peek is not None and self.ls.flood_duplicate(*peek, self._clock()):
                self.early_duplicates += 1
                return
        try:
            message = decode_control(data) if isinstance(data, bytes) else data
            out = self.ls.handle(message, self._clock(), conn)
        except ControlMessageError as exc:
            self._dropped(conn, exc)
            return
        self._send(out)
        if self._close is not None:
            for link in self.ls.take_impostors():
                self._close(link)

    def _dropped(self, conn: object, exc: ControlMessageError) -> None:
        self._bad.once(("bad", id(conn)), logging.WARNING, "dropped a control message: %s", cut(exc, 400))

    def heard(self, conn: object) -> None:
        """The inter-router connection `conn` delivered input: its peer is alive."""
        self.ls.heard(conn, self._clock())

    def tick(self) -> None:
        self.pending = False
        self._send(self.ls.tick(self._clock()))

    def local_address(self, key: str, present: bool) -> None:
        """A mobile address got its first local consumer (present) or lost its last one."""
        self.pending = True
        if present:
            self.ls.add_local_address(key)
        else:
            self.ls.remove_local_address(key)

    # ---- output --------------------------------------------------------------------------------------------
    def _send(self, outgoing: list[Outgoing]) -> None:
        for out in outgoing:
            data = encode_control(out.message)
            for link in out.links:
                self._send_bytes(link, data)

    def snapshot(self) -> dict[str, Any]:
        """What the control plane knows, for the state line: per-node views (as many entries as nodes in the
        mesh) and the number of mobile addresses known, not the address table."""
        ls = self.ls
        return {
            "neighbors": sorted(ls.neighbors),
            "reachable": sorted(ls.reachable),
            "next_hops": dict(sorted(ls.next_hops.items())),
            "costs": dict(sorted(ls.costs.items())),
            "addresses": len(ls.known_addresses),
        }
