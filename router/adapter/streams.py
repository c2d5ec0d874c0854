"""Multi-frame transfers, passed on chunk by chunk with bounded memory.

A message that arrives in several frames, or complete but larger than WHOLE_LIMIT (it waited behind
another on its link, or came in one read; a peer's data link excepted: router.adapter.streamlinks), is
routed once every section before the body is in: they are
checked to be in AMQP order, and they hold an anonymous message's `to`, the router annotations of a
message from a peer (a client's are stripped), and the prefix each consumer gets rewritten when the
message crosses the mesh. Each chunk then goes on to every consumer as it arrives, pausing while a
consumer's session and its connection's transport hold more than STREAM_HIGH_WATER bytes for it (less
while the node is over its memory budget: router.forwarding.budget; the
transport encodes whatever the receiver's session window admits: a client with an unbounded window would
otherwise let the node's output buffer grow by the whole message). A consumer busy with a stream takes no
other delivery meanwhile: those wait in the core (`RouterCore.hold`) and go out when the stream ends.

The outcome of a streamed delivery can be decided before its last frame (the consumer settled early or
was lost, it could not be routed, it passed the size limit): it is kept in `final` and given to the
producer when the last frame has arrived.
"""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import (
    pn_delivery_abort,
    pn_delivery_aborted,
    pn_delivery_partial,
    pn_delivery_pending,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_delivery_update,
    pn_link_advance,
    pn_link_current,
    pn_link_recv,
    pn_link_send,
    pn_link_session,
    pn_session_outgoing_bytes,
)

from router.adapter.outcomes import NO_TO, NodeOutcome, OutcomeSnapshot, Rejection, oversize
from router.addressing import address_key
from router.amqp.annotations import AnnotationLayout, RouterAnnotations
from router.amqp.codec import IncompleteError, MalformedError, scan_message
from router.amqp.sections import PREFIX
from router.forwarding.decisions import TO_MANY, TO_ONE
from router.forwarding.records import (
    ACCEPTED,
    MODIFIED,
    REJECTED,
    RELEASED,
    Address,
    Consumer,
    InFlight,
    McastGroup,
    Producer,
)

# Pause a streamed message while its consumer's session holds more than this. Kept small because of what
# Proton-C does with a delivery's unsent bytes: every time the transport writes frames of an outgoing delivery
# it first makes the delivery's buffer contiguous (pn_buffer_bytes -> defrag), a byte-by-byte rotation of the
# buffer's whole capacity. With 1 MiB waiting (and 256 KiB steps: a 2 MiB buffer) the node that streamed a
# 100 MB message on spent 2-6 ms of CPU in some single turns and the RPC calls beside it waited (issue 29,
# point 3); with 64 KiB no turn took 2 ms, its CPU per streamed byte fell by about a third, and the stream
# was as fast (benchmarks/large_bench.py hol).
STREAM_HIGH_WATER = 64 * 1024
STREAM_CHUNK = 64 * 1024             # bytes moved per step of a streamed message
# A transfer larger than this is streamed even when it arrived complete (from a client, or on a peer's
# streaming link): one that waited behind a stream on its link, or came in one read, was read whole and
# given to Proton in one pn_link_send, and to a slow consumer every write of its frames rotated the whole
# buffer (4 MB messages: turns of 12 ms, 0.8 MB/s; issue 29). Below it, the hot path is unchanged.
WHOLE_LIMIT = 64 * 1024
ANON_SCAN_LIMIT = 64 * 1024          # sections before the body must fit in this to be routed


class _PeerProbe:
    """Stands for 'a consumer on a peer node' when asking for the annotated version of a message."""

    __slots__ = ()
    peer = "?"


_TO_PEER = _PeerProbe()


class Stream:
    """A multi-frame inbound delivery being passed on chunk by chunk."""

    __slots__ = ("in_dlv", "in_link", "producer", "outs", "group", "presettled", "prefix", "routed",
                 "final", "size", "payload", "key", "ann", "tel", "oversized")

    def __init__(self, in_dlv: object, in_link: object, producer: Producer) -> None:
        self.in_dlv = in_dlv
        self.in_link = in_link
        self.producer = producer
        self.outs: list[tuple[Consumer, object]] = []
        self.group: McastGroup | None = None
        self.presettled = False
        self.prefix: bytearray | None = None   # bytes read before an anonymous message was routed
        self.routed = False
        # outcome for the producer decided before the transfer completed (consumer settled early or
        # was lost, or the message could not be routed); applied when the last frame has arrived
        self.final: object = None
        self.size = 0                          # bytes read so far
        self.payload = None                    # mesh: consumer -> its version of the prefix
        self.key: str | None = None            # the address it was routed by, once known
        self.ann: RouterAnnotations | None = None   # its router annotations (from a peer)
        self.tel: object = None                # the observer's own record of it
        self.oversized = False                 # it passed the size limit: the rest is dropped


class Streams:
    """The streamed messages of one engine, by inbound and by outbound delivery."""

    def __init__(self, engine: object) -> None:
        self.engine = engine
        self.core = engine.core
        self.node_id = engine.node_id
        self.dirty = engine.dirty
        self.deliveries = engine.deliveries
        self.obs = None
        self.active: dict[object, Stream] = {}     # inbound pn_delivery_t* -> Stream
        self.outs: dict[object, Stream] = {}       # outbound pn_delivery_t* of a stream -> Stream
        self.paused: set[Stream] = set()
        self.draining = False                      # a producer is going: move its streams on unpaused

    # ---- start and routing ---------------------------------------------------------------------------
    def start(self, d: object, link: object, p: Producer) -> None:
        s = Stream(d, link, p)
        s.presettled = bool(pn_delivery_settled(d))
        self.core.arrived(p)
        self.active[d] = s
        # routed once the sections before the body are in: they are checked (AMQP order), a client's
        # router annotations stripped, a message to a peer annotated
        s.prefix = bytearray()
        self.pump(s)

    def _route(self, s: Stream, a: Address, came_from: str | None = None,
               ann: RouterAnnotations | None = None) -> None:
        """Ask the core for the consumers of a streamed message and open an outbound delivery on each."""
        s.routed = True
        s.key = a.key
        core = self.core
        kind, target, rd = core.route_stream(s.producer, a, s.presettled, came_from, ann)
        consumers = target if kind == TO_MANY else [target] if kind == TO_ONE else []
        if not s.presettled and consumers and a.multicast:
            s.group = core.new_group(s.in_dlv, s.producer)
        if self.obs is not None:
            self.obs.stream_routed(s, a.multicast, consumers, rd)
        new_delivery = self.deliveries.new_delivery
        for_stream = self.engine.mesh_links.streams.for_stream
        for c in consumers:
            if c.peer is not None:
                c = for_stream(c)        # a link of its own to that peer: nothing waits behind it
                if c is None:
                    continue             # every streaming link to that peer is busy
            od = new_delivery(c.handle)
            c.busy = True
            s.outs.append((c, od))
            self.outs[od] = s
            if not s.presettled:
                if s.group is not None:
                    core.track_copy(s.group, c, od)
                else:
                    core.track(s.producer, c, s.in_dlv, od, rd)
            self.dirty.add(c.conn)
        if s.group is not None and not s.outs:       # no copy went anywhere after all
            core.group_done(s.group)
            s.group = None

    def _route_prefixed(self, s: Stream) -> bool:
        """Try to route a streamed message from the bytes read so far (anonymous, or crossing the mesh).

        Routing waits until every section before the body is in: that is where `to` and the router
        annotations are, and the part each consumer gets rewritten (annotated for peers, stripped for
        clients).
        """
        prefix = bytes(s.prefix)
        p = s.producer
        core = self.core
        try:
            info = scan_message(prefix)
        except IncompleteError:
            if len(prefix) < ANON_SCAN_LIMIT:
                return False
            info = None
        except MalformedError as exc:
            self._sink(s, REJECTED)
            s.final = Rejection(b"amqp:decode-error", f"malformed message: {exc}".encode())
            return False
        if info is None:
            self._sink(s, REJECTED)
            if p.address is not None:
                s.final = Rejection(b"amqp:decode-error", b"the sections before the body exceed 64 KiB")
            return False
        layout = ann = came_from = None
        if not p.router and info.message_annotations is not None:
            start, end = info.message_annotations
            if PREFIX in prefix[start:end]:
                try:
                    layout = AnnotationLayout(prefix, info)     # a client's x-opt-qd.* keys: stripped
                except MalformedError as exc:
                    self._sink(s, REJECTED)
                    s.final = Rejection(b"amqp:decode-error", f"malformed message: {exc}".encode())
                    return False
        if p.router:
            try:
                layout = AnnotationLayout(prefix, info)
                ann = layout.read()
            except MalformedError:
                self._sink(s, REJECTED)
                return False
            core.credit_back(p)             # a peer's data-in link: replenished as it is forwarded
            came_from = p.conn.router.node_id
            key = self.deliveries.router_key(layout, ann)
            a = core.resolve(key)
        elif p.address is not None:
            a, key = p.address, p.address.key
        else:
            if not info.to:
                self._sink(s, REJECTED)
                return False
            key = address_key(info.to, self.node_id)
            access = p.conn.access
            if access is not None and (access.check_relay or "$" in key):
                key, problem = core.policy.relay(access, key)     # as Deliveries._anonymous_key
                if problem is not None:
                    self._sink(s, REJECTED)
                    s.final = Rejection(b"amqp:unauthorized-access", problem.encode())
                    return False
            a = core.resolve(key)
        if a is None:
            self._sink(s, RELEASED, key, ann)
            return False
        if a.remote or layout is not None:
            s.payload = self.deliveries.payloads(key, prefix, layout, ann, info)
        if a.remote:
            try:
                s.payload(_TO_PEER)                 # any decoding error shows before a byte is sent
            except MalformedError:
                self._sink(s, REJECTED)
                return False
        s.ann = ann
        self._route(s, a, came_from, ann)
        if not s.outs:
            self._sink(s, RELEASED)
            return False
        return True

    # ---- moving the bytes -------------------------------------------------------------------------------
    def pump(self, s: Stream) -> None:
        """Move what has arrived of a streamed message on to its consumers, as far as they can take; from
        a peer's streaming link, then size that link's session window (StreamLinks.size_window)."""
        if not s.producer.streaming:
            self._pump(s)
            return
        before = s.size
        self._pump(s)
        self.engine.mesh_links.streams.size_window(s.producer, s.size - before, self.core.now)

    def _pump(self, s: Stream) -> None:
        d, link = s.in_dlv, s.in_link
        deliveries = self.deliveries
        budget = self.core.ledger.budget
        high = STREAM_HIGH_WATER if budget is None else budget.stream_high_water(STREAM_HIGH_WATER)
        while True:
            if s.outs and not self.draining and any(
                    pn_session_outgoing_bytes(pn_link_session(c.handle)) + c.conn.out_pending
                    > high for c, _ in s.outs):
                self.paused.add(s)
                return
            n = pn_delivery_pending(d)
            if n <= 0:
                break
            n = min(n, STREAM_CHUNK)
            buf = deliveries.buffer(n)
            got = pn_link_recv(link, buf, n)
            if got <= 0:
                break
            s.size += got
            if s.size > s.producer.conn.max_message_size:
                self._too_big(s)                    # abort its copies; the rest is read and dropped
                continue
            if not s.routed:
                s.prefix += ffi.buffer(buf, got)[:]
                if not self._route_prefixed(s):
                    if s.in_dlv not in self.active:
                        return          # settled (rejected / released) already
                    continue
                data = bytes(s.prefix)
                s.prefix = None
                for c, _od in s.outs:
                    out = s.payload(c) if s.payload is not None else data
                    pn_link_send(c.handle, out, len(out))
                    self.dirty.add(c.conn)
                s.payload = None
                continue
            for c, _od in s.outs:
                pn_link_send(c.handle, buf, got)
                self.dirty.add(c.conn)
            self.dirty.add(s.producer.conn)     # reading reopens its session window
        self.paused.discard(s)
        if pn_delivery_aborted(d):
            self._end(s, aborted=True)
        elif not pn_delivery_partial(d) and pn_delivery_pending(d) <= 0:
            self._end(s, aborted=False)

    def resume(self) -> None:
        """Retry paused streams (called after output was written)."""
        if self.paused:
            for s in list(self.paused):
                if s.in_dlv in self.active:
                    self.pump(s)
                else:
                    self.paused.discard(s)

    # ---- outcomes decided before the end ----------------------------------------------------------------
    def _too_big(self, s: Stream) -> None:
        """A streamed transfer passed its connection's max_message_size: abort what was sent on, drop
        the rest as it arrives and answer REJECTED when the last frame is in (nothing is buffered)."""
        if s.oversized:
            return
        s.oversized = True
        outs, s.outs = s.outs, []
        obs = self.obs
        if obs is not None:
            obs.grew(s.group if s.group is not None else s.in_dlv, s.size)
        for c, od in outs:
            self.outs.pop(od, None)
            c.busy = False
            pn_delivery_abort(od)                   # settles it: the consumer sees an aborted transfer
            e = self.core.settle(od)
            if e is not None and e.group is not None:
                self.deliveries.copy_settled(e.group, None, MODIFIED, NodeOutcome(MODIFIED))
            elif e is not None and obs is not None:
                obs.settled(e, REJECTED)
            self.deliveries.flush_held(c)
            self.dirty.add(c.conn)
        s.routed = True
        s.prefix = None
        s.payload = None
        s.final = oversize(s.producer.conn.max_message_size)
        self.core.credit_back(s.producer)

    def _sink(self, s: Stream, outcome: int, key: str | None = None,
              ann: RouterAnnotations | None = None) -> None:
        """Give up on a streamed message: read and discard the rest, then answer with `outcome`.
        `key`, `ann`: its address and router annotations, where known."""
        if not s.routed:
            p = s.producer
            s.key = key or (p.address.key if p.address else None)
            s.ann = ann
            if self.obs is not None:
                self.obs.stream_sunk(s)
        s.routed = True
        s.prefix = None
        s.outs = []
        s.final = NO_TO if outcome == REJECTED else NodeOutcome(outcome)
        self.core.credit_back(s.producer)           # credit back now; the answer comes at the end

    def copy_decided(self, s: Stream, e: InFlight, c: Consumer, od: object, outcome: int) -> None:
        """The consumer decided on a streamed delivery before it was complete: keep the outcome for the
        producer (or the group) and stop sending there."""
        if e.group is None:
            s.final = OutcomeSnapshot(od, outcome)
            if self.obs is not None:
                self.obs.grew(e.in_dlv, s.size)
                self.obs.settled(e, outcome)
        else:
            self.deliveries.copy_settled(e.group, od, outcome, None)
        self._stop_copy(s, c, od)               # aborts (and so settles) od: do it last
        self.dirty.add(c.conn)

    def _stop_copy(self, s: Stream, c: Consumer, od: object) -> None:
        """Stop sending a stream to `c`. Aborting settles `od` (Proton may reuse it): nothing may touch
        `od` afterwards."""
        s.outs = [(cc, d) for cc, d in s.outs if d != od]
        c.busy = False
        pn_delivery_abort(od)
        self.deliveries.flush_held(c)

    def deliver_arrived(self, link: object, p: Producer) -> None:
        """`p`'s link is going (detached, or its connection closed): what has wholly arrived pre-settled
        on it still goes on, as it would have had the link stayed.

        A pre-settled sender did its part once its transfers were written: one that sends a burst and
        closes (cleanly) must not lose the tail of it because a streamed message was paused for a slow
        consumer when the close came, nor the transfers waiting behind that stream. They are in Proton's
        memory already (within the session window); they are moved on now, without pausing. What is
        still arriving, or unsettled (its sender can no longer learn an outcome), is left to
        `producer_lost` and the link's end.
        """
        mine = [s for s in self.active.values() if s.producer is p]
        if not mine and link not in self.engine.unblocked:
            return
        self.draining = True
        try:
            for s in mine:
                d = s.in_dlv
                # settled by its sender, first frame or last (python-qpid-proton settles at the end)
                if pn_delivery_settled(d) and not pn_delivery_partial(d) and not pn_delivery_aborted(d):
                    self.pump(s)
            d = pn_link_current(link)
            on_delivery = self.deliveries.on_delivery
            while (d != ffi.NULL and d not in self.active and pn_delivery_settled(d)
                   and not pn_delivery_partial(d)):
                on_delivery(d, link)
                after = pn_link_current(link)
                if after == d:
                    break
                d = after
        finally:
            self.draining = False

    def producer_lost(self, p: Producer) -> None:
        """`p` detached: abort the copies of its streams in progress."""
        for d, s in [(d, s) for d, s in self.active.items() if s.producer is p]:
            del self.active[d]
            self.paused.discard(s)
            for c, od in s.outs:
                self.outs.pop(od, None)
                c.busy = False
                if c.alive:
                    pn_delivery_abort(od)
                    self.dirty.add(c.conn)
                    self.core.settle(od)
                    self.deliveries.flush_held(c)

    # ---- the end ------------------------------------------------------------------------------------------
    def _end(self, s: Stream, aborted: bool) -> None:
        """The last frame of a streamed message arrived (or the producer aborted it)."""
        d, link, p = s.in_dlv, s.in_link, s.producer
        self.active.pop(d, None)
        self.paused.discard(s)
        pn_link_advance(link)
        self.engine.unblocked.append(link)       # transfers behind it may have arrived meanwhile
        core = self.core
        obs = self.obs
        for c, od in s.outs:
            self.outs.pop(od, None)
            c.busy = False
            if aborted:
                pn_delivery_abort(od)               # settles it as well
                core.settle(od)
            else:
                pn_link_advance(c.handle)
                if obs is not None:
                    obs.grew(d, s.size)
                if s.presettled:
                    pn_delivery_settle(od)
                elif c.presettle:
                    self._hand_over_copy(s, od)
            self.dirty.add(c.conn)
        if obs is not None:
            obs.stream_ended(s, aborted)
        if aborted:
            if s.group is not None:
                core.group_done(s.group)
            pn_delivery_settle(d)
            core.credit_back(p)
        elif s.presettled:
            pn_delivery_settle(d)
            core.sent_presettled(p, [c for c, _ in s.outs])
        elif s.final is not None:
            s.final.apply(d)
            pn_delivery_settle(d)
            core.count_outcome(s.final.outcome, p)
        elif not s.outs and s.group is None:
            pn_delivery_update(d, RELEASED)          # nobody could take it
            pn_delivery_settle(d)
            core.count_outcome(RELEASED, p)
            core.credit_back(p)
        # otherwise the consumers' outcomes settle it later, as for any delivery
        for c, _od in s.outs:
            self.deliveries.flush_held(c)
        self.dirty.add(p.conn)

    def _hand_over_copy(self, s: Stream, od: object) -> None:
        """A streamed unsettled delivery went settled to an at-most-once consumer: it counts ACCEPTED."""
        e = self.core.settle(od)
        pn_delivery_settle(od)
        if e is None:
            return
        if e.group is not None:
            self.deliveries.copy_settled(e.group, None, ACCEPTED, NodeOutcome(ACCEPTED))
        else:
            s.final = NodeOutcome(ACCEPTED)
            if self.obs is not None:
                self.obs.settled(e, ACCEPTED)
