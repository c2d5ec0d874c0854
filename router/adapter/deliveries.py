"""Complete transfers and their outcomes: read a delivery, ask the core where it goes, send it, settle it.

Hot path (a complete single-frame transfer between two clients of this node): read it into one reusable
buffer, ask the core (`route` -> TO_ONE and a consumer), send the same bytes on a new outbound delivery,
and tell the core (`sent`, which answers with the send mode). When the consumer settles, `settle` pops the
in-flight entry and its outcome (with details) is copied back to the producer's delivery. Bodies are never
decoded; only anonymous-relay transfers are scanned for `to`, and transfers from peers for their router
annotations (router.amqp.annotations; router.amqp.peersections keeps what each distinct annotations section
gives, so a stream between two nodes is read once, and the section an ingress adds, per address). An
anonymous-relay message's `to` is checked against the policy (router.policy: a `$management` request goes
to the agent's address for the sender's management level, other `$` services are refused, and `targets`
when the sender's group restricts them); a named link was checked once, at attach.

Every path applies the core's decisions the same way: a send mode other than TRACKED settles the copy on
the way out (`_settled_on_the_way`); a HOLD keeps the bytes until the consumer's stream ends
(`flush_held`); UNROUTABLE goes back RELEASED (`_unroutable`). What was done is reported to the observer
at those same places.
"""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import (
    pn_delivery,
    pn_delivery_link,
    pn_delivery_pending,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_delivery_update,
    pn_link_advance,
)

from router.adapter import hotpath
from router.adapter.hotpath import (
    ABORTED,
    EMPTY,
    NOT_READABLE,
    NULL,
    PARTIAL,
    find_to,
    send,
    send_inserted,
    send_stream,
    set_buffer,
    set_stream,
    settle_pair,
    take,
    take_peer,
)
from router.adapter.hotpath import outcome as take_outcome
from router.adapter.outcomes import NodeOutcome, OutcomeSnapshot, Rejection, copy_outcome, oversize
from router.adapter.routerlinks import RouterLink
from router.adapter.streamlinks import WHOLE_ON_DATA_LINK
from router.addressing import address_key
from router.amqp.annotations import (
    AnnotationLayout,
    RouterAnnotations,
    RouterView,
    annotate_ingress,
    router_view,
    strip,
    with_hop,
)
from router.amqp.codec import MalformedError, scan_message
from router.amqp.peersections import IngressSections, PeerSections, insertion_point
from router.amqp.sections import SectionShapes
from router.forwarding.decisions import BEST, DONE, HANDED_OVER, HOLD, PRESETTLED, TO_MANY, TO_ONE, TRACKED
from router.forwarding.records import (
    ACCEPTED,
    RELEASED,
    Address,
    Consumer,
    Held,
    InFlight,
    McastGroup,
    Producer,
    RemoteDest,
)

ANON_SCAN_LIMIT = 64 * 1024          # sections before the body of an anonymous message must fit in this
TO_KEYS_KEPT = 4096                  # anonymous-relay `to` addresses whose key is kept (then all forgotten)
ACCEPT = NodeOutcome(ACCEPTED)


class Deliveries:
    """Transfers that arrived whole, outcomes of what was sent, and deliveries held behind a stream."""

    def __init__(self, engine: object) -> None:
        self.core = engine.core
        self.node_id = engine.node_id
        self.peer_sections = PeerSections(self.node_id)    # messages from peers, by annotations section
        self.ingress_sections = IngressSections(self.node_id)   # what we add to clients' messages, by key
        shapes = SectionShapes()
        self.check_sections = shapes.check                 # client_sections, fast for a known shape
        self.ingress_insertion = shapes.insertion          # the check, for a message an ingress annotates
        self.links = engine.links
        self.dirty = engine.dirty
        self.engine = engine
        self.streams: object = None          # router.adapter.streams.Streams (set by the engine)
        self.stream_ins: dict = {}           # its `active` and `outs` tables (the same dicts)
        self.stream_outs: dict = {}
        self.obs = None                      # the observer (router.adapter.observer), if any
        self._keys_of_to: dict[bytes, str] = {}   # an anonymous-relay `to` (its bytes) -> its routing key
        self._bufsize = 64 * 1024
        self.buf = ffi.new("char[]", self._bufsize)
        self.view = memoryview(ffi.buffer(self.buf))    # the same bytes, indexed as ints
        self.reader = hotpath.reader(self.buf, self._bufsize)     # reads into it, follows a peer stream
        self.stream: tuple | None = None     # that stream: its section and growth (`_follow`)
        self.in_flight = self.core.in_flight     # the core's table (see RouterCore.forward_from_peer)
        self._tagnum = hotpath.TAG_COUNTER    # delivery tags: hotpath.send draws from the same counter
        self._tag = hotpath.TAG

    def buffer(self, n: int) -> object:
        """The reusable read buffer, at least `n` bytes long."""
        if n > self._bufsize:
            self._bufsize = max(n, self._bufsize * 2)
            self.buf = ffi.new("char[]", self._bufsize)
            self.view = memoryview(ffi.buffer(self.buf))
            set_buffer(self.reader, self.buf, self._bufsize)
        return self.buf

    def new_delivery(self, link: object) -> object:
        """A new outbound delivery on `link` (tags are unique per node)."""
        self._tagnum[0] += 1
        return pn_delivery(link, self._tag)

    def send_whole(self, c: Consumer, data: object, n: int) -> object:
        """Send a complete message on `c`'s link as a new delivery; returns the delivery."""
        self.dirty.add(c.conn)
        return send(c.handle, data, n)

    # ---- arrivals ----------------------------------------------------------------------------------------
    def on_delivery(self, d: object, link: object) -> None:
        """A delivery event on `link`: a transfer arrived, or a consumer updated one of ours."""
        rec = self.links.get(link)
        if rec is None:
            return
        cls = rec.__class__
        if cls is Consumer:
            self.on_outcome(d, rec)
            return
        if cls is RouterLink:
            self.engine.mesh_links.on_delivery(d, link, rec)
            return
        if self.stream_ins:
            s = self.stream_ins.get(d)
            if s is not None:
                self.streams.pump(s)
                return
        if rec.router:                  # from a peer node: routed by its router annotations
            self._from_peer(d, link, rec)
            return
        buf = self.buf
        n = take(d, link, self.reader)
        if n < 0:
            if n != NOT_READABLE:
                self._not_taken(d, link, rec, n)
            return
        presettled = n & 1              # 0 or 1
        n >>= 1
        if n > rec.conn.max_message_size:
            self._reject(d, rec, presettled, oversize(rec.conn.max_message_size))
            return
        a = rec.address
        if a is not None and a.remote:  # served by other nodes: checked and annotated on the way
            self._ingress(d, rec, a, buf, n, presettled)
            return
        try:                            # a client's message: sections in AMQP order, no router keys
            if self.check_sections(self.view, n):
                buf, n = self._strip(buf, n)
        except MalformedError as exc:
            why = f"{BAD_SECTIONS}{exc}".encode()
            self._reject(d, rec, presettled, Rejection(b"amqp:decode-error", why))
            return
        if a is None:
            key = self._anonymous_key(d, buf, n, presettled, rec)
            if key is None:
                return
            a = self.core.resolve(key)
            if a is not None and a.remote:
                self._to_mesh(d, rec, a, key, self.view[:n].tobytes(), presettled)
                return
        core = self.core
        c = core.route(rec, a, presettled)
        obs = self.obs
        if obs is not None and rec.credit == 0:
            obs.event("credit_starved_start", link, a.key if a is not None else None, rec.conn.peer)
        if c.__class__ is not Consumer:                 # anything but "this consumer, now"
            kind, target, _ = c
            if kind == TO_MANY:
                self._multicast(d, rec, target, buf, n, presettled, None, a.key)
            elif kind == HOLD:
                core.hold(target, Held(ffi.buffer(buf, n)[:], d, rec, presettled, None, a.key))
            else:
                self._unroutable(d, rec, presettled, key if a is None else a.key, n)
            return
        od = send(c.handle, buf, n)    # send_whole, inlined: this is the hot path
        self.dirty.add(c.conn)
        mode = core.sent(rec, c, d, od, presettled, None, n,
                         -1 if obs is None else obs.route_of(a.key, rec, c, None, None))
        if mode:
            self._settled_on_the_way(mode, d, od, rec, a.key, c, None, None, n)

    def _not_taken(self, d: object, link: object, p: Producer, why: int) -> None:
        """A transfer `take` did not read (`why`, its code): one still arriving starts a stream, an
        aborted one goes nowhere, an empty one is rejected; a larger one than the read buffer is read
        here (or rejected, over the connection's maximum message size)."""
        if why == PARTIAL:
            if p.router and not p.streaming and pn_delivery_pending(d) < WHOLE_ON_DATA_LINK:
                return                          # a peer's data link: read whole once complete
            self.streams.start(d, link, p)
        elif why == ABORTED:                    # Proton marks aborted transfers settled
            pn_link_advance(link)
            pn_delivery_settle(d)
            self.core.arrived(p)
            self.core.unroutable(p, True)
        elif why == EMPTY:                      # an empty transfer (PN_EOS): no message to pass on
            self._reject(d, p, pn_delivery_settled(d), Rejection(b"amqp:decode-error", b"empty message"))
        else:                                   # TOO_LARGE for the read buffer
            n = pn_delivery_pending(d)
            if n > p.conn.max_message_size:
                pn_link_advance(link)
                self._reject(d, p, pn_delivery_settled(d), oversize(p.conn.max_message_size))
                return
            self.buffer(n)                      # grown to fit: `take` reads it now
            self.on_delivery(d, link)

    def _checked(self, d: object, p: Producer, buf: object, n: int, presettled: bool
                 ) -> tuple[object, int] | None:
        """The section check of a client's message in the read buffer (`check_sections`): the message to
        go on (without router keys), or None when it was rejected (sections out of AMQP order)."""
        try:
            if self.check_sections(self.view, n):
                return self._strip(buf, n)
        except MalformedError as exc:
            why = f"{BAD_SECTIONS}{exc}".encode()
            self._reject(d, p, presettled, Rejection(b"amqp:decode-error", why))
            return None
        return buf, n

    def _strip(self, buf: object, n: int) -> tuple[object, int]:
        """Rewrite the client's message in the read buffer without its `x-opt-qd.*` annotations."""
        data = strip(ffi.buffer(buf, n)[:])
        n = len(data)
        buf = self.buffer(n)
        ffi.memmove(buf, data, n)
        return buf, n

    def _settled_on_the_way(self, mode: int, d: object, od: object, p: Producer, key: str, c: Consumer,
                            ann: RouterAnnotations | None, rd: RemoteDest | None, n: int) -> None:
        """A copy went out settled (PRESETTLED, or HANDED_OVER to an at-most-once consumer): it ends here."""
        if mode == PRESETTLED:
            settle_pair(d, 0, od)
        else:
            self._hand_over(d, p, od)
        if self.obs is not None:
            self.obs.forwarded_settled(key, p, c, ann, rd, mode, n)

    def _hand_over(self, d: object, p: Producer, od: object = NULL) -> None:
        """Settle an unsettled delivery ACCEPTED: it went to an at-most-once (pre-settled) consumer (as
        `od`, settled too, unless NULL)."""
        settle_pair(d, ACCEPTED, od)
        self.core.count_outcome(ACCEPTED, p)
        self.dirty.add(p.conn)

    def _anonymous_key(self, d: object, buf: object, n: int, presettled: bool, p: Producer) -> str | None:
        """The routing key of an anonymous-relay transfer's `to`; settled here if it has none. The usual
        encodings are found by `find_to` and their key kept by the address's bytes (replies to one caller
        repeat them); anything else is read by `scan_message`, which says what is wrong."""
        span = find_to(buf, n if n <= ANON_SCAN_LIMIT else ANON_SCAN_LIMIT)
        key = None
        if span >= 0:
            at = span >> 32
            raw = self.view[at:at + (span & 0xFFFFFFFF)].tobytes()
            key = self._keys_of_to.get(raw)
            if key is None:
                key = self._key_of_to(raw)
        if key is None:
            try:
                head = ffi.buffer(buf, min(n, ANON_SCAN_LIMIT))[:]
                to = scan_message(head, complete=n <= ANON_SCAN_LIMIT).to
            except MalformedError:
                self._reject(d, p, presettled, NO_PROPERTIES)
                return None
            if not to:
                self._reject(d, p, presettled, Rejection(b"amqp:precondition-failed",
                                                         b"anonymous relay: the message has no 'to' address"))
                return None
            key = address_key(to, self.node_id)
        access = p.conn.access
        if access is not None and (access.check_relay or "$" in key):
            key, problem = self.core.policy.relay(access, key)   # targets; $management by level
            if problem is not None:
                self._reject(d, p, presettled, Rejection(UNAUTHORIZED, problem.encode()))
                return None
        return key

    def _key_of_to(self, raw: bytes) -> str | None:
        """The routing key of the `to` address `raw` (kept for the next message to it); None if it is not
        UTF-8 (`scan_message` then rejects the message)."""
        try:
            to = raw.decode()
        except UnicodeDecodeError:
            return None
        keys = self._keys_of_to
        if len(keys) >= TO_KEYS_KEPT:
            keys.clear()
        key = keys[raw] = address_key(to, self.node_id)
        return key

    # ---- across the mesh -----------------------------------------------------------------------------
    def _from_peer(self, d: object, link: object, p: Producer) -> None:
        """A transfer from a peer node. The common case (a complete message for an anycast address,
        annotations as a meshrouter ingress writes them) is read from the table of sections seen before
        (router.amqp.peersections) and forwarded from the read buffer; anything else takes `_from_router`.
        The reader follows one stream (`take_peer` compares each message with its last one's start, and
        `send_stream` sends the message with that start rewritten), so the usual message is not copied."""
        r = take_peer(d, link, self.reader)
        if r < 0:
            if r != NOT_READABLE:
                self._not_taken(d, link, p, r)
            return
        presettled = r & 1
        n = r >> 2
        if n > p.conn.max_message_size:
            self._reject(d, p, presettled, oversize(p.conn.max_message_size))
            return
        if r & 2:
            s, grow, found = self.stream
        else:
            found = self.peer_sections.find(self.view[:n].tobytes())
            if found is None:
                self._from_router(d, p, self.view[:n].tobytes(), presettled)
                return
            s, grow, found = self._follow(found)
        core = self.core
        key = s.key
        if self.obs is None:                    # the usual cases: decided and counted in one call
            if not presettled:
                e = core.forward_from_peer(p, key, s.hops, d)
                if e is not None:
                    c = e.consumer
                    self.in_flight[send_stream(c.handle, self.reader, c.peer is None)] = e   # as `sent` would
                    self.dirty.add(c.conn)
                    return
            else:
                c = core.forward_settled_from_peer(p, key, s.hops)
                if c is not None:
                    settle_pair(d, 0, send_stream(c.handle, self.reader, c.peer is None))
                    self.dirty.add(c.conn)
                    return
        routed = core.route_from_peer(p, key, s.hops)
        if routed is None:                      # multicast
            self._from_router(d, p, self.view[:n].tobytes(), presettled)
            return
        c, rd = routed
        obs = self.obs
        if obs is not None and p.credit == 0:
            obs.event("credit_starved_start", p.handle, key, p.conn.peer)
        if c is None:
            self._unroutable(d, p, presettled, key, n)
            return
        to_client = c.peer is None
        if c.busy:
            end, to_peer, head, _ = found
            if not to_client:
                head = to_peer
            core.hold(c, Held(head + self.view[end:n], d, p, presettled, None, key, s.ann, rd))
            return
        od = send_stream(c.handle, self.reader, to_client)     # the message, its start rewritten
        n += grow[to_client]
        self.dirty.add(c.conn)
        mode = core.sent(p, c, d, od, presettled, rd, n,
                         -1 if obs is None else obs.route_of(key, p, c, s.ann, rd))
        if mode:
            self._settled_on_the_way(mode, d, od, p, key, c, s.ann, rd, n)

    def _follow(self, found: tuple) -> tuple:
        """Make the stream `found` (PeerSections.find, of the message in the read buffer) the reader's:
        returns its section, how much longer a message gets toward a peer and toward a client, and
        `found`."""
        end, to_peer, to_client, s = found
        set_stream(self.reader, self.buf, end, to_peer, len(to_peer), to_client, len(to_client))
        self.stream = stream = (s, (len(to_peer) - end, len(to_client) - end), found)
        return stream

    def _ingress(self, d: object, p: Producer, a: Address, buf: object, n: int, presettled: bool) -> None:
        """A client's complete message (`buf[:n]`, the read buffer) on a named link for address `a`,
        which other nodes serve. The usual case is sent here: a message of the kept shape (checked by
        SectionShapes.insertion, which also says where the annotations go), an anycast address, a next
        hop that takes it now; it gets the annotations section made once per address (IngressSections).
        Anything else: `_ingress_other`, `_ingress_routed`."""
        at = self.ingress_insertion(self.view, n)
        if at < 0 or a.multicast:
            self._ingress_other(d, p, a, buf, n, presettled, at)
            return
        core = self.core
        rd = core.route_ingress(p, a, presettled)
        if rd.__class__ is not RemoteDest:      # a local consumer, HOLD, or nowhere
            self._ingress_routed(d, p, a, buf, n, presettled, at, rd)
            return
        key = a.key
        obs = self.obs
        if obs is not None and p.credit == 0:
            obs.event("credit_starved_start", p.handle, key, p.conn.peer)
        section = self.ingress_sections[key]
        c = rd.out
        m = len(section)
        od = send_inserted(c.handle, self.reader, at, section, m)     # the section inserted at `at`
        n += m
        self.dirty.add(c.conn)
        mode = core.sent(p, c, d, od, presettled, rd, n,
                         -1 if obs is None else obs.route_of(key, p, c, None, rd))
        if mode:
            self._settled_on_the_way(mode, d, od, p, key, c, None, rd, n)

    def _ingress_other(self, d: object, p: Producer, a: Address, buf: object, n: int, presettled: bool,
                       at: int) -> None:
        """`_ingress` for a message its kept shape did not check (`at` < 0: `_checked` does), or for a
        multicast address (`_to_mesh`)."""
        if at < 0:
            checked = self._checked(d, p, buf, n, presettled)
            if checked is None:
                return
            buf, n = checked
        if a.multicast:
            self._to_mesh(d, p, a, a.key, self.view[:n].tobytes(), presettled)
            return
        self._ingress_routed(d, p, a, buf, n, presettled, at, self.core.route_ingress(p, a, presettled))

    def _ingress_routed(self, d: object, p: Producer, a: Address, buf: object, n: int, presettled: bool,
                        at: int, routed: RemoteDest | tuple) -> None:
        """The rest of `_ingress` once `route_ingress` answered `routed`, whatever it is. Toward a peer the
        message gets the annotations section inserted at `at` (-1: where `insertion_point` finds, or by
        the general rewrite when it has annotations of its own)."""
        core = self.core
        key = a.key
        if routed.__class__ is RemoteDest:
            kind, c, rd = TO_ONE, routed.out, routed
        else:
            kind, c, rd = routed
        obs = self.obs
        if obs is not None and p.credit == 0:
            obs.event("credit_starved_start", p.handle, key, p.conn.peer)
        if not kind:
            self._unroutable(d, p, presettled, key, n)
            return
        out = None
        if c.peer is not None:
            if at >= 0:
                view = self.view
                section = self.ingress_sections[key]
                out = section + view[:n] if at == 0 else b"".join((view[:at], section, view[at:n]))
            else:
                out = self._annotated(d, p, key, n, presettled)
                if out is None:
                    return
        if kind == HOLD:
            held = out if out is not None else self.view[:n].tobytes()
            core.hold(c, Held(held, d, p, presettled, None, key, None, rd))
            return
        if out is None:
            od = self.send_whole(c, buf, n)
        else:
            n = len(out)
            od = self.send_whole(c, out, n)
        mode = core.sent(p, c, d, od, presettled, rd, n,
                         -1 if obs is None else obs.route_of(key, p, c, None, rd))
        if mode:
            self._settled_on_the_way(mode, d, od, p, key, c, None, rd, n)

    def _annotated(self, d: object, p: Producer, key: str, n: int, presettled: bool) -> object:
        """A client's message in the read buffer with the router annotations an ingress adds, when its
        shape is not a known one; None when it was rejected (unreadable annotations of its own)."""
        data = self.view[:n].tobytes()
        at = insertion_point(data)
        if at >= 0:
            return b"".join((memoryview(data)[:at], self.ingress_sections[key], memoryview(data)[at:]))
        try:
            return self.rewritten(True, key, data, None, None)      # annotations of its own
        except MalformedError:
            self._reject(d, p, presettled, UNREADABLE, counted=True)
            return None

    def _from_router(self, d: object, p: Producer, data: bytes, presettled: bool) -> None:
        """A complete transfer from a peer node: route it by its router annotations (the general path)."""
        try:
            layout = router_view(data)          # the common form, read at a fraction of the cost
            if layout is None:
                layout = AnnotationLayout(data)
                ann = layout.read()
            else:
                ann = layout.ann
        except MalformedError:
            self._reject(d, p, presettled, UNREADABLE)
            return
        key = self.router_key(layout, ann)
        self._to_mesh(d, p, self.core.resolve(key), key, data, presettled, layout, ann, p.conn.router.node_id)

    def router_key(self, layout: AnnotationLayout | RouterView, ann: RouterAnnotations) -> str:
        """The routing key of a message from a peer: its `x-opt-qd.to`, else its `to`."""
        return ann.to or address_key(layout.info.to or "", self.node_id)

    def rewritten(self, to_peer: bool, key: str, data: bytes, layout: AnnotationLayout | RouterView | None,
                  ann: RouterAnnotations | None, info: object = None) -> object:
        """The bytes a message goes on with: annotated (a hop added, `to` kept) toward a peer node, its
        router annotations stripped toward a client."""
        if not to_peer:
            return layout.strip() if layout is not None else data
        hop = with_hop(ann, self.node_id)
        if hop.to is None:
            hop.to = key
        if layout is not None:
            return layout.rewrite(hop)
        if info is None:
            return annotate_ingress(data, hop)          # a client's complete message
        return AnnotationLayout(data, info).rewrite(hop)

    def payloads(self, key: str, data: bytes, layout: AnnotationLayout | RouterView | None,
                 ann: RouterAnnotations | None, info: object = None):
        """A function giving the bytes to send to a consumer (`rewritten`, made once per kind)."""
        made: dict[bool, object] = {}

        def payload(c: Consumer) -> object:
            to_peer = c.peer is not None
            out = made.get(to_peer)
            if out is None:
                out = made[to_peer] = self.rewritten(to_peer, key, data, layout, ann, info)
            return out
        return payload

    def _to_mesh(self, d: object, p: Producer, a: Address | None, key: str, data: bytes, presettled: bool,
                 layout: AnnotationLayout | RouterView | None = None, ann: RouterAnnotations | None = None,
                 came_from: str | None = None) -> None:
        """Forward a complete delivery to local consumers and/or peer nodes (the general path)."""
        core = self.core
        kind, target, rd = core.route_mesh(p, a, presettled, came_from, ann)
        if self.obs is not None and p.credit == 0:
            self.obs.event("credit_starved_start", p.handle, a.key if a is not None else None, p.conn.peer)
        if not kind:
            self._unroutable(d, p, presettled, key, len(data))
            return
        try:
            if kind == TO_MANY:
                payload = self.payloads(key, data, layout, ann)
                for c in target:
                    payload(c)                  # any decoding error happens before a copy is sent
            else:
                out = self.rewritten(target.peer is not None, key, data, layout, ann)
        except MalformedError:
            self._reject(d, p, presettled, UNREADABLE, counted=True)
            return
        if kind == TO_MANY:
            self._multicast(d, p, target, data, len(data), presettled, payload, key, ann)
            return
        c = target
        if kind == HOLD:
            core.hold(c, Held(out, d, p, presettled, None, key, ann, rd))
            return
        n = len(out)
        od = self.send_whole(c, out, n)
        mode = core.sent(p, c, d, od, presettled, rd, n,
                         -1 if self.obs is None else self.obs.route_of(key, p, c, ann, rd))
        if mode:
            self._settled_on_the_way(mode, d, od, p, key, c, ann, rd, n)

    # ---- deliveries that go nowhere ------------------------------------------------------------------------
    def _reject(self, d: object, p: Producer, presettled: bool, rejection: Rejection,
                counted: bool = False) -> None:
        if not counted and self.obs is not None and p.credit == 1:
            self.obs.event("credit_starved_start", p.handle, p.address.key if p.address else None,
                           p.conn.peer)
        if not presettled:
            rejection.apply(d)
        pn_delivery_settle(d)
        self.core.refused(p, presettled, counted)
        self.dirty.add(p.conn)

    def _unroutable(self, d: object, p: Producer, presettled: bool, key: str | None, size: int) -> None:
        """RELEASE (or drop, if pre-settled) a delivery routed by `key` that has nowhere to go; its
        record carries `key` (the link's address, or the message's `to` on the anonymous relay)."""
        if self.obs is not None:
            self.obs.ended(key, p, presettled, size)
        settle_pair(d, 0 if presettled else RELEASED, NULL)
        self.core.unroutable(p, presettled)
        self.dirty.add(p.conn)

    # ---- multicast -----------------------------------------------------------------------------------------
    def _multicast(self, d: object, p: Producer, consumers: list[Consumer], buf: object, n: int,
                   presettled: bool, payload=None, key: str | None = None,
                   ann: RouterAnnotations | None = None) -> None:
        """One copy per consumer; `payload(consumer)` gives per-consumer bytes (mesh), else `buf`."""
        core = self.core
        g = None if presettled else core.new_group(d, p)
        if self.obs is not None:
            self.obs.multicast(key, p, ann, consumers, g, n)
        handed_over = 0                     # unsettled copies sent settled to at-most-once consumers
        data, size = buf, n
        for c in consumers:
            if payload is not None:
                data = payload(c)
                size = len(data)
            if c.busy:
                core.hold(c, Held(data if payload is not None else ffi.buffer(buf, n)[:], d, p, presettled, g,
                                  key, ann, copy=presettled))
                continue
            od = self.send_whole(c, data, size)
            mode = core.sent_copy(g, c, od)
            if mode:
                pn_delivery_settle(od)
                if mode == HANDED_OVER:
                    handed_over += 1
        if presettled:
            pn_delivery_settle(d)
            core.sent_presettled(p, consumers)          # held copies too: counted once, here
        for _ in range(handed_over):
            self.copy_settled(g, None, ACCEPTED, ACCEPT)

    def copy_settled(self, g: McastGroup, od: object, outcome: int, made: object) -> None:
        """One multicast copy is terminal (`od` settled by its consumer, or `made` by the node); settle
        upstream when the core says it was the last one."""
        flags = self.core.copy_settled(g, outcome)
        if flags & BEST:
            g.detail = made if made is not None else OutcomeSnapshot(od, outcome)
        if flags & DONE:
            p = g.producer
            stream = self.stream_ins.get(g.in_dlv) if self.stream_ins else None
            if stream is not None and stream.producer is p:
                stream.final = g.detail          # answered when the transfer completes
                stream.group = None
            elif p.alive:
                g.detail.apply(g.in_dlv)
                pn_delivery_settle(g.in_dlv)
                self.core.count_outcome(g.outcome, p)
                self.dirty.add(p.conn)
            if self.obs is not None:
                self.obs.group_settled(g, g.outcome)
            self.core.group_done(g)
            g.detail = None

    # ---- outcomes ----------------------------------------------------------------------------------------
    def on_outcome(self, od: object, c: Consumer) -> None:
        """The consumer updated or settled one of our outbound deliveries."""
        outcome = take_outcome(od)       # ACCEPTED when it settled without one, 0 when nothing to do yet
        if outcome:
            self.on_settled(od, outcome, c)

    def on_settled(self, od: object, outcome: int, c: Consumer | None = None) -> None:
        """Outbound delivery `od` got a terminal `outcome` (or was settled: ACCEPTED). `c` is its
        consumer, or None when the event loop saw it first (hotpath.SETTLED), before anyone looked at the
        link: the core's in-flight entry says whose it is, or else the link does (a control link's)."""
        outs = self.stream_outs
        stream = outs.pop(od, None) if outs else None
        e = self.core.settle(od, outcome, stream is None)
        if e is None:
            if stream is not None:
                outs[od] = stream
            if c is None:                        # not the core's: whose is it?
                link = pn_delivery_link(od)
                rec = self.links.get(link)
                if rec is None:
                    return
                if rec.__class__ is RouterLink:
                    self.engine.mesh_links.on_delivery(od, link, rec)
                    return
            pn_delivery_settle(od)
            return
        if c is None:
            c = e.consumer
        if stream is not None:                   # decided before the whole message was sent to it
            self.streams.copy_decided(stream, e, c, od, outcome)
            return
        g = e.group
        if g is not None:
            self.copy_settled(g, od, outcome, None)
        else:
            p = e.producer
            if p.alive:
                if outcome == ACCEPTED:             # nothing more to copy: the common case, inlined
                    settle_pair(e.in_dlv, ACCEPTED, od)
                    self.dirty.add(p.conn)
                    if self.obs is not None:
                        self.obs.settled(e, outcome)
                    self.dirty.add(c.conn)
                    return
                copy_outcome(od, e.in_dlv, outcome)
                pn_delivery_settle(e.in_dlv)
                self.dirty.add(p.conn)
            if self.obs is not None:
                self.obs.settled(e, outcome)
        pn_delivery_settle(od)
        self.dirty.add(c.conn)

    def fail(self, e: InFlight, outcome: int) -> None:
        """An in-flight delivery's consumer is gone: the core chose RELEASED or MODIFIED(failed)."""
        g = e.group
        if g is not None:
            self.copy_settled(g, None, outcome, NodeOutcome(outcome))
            return
        p = e.producer
        if p.alive:
            NodeOutcome(outcome).apply(e.in_dlv)
            pn_delivery_settle(e.in_dlv)
            self.core.count_outcome(outcome, p)
            self.dirty.add(p.conn)
        if self.obs is not None:
            self.obs.settled(e, outcome)

    # ---- deliveries held behind a stream -----------------------------------------------------------------
    def flush_held(self, c: Consumer) -> None:
        """Send what waited for the stream that just finished on `c`."""
        held = self.core.take_held(c)
        if not held:
            return
        core = self.core
        obs = self.obs
        for item in held:
            data = item.payload
            n = len(data)
            od = self.send_whole(c, data, n)
            p, d, g = item.producer, item.in_dlv, item.group
            if item.copy:                           # a pre-settled multicast copy, counted already
                pn_delivery_settle(od)
                continue
            if g is not None:
                core.unhold(item)
                if core.sent_copy(g, c, od) == HANDED_OVER:
                    pn_delivery_settle(od)
                    self.copy_settled(g, None, ACCEPTED, ACCEPT)
                continue
            if not p.alive and not item.presettled and not c.presettle:
                pn_delivery_settle(od)              # nobody to answer: the copy goes settled
                continue
            mode = core.sent(p, c, d, od, item.presettled, item.dest, n,
                             -1 if obs is None else obs.route_of(item.key, p, c, item.ann, item.dest))
            if mode == TRACKED:
                continue
            pn_delivery_settle(od)
            if mode == HANDED_OVER:
                if not p.alive:
                    continue
                self._hand_over(d, p)
            if obs is not None:
                obs.held_sent_settled(item, c, mode)
        self.dirty.add(c.conn)

    def release_held(self, item: Held, c: Consumer) -> None:
        """A delivery held for `c` will never go out (`c` is gone): RELEASED upstream (or dropped)."""
        p, g = item.producer, item.group
        if self.obs is not None and g is None and (item.presettled or p.alive):
            self.obs.held_released(item, c)
        if item.presettled:
            return
        if g is not None:
            self.copy_settled(g, None, RELEASED, NodeOutcome(RELEASED))
        elif p.alive:
            pn_delivery_update(item.in_dlv, RELEASED)
            pn_delivery_settle(item.in_dlv)
            self.core.count_outcome(RELEASED, p)
            self.dirty.add(p.conn)


UNAUTHORIZED = b"amqp:unauthorized-access"
BAD_SECTIONS = "malformed message: "     # the description of a rejection for sections out of order
UNREADABLE = Rejection(b"amqp:decode-error", b"unreadable message or router annotations")
NO_PROPERTIES = Rejection(b"amqp:decode-error", b"cannot read the message properties")
