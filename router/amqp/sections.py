"""The section check of a client's complete message: AMQP order, and whether router keys must go.

AMQP 1.0 fixes the order of a message's sections: header, delivery-annotations, message-annotations,
properties, application-properties, the body (one amqp-value, or data sections, or amqp-sequence
sections), footer; each at most once except the body's data / amqp-sequence sections. Proton accepts
other orders and passes them on, so the node checks every complete message from a client
(:func:`client_sections`) before routing it, stepping over each section by its size fields (nothing is
decoded). The same walk tells whether the message-annotations section holds a key starting with
``x-opt-qd.`` (router annotations belong to routers: such a message is rewritten without them, see
router.amqp.annotations.strip); most messages have none and go on as they came.

Cost: ~9,000 CPU instructions per call for a 141-byte message of three sections (callgrind, CPython
3.11), +15% instructions per message on the client -> client path of a node (BENCHMARKS.md,
"Hardening"): Python steps over each section by its size fields; nothing else is decoded or copied.
"""

from __future__ import annotations

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
