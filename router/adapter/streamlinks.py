"""Streaming links: each streamed message crosses to a peer node on a link (and session) of its own.

A multi-frame message takes its link for as long as it streams: on the peer's one data link it would hold
up everything behind it (the link is ordered; the core holds the link's other deliveries until the stream
ends), and on the data link's session a stream paused at the far end would close the session window for
every other link. So, as Qpid Dispatch Router does since DISPATCH-1545, a streamed message that goes to
a peer goes on a streaming link to that peer instead: a sender with terminus capability `qd.router-stream`,
alone on its session (its own incoming window at the far end), opened on demand and kept for the next
streamed message once this one ends. Small messages keep the data link, so a 100 MB message and RPC
calls between the same two nodes do not wait for each other.

Edge connections (an edge's uplink, an interior's `role: edge` listener) have them too, both ways.
Either side opens its own streaming links, when the peer offered `qd.streaming-links` in its Open (older
peers get streams on the data link, as before). The far end sees an ordinary data-in link (a core
producer routed per message). At most `MAX_STREAM_LINKS` per direction and peer: with all of them busy,
that peer takes no further stream for now (as a consumer busy with a stream takes no other one).

The data link then carries only messages its sender had whole (from a node of this version, at most
router.adapter.streams.WHOLE_LIMIT: a larger one is streamed even when it arrived complete). One that
crosses in several frames is read whole once its last frame is in (below `WHOLE_ON_DATA_LINK` bytes; a
stream otherwise, as from an older peer): were it streamed, it could meet a stream from a streaming link
at the same consumer, which can take one stream at a time.
"""

from __future__ import annotations

import logging

from cproton_ffi.lib import (
    pn_link_open,
    pn_link_session,
    pn_link_source,
    pn_link_target,
    pn_sender,
    pn_session,
    pn_session_get_incoming_capacity,
    pn_session_open,
    pn_session_set_incoming_capacity,
    pn_transport_get_max_frame,
)

from router.defaults import STREAM_WINDOW, STREAM_WINDOW_SHARED
from router.forwarding.records import Consumer, Producer
from router.logs import cut

log = logging.getLogger(__name__)

STREAM = "qd.router-stream"            # terminus capability of a streaming link
STREAMING_LINKS = "qd.streaming-links"   # connection capability: the peer opens and takes them
MAX_STREAM_LINKS = 16                  # per peer and direction
# A streaming link's session at the receiving end: bytes of a stream the peer may have in flight to it (the
# data link's session keeps SESSION_CAPACITY). Those bytes share the one TCP connection with the data link,
# and a small message sent beside a stream waits behind what is in flight of it. So the window is
# `node.stream_window` while the peer's data link is quiet and `node.stream_window_shared` while it carries
# messages (one arrived in the last SHARED_FOR seconds). RPC calls C -> B beside 100 MB streams C -> B
# (benchmarks/large_bench.py hol, 2-core machine, runs of 3 rounds alternated in one window): p99 8.3 and
# 11.1 ms with 256 KiB throughout, 5.6 and 6.0 ms with 32 KiB while shared (7.1-7.3 ms with 64 KiB), 3.3 ms
# with the streams on another pair of nodes (A -> D); the streams took 5.1-7.2 s against 6.8-8.5 s while the
# calls ran beside them. A window is also the most a stream moves per round trip: window / RTT bounds its
# rate, so meshes over long round trips want both larger (docs/CONFIGURATION.md). 16 links x the window
# also bounds what a peer's paused streams can hold in a node.
SHARED_FOR = 0.5        # seconds after the last message on the peer's data link
# A multi-frame message on a peer's data link is read whole, once complete, up to this size (half the
# data link's session window, so that it always can complete)
WHOLE_ON_DATA_LINK = 4 * 1024 * 1024


class StreamLinks:
    """The streaming links of one engine's inter-router connections (see the module doc)."""

    def __init__(self, engine: object, set_capability: object) -> None:
        self.engine = engine
        self.core = engine.core
        self.links = engine.links
        self.dirty = engine.dirty
        self.node_id = engine.node_id
        self._set_capability = set_capability
        self._names = 0
        self.opened = 0                # streaming links this node opened (management: streamLinks)
        self.window = STREAM_WINDOW                 # node.stream_window
        self.shared_window = STREAM_WINDOW_SHARED   # node.stream_window_shared

    def for_stream(self, c: Consumer) -> Consumer | None:
        """The link a streamed message for peer data link `c` goes on: a free streaming link to that
        peer, a new one, `c` itself for an older peer, or None when all MAX_STREAM_LINKS are busy (that
        peer cannot take another stream now, as a consumer busy with one cannot)."""
        conn = c.conn
        peer = conn.router
        if peer is None or not peer.streaming or not conn.alive:
            return c
        for sc in peer.stream_out:
            if not sc.busy and sc.alive:
                return sc
        if len(peer.stream_out) >= MAX_STREAM_LINKS:
            return None
        return self._open(conn, peer)

    def _open(self, conn: object, peer: object) -> Consumer:
        ssn = pn_session(conn.pn_conn)
        pn_session_set_incoming_capacity(ssn, self.window)
        pn_session_open(ssn)
        self._names += 1
        link = pn_sender(ssn, f"qdlink.{self.node_id}.{STREAM}.{self._names}".encode())
        self._set_capability(pn_link_source(link), STREAM)
        self._set_capability(pn_link_target(link), STREAM)
        pn_link_open(link)
        # deliveries may be put on it before the peer's attach and credit arrive: Proton keeps them
        sc = self.core.add_router_consumer(link, conn, peer.node_id)
        self.links[link] = sc
        conn.links.add(link)
        peer.stream_out.append(sc)
        self.opened += 1
        self.dirty.add(conn)
        log.debug("streaming link %d to node %s opened", len(peer.stream_out), cut(peer.node_id))
        return sc

    def admit(self, conn: object, is_sender: bool) -> bytes | None:
        """A streaming link the peer attached: None to take it (as a data-in link), else why not."""
        peer = conn.router
        if is_sender:
            return b"a streaming link is opened by the node that sends on it"
        if peer.stream_in >= MAX_STREAM_LINKS:
            return f"at most {MAX_STREAM_LINKS} streaming links per peer".encode()
        peer.stream_in += 1
        return None

    def capacity(self, conn: object, window: int) -> int:
        """A session capacity of `window` bytes on `conn`, but at least two of its frames (Proton's window
        is in whole frames: below one, the peer could send nothing)."""
        return max(window, 2 * pn_transport_get_max_frame(conn.pn_transport))

    def size_window(self, p: Producer, read: int, now: float) -> None:
        """Size the session window of the peer's streaming link `p`, of which `read` bytes were just read.

        A smaller window takes effect only as the peer uses what it was granted: Proton closes the
        connection on a transfer beyond the window it last advertised, and the peer may have sent up to
        that window before our next flow reaches it. So the capacity falls by at most the bytes read since
        it was last set (each set is followed by a flow, and reads happen only in the stream's pumps, each
        of which ends here); it rises at once."""
        conn = p.conn
        peer = conn.router
        if peer is None or not p.alive:         # (a freed link has no session to size)
            return
        data = self.links.get(peer.data_in)
        target = self.capacity(conn, stream_window(peer, data.delivered if data is not None else 0, now,
                                                   self.window, self.shared_window))
        ssn = pn_link_session(p.handle)
        now_cap = pn_session_get_incoming_capacity(ssn)
        new_cap = target if target >= now_cap else max(target, now_cap - read)
        if new_cap != now_cap:
            pn_session_set_incoming_capacity(ssn, new_cap)
            self.dirty.add(conn)


def stream_window(peer: object, data_delivered: int, now: float, window: int, shared: int) -> int:
    """The window for a stream from `peer` (a RouterPeer) whose data-in link has delivered `data_delivered`
    messages so far: `shared` while that count moved in the last SHARED_FOR seconds, else `window`."""
    if data_delivered != peer.data_seen:
        peer.data_seen = data_delivered
        peer.data_at = now
    return shared if now - peer.data_at < SHARED_FOR else window
