"""The message annotations of a message from a peer node, read and rewritten once per distinct section.

A transit or egress node gets, from its peers, messages whose message-annotations section is what a
meshrouter ingress writes (:class:`router.amqp.annotations.RouterView`: ``x-opt-qd.ingress``, ``.trace``,
``.to`` first). Every message of one stream between the same two nodes carries the same section, byte for
byte, so everything the node derives from it is derived once and kept (:class:`PeerSection`): the router
annotations, the routing key (``x-opt-qd.to``), the section rewritten for the next peer (this node's hop
added to the trace) and the section stripped for a client. A message then costs one walk over its header
and delivery annotations to find the section, one dict lookup, and one join.

:class:`PeerSections` holds the table of one node (the rewritten section names the node). A section not in
the common form (:func:`router.amqp.annotations.router_view` says None) is not kept: the caller takes the
general path (router.amqp.annotations.AnnotationLayout). The last message's bytes up to the end of its
section are kept too, with those bytes rewritten both ways: the next message of the same stream (the same
header and section, the usual case) is found by one comparison and sent as one of them plus its own rest.

:class:`IngressSections` and :func:`insertion_point` do the same for an ingress node: the section it
adds to a client's message without annotations, made once per routing key.

Both tables are keyed by routing keys, and an RPC caller's reply address is one: clients that come and go
leave an entry each (about 1.3 KB for a peer section). ``forget_unused()``, called by the node every
``node.forget_after`` seconds, drops what was not used since the call before (an entry in use moves to
the current table on its next lookup), so the tables hold what the last two periods used, not every
address ever seen (``MAX_SECTIONS`` still bounds each one).

Measured (BENCHMARKS.md, "Per-hop CPU (issue 21)"): this path replaced ``router_view`` + ``with_hop`` +
``RouterView.rewrite`` per message, about a quarter of a transit hop's instructions.
"""

from __future__ import annotations

import struct

from router.amqp.annotations import (
    _DELIVERY_ANN,
    _HEADER,
    _MA_DESCRIPTOR,
    _U32X2_FROM,
    RouterAnnotations,
    _composite_end,
    _encode_router,
    _map_header,
    router_view,
    with_hop,
)

__all__ = ["Found", "IngressSections", "PeerSection", "PeerSections", "insertion_point"]

MAX_SECTIONS = 4096      # distinct sections kept per node (a mesh has few: one per ingress, trace and `to`)


class PeerSection:
    """What one distinct message-annotations section from a peer gives: read once, used per message."""

    __slots__ = ("ann", "key", "hops", "to_peer", "to_client")

    def __init__(self, ann: RouterAnnotations, to_peer: bytes, to_client: bytes) -> None:
        self.ann = ann                  # shared by every message with this section: never changed
        self.key = ann.to               # the routing key (the form always has x-opt-qd.to)
        self.hops = len(ann.trace)      # nodes crossed so far (the hop limit compares it with the radius)
        self.to_peer = to_peer          # the section with this node's hop added
        self.to_client = to_client      # the section without router keys (b"": none left, dropped)


# (end of the section, the bytes up to it rewritten for a peer, the same for a client, the section): the
# message to send is the one or the other followed by the message's bytes from `end` on
Found = tuple[int, bytes, bytes, PeerSection]


class PeerSections:
    """One node's table of sections from peers (:class:`PeerSection` by the section's bytes)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._table: dict[bytes, PeerSection] = {}
        self._unused: dict[bytes, PeerSection] = {}   # the table before the last `forget_unused`
        # the bytes of the last message found, up to the end of its section, and what was found: a
        # message that starts with the same bytes has the same sections there (one comparison; the
        # caller may test `last` itself)
        self.last: tuple[bytes, Found] | None = None

    def find(self, data: bytes) -> Found | None:
        """What the complete message `data` starts with, up to the end of its message annotations
        (`Found`), or None when they are not in the common form (or absent): the general path then reads
        the message."""
        last = self.last
        if last is not None and data.startswith(last[0]):
            return last[1]
        try:
            p = 0
            if data.startswith(_HEADER):
                p = _composite_end(data, 3)
                if p < 0:
                    return None
            if data.startswith(_DELIVERY_ANN, p):
                p = _composite_end(data, p + 3)
                if p < 0:
                    return None
            if not data.startswith(_MA_DESCRIPTOR, p):
                return None
            c = data[p + 3]
            if c == 0xC1:
                end = p + 5 + data[p + 4]
            elif c == 0xD1:
                end = p + 8 + _U32X2_FROM(data, p + 4)[0]
            else:
                return None
        except (IndexError, struct.error):
            return None
        if end > len(data):
            return None
        key = data[p:end]
        s = self._table.get(key)
        if s is None:
            s = self._unused.pop(key, None)
            if s is not None:
                self._table[key] = s
            else:
                s = self._learn(data, p, end, key)
                if s is None:
                    return None
        head = data[:p]
        found = end, head + s.to_peer, head + s.to_client, s
        self.last = (data[:end], found)
        return found

    def forget_unused(self) -> None:
        """Drop the sections not used since the last call (see the module's docstring)."""
        self._unused = self._table
        self._table = {}

    def __len__(self) -> int:
        return len(self._table) + len(self._unused)

    def _learn(self, data: bytes, start: int, end: int, section: bytes) -> PeerSection | None:
        """Read a section not seen before (through router_view) and keep what it gives."""
        view = router_view(data)
        if view is None or view._start != start or view._end != end:
            return None
        ann = view.read()
        if not ann.to:
            return None                 # routed by the message's own `to`: the general path
        others = data[view._rest:end]
        kept = view._kept
        enc, n = _encode_router(with_hop(ann, self.node_id))
        to_peer = b"".join((_MA_DESCRIPTOR, _map_header(len(enc) + len(others), n + kept), enc, others))
        to_client = b"".join((_MA_DESCRIPTOR, _map_header(len(others), kept), others)) if kept else b""
        s = PeerSection(ann, to_peer, to_client)
        if len(self._table) >= MAX_SECTIONS:
            self._table.clear()
        self._table[section] = s
        return s


def insertion_point(data: bytes) -> int:
    """Where a client's complete message gets its message-annotations section (after the header and
    delivery annotations), or -1 when it has one already (or a form read only by the general path:
    router.amqp.annotations.annotate_ingress)."""
    try:
        p = 0
        if data.startswith(_HEADER):
            p = _composite_end(data, 3)
        if p >= 0 and data.startswith(_DELIVERY_ANN, p):
            p = _composite_end(data, p + 3)
    except (IndexError, struct.error):
        return -1
    if p < 0 or p > len(data) or data.startswith(_MA_DESCRIPTOR, p) or data.startswith(b"\x00\xa3", p):
        return -1
    return p


class IngressSections(dict):
    """The message-annotations section an ingress node adds to a client's message, by routing key:
    ``x-opt-qd.ingress`` and ``.trace`` name this node, ``.to`` the key (what annotate_ingress writes).
    ``sections[key]`` is one dict lookup once the key's section is made."""

    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.hop = "0/" + node_id
        self._unused: dict[str, bytes] = {}     # the table before the last `forget_unused`

    def __missing__(self, key: str) -> bytes:
        s = self._unused.pop(key, None)
        if s is None:
            enc, n = _encode_router(RouterAnnotations(self.hop, [self.hop], key))
            s = b"".join((_MA_DESCRIPTOR, _map_header(len(enc), n), enc))
        if len(self) >= MAX_SECTIONS:
            self.clear()
        self[key] = s
        return s

    def forget_unused(self) -> None:
        """Drop the sections not used since the last call (see the module's docstring)."""
        self._unused = dict(self)
        self.clear()

    def size(self) -> int:
        """Sections kept (those used in the last two periods)."""
        return len(self) + len(self._unused)

    def section(self, key: str) -> bytes:
        """The section for routing key `key` (``self[key]``)."""
        return self[key]
