"""The section check of a client's complete message: AMQP order, and whether router keys must go.

AMQP 1.0 fixes the order of a message's sections: header, delivery-annotations, message-annotations,
properties, application-properties, the body (one amqp-value, or data sections, or amqp-sequence
sections), footer; each at most once except the body's data / amqp-sequence sections. Proton accepts
other orders and passes them on, so the node checks every complete message from a client
(:func:`client_sections`) before routing it, stepping over each section by its size fields (nothing is
decoded). The same walk tells whether the message-annotations section holds a key starting with
``x-opt-qd.`` (router annotations belong to routers: such a message is rewritten without them, see
router.amqp.annotations.strip); most messages have none and go on as they came.

Cost: ~8,000 CPU instructions per call for a 141-byte message of three sections (callgrind, CPython
3.11), +15% instructions per message on the client -> client path of a node (BENCHMARKS.md,
"Hardening"): Python steps over each section by its size fields; nothing else is decoded or copied.

:class:`SectionShapes` makes the usual case cheap (BENCHMARKS.md, "Per-hop CPU (issue 21)"): a client
sends message after message of the same *shape* (the same sections with the same encodings and sizes,
all but the last one's size). The shape of a message walked twice in a row becomes one compiled regular
expression over the section heads (descriptor, constructor, size bytes) and the bytes between them; a
message it matches, whose last section's size ends it exactly, has the sections the walk checked for
that shape, in the same order, and no message annotations (shapes with them are never kept): one C-level
match instead of the Python walk. Any other message is walked. `SectionShapes.insertion` is the same
match for a message an ingress node annotates (issue 21): the shape also tells where the
message-annotations section goes, so the node does not look for it.
"""

from __future__ import annotations

import re
import struct

from router.amqp.codec import MalformedError, _section_code, _skip

PREFIX = b"x-opt-qd."
_VAR8_CODES = frozenset((0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0))

# _NEXT[last]: the section codes allowed after section `last` (0x6F: the start of the message)
_ORDER = (0x70, 0x71, 0x72, 0x73, 0x74)


def _allowed_after(last: int) -> frozenset[int]:
    if last in (0x75, 0x76):                # more of the same body kind, or the footer
        return frozenset((last, 0x78))
    if last == 0x77:
        return frozenset((0x78,))
    if last == 0x78:
        return frozenset()
    return frozenset(c for c in (*_ORDER, 0x75, 0x76, 0x77, 0x78) if c > last)


_NEXT = tuple(_allowed_after(last) if 0x6F <= last <= 0x78 else frozenset() for last in range(256))
_START = _NEXT[0x6F]


def client_sections(buf: bytes | memoryview, n: int) -> bool:
    """Check the order of the complete message in `buf[:n]` (`buf` may be longer: the node passes a
    view of its reusable read buffer, indexed as ints); True when its message annotations hold a
    router key (an ``x-opt-qd.`` key, or those bytes anywhere in the section: the strip decides).

    Raises MalformedError for sections out of order, repeated, of an unknown kind, a mix of body kinds,
    or bytes that do not end where a section ends.
    """
    pos = 0
    allowed = _START
    router_keys = False
    var8 = _VAR8_CODES
    nxt = _NEXT
    try:
        while pos < n:
            if buf[pos + 1] == 0x53 and not buf[pos]:      # smallulong descriptor, the usual form
                code = buf[pos + 2]
                p = pos + 3
            elif buf[pos]:
                raise MalformedError(f"expected a described section at offset {pos}")
            else:
                code, p = _section_code(buf, pos + 1)
            if code not in allowed:
                raise MalformedError(f"section {code:#04x} at offset {pos} is out of AMQP order")
            c = buf[p]
            if c in var8:
                end = p + 2 + buf[p + 1]
            elif c == 0x45 or c == 0x40:
                end = p + 1
            else:
                end = _skip(buf, p, n)
            if code == 0x72 and PREFIX in bytes(buf[pos:end]):
                router_keys = True
            allowed = nxt[code]
            pos = end
    except (IndexError, struct.error):
        raise MalformedError("the message ends inside a section") from None
    except UnicodeDecodeError:
        raise MalformedError("invalid UTF-8 in a section descriptor") from None
    if pos != n:
        raise MalformedError("the message ends inside a section")
    return router_keys


_V32_CODES = frozenset((0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0))
_U32_FROM = struct.Struct(">I").unpack_from
MAX_SHAPES = 256            # compiled shapes kept per node (a client stream has one or a few)


class SectionShapes:
    """`client_sections` for one node, with the shapes of the messages it saw (see the module's doc)."""

    def __init__(self) -> None:
        self._fast: tuple[re.Pattern[bytes], int, int] | None = None   # (pattern, last section, kind)
        self._shapes: dict[tuple[int, ...], tuple[re.Pattern[bytes], int, int]] = {}
        self._previous: tuple[int, ...] | None = None    # the shape of the last message walked
        self._insert = -1        # where an ingress adds annotations in the `_fast` shape (-1: unknown)

    def check(self, buf: bytes | memoryview, n: int) -> bool:
        """`client_sections(buf, n)`: raises MalformedError, or says whether router keys must go."""
        fast = self._fast
        if fast is not None:
            pattern, last, kind = fast
            if pattern.fullmatch(buf, 0, n) is not None:
                if kind == 0:
                    return False
                if kind == 1:
                    if last + 5 + buf[last + 4] == n:
                        return False
                elif last + 8 + _U32_FROM(buf, last + 4)[0] == n:
                    return False
        router_keys = client_sections(buf, n)
        if not router_keys:
            self._learn(buf, n)
        return router_keys

    def _learn(self, buf: bytes | memoryview, n: int) -> None:
        """Note the shape of a message just checked (in order, no router keys); keep it once seen twice."""
        shape = _shape(buf, n)
        if shape is None:
            return
        known = self._shapes.get(shape)
        if known is None:
            if shape != self._previous:
                self._previous = shape
                return
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes.clear()
            known = self._shapes[shape] = _compile(shape)
        if known is not self._fast:
            self._fast = known
            self._insert = _insertion(shape)

    def insertion(self, buf: bytes | memoryview, n: int) -> int:
        """`check` for a message an ingress node annotates, when it has the kept shape: where its message
        annotations go (after its header and delivery annotations). -1: not checked here (call `check`).
        The shape fixes the sections before that point and the head of the one there (not message
        annotations, and none can follow)."""
        at = self._insert
        if at < 0:
            return -1
        pattern, last, kind = self._fast
        if pattern.fullmatch(buf, 0, n) is None:
            return -1
        if kind == 1:
            if last + 5 + buf[last + 4] != n:
                return -1
        elif kind and last + 8 + _U32_FROM(buf, last + 4)[0] != n:
            return -1
        return at


def _shape(buf: bytes | memoryview, n: int) -> tuple[int, ...] | None:
    """(code, constructor, size) of each section of a message already checked, the last one's size as -1;
    None when a section is not in a plain form (descriptor 0x00 0x53, a var8 or var32 value, or list0
    or null) or is message annotations."""
    pos = 0
    out: list[int] = []
    while pos < n:
        if buf[pos] or buf[pos + 1] != 0x53:
            return None
        code = buf[pos + 2]
        c = buf[pos + 3]
        if code == 0x72:
            return None
        if c in _VAR8_CODES:
            size = buf[pos + 4]
            end = pos + 5 + size
        elif c in _V32_CODES:
            size = _U32_FROM(buf, pos + 4)[0]
            end = pos + 8 + size
        elif c == 0x45 or c == 0x40:
            size = 0
            end = pos + 4
        else:
            return None
        out += (code, c, size if end < n else -1)
        pos = end
    return tuple(out) if pos == n and out else None


def _insertion(shape: tuple[int, ...]) -> int:
    """Where the first section after the header and delivery annotations starts in a message of `shape`,
    or -1 when the shape has none (the pattern then does not fix what follows)."""
    pos = 0
    for i in range(0, len(shape), 3):
        code, c, size = shape[i:i + 3]
        if code > 0x71:
            return pos
        if size < 0:
            return -1
        pos += 5 + size if c in _VAR8_CODES else 8 + size if c in _V32_CODES else 4
    return -1


def _compile(shape: tuple[int, ...]) -> tuple[re.Pattern[bytes], int, int]:
    """The pattern of a shape, where its last section starts, and how its size is checked (0: list0 or
    null, nothing to check; 1: a size byte; 4: four)."""
    parts = []
    pos = 0
    last = kind = 0
    for i in range(0, len(shape), 3):
        code, c, size = shape[i:i + 3]
        head = bytes((0, 0x53, code, c))
        if size < 0:                                # the last section: its size is checked apart
            last = pos
            kind = 0 if c in (0x45, 0x40) else 1 if c in _VAR8_CODES else 4
            parts.append(re.escape(head) + (b"" if kind == 0 else b".{%d}.*" % kind))
            break
        if c in _VAR8_CODES:
            parts.append(re.escape(head + bytes((size,))) + b".{%d}" % size)
            pos += 5 + size
        elif c in _V32_CODES:
            parts.append(re.escape(head + struct.pack(">I", size)) + b".{%d}" % size)
            pos += 8 + size
        else:
            parts.append(re.escape(head))
            pos += 4
    return re.compile(b"".join(parts), re.DOTALL), last, kind
