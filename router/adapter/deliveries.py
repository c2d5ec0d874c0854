"""Complete transfers and their outcomes: read a delivery, ask the core where it goes, send it, settle it.

Hot path (a complete single-frame transfer between two clients of this node): read it into one reusable
buffer (a complete transfer of at most WHOLE_LIMIT, 64 KiB; a larger one from a client or on a peer's
streaming link is streamed, router.adapter.streams, so that Proton never holds more than that of it),
ask the core (`route` -> TO_ONE and a consumer), send the same bytes on a new outbound delivery,
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

The class is split by concern into mixins: router.adapter.anonymous (the anonymous relay's `to`),
router.adapter.meshdeliveries (transfers from peers and toward the mesh) and router.adapter.settlement
(outcomes, multicast groups, held deliveries).
"""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import (
    pn_delivery,
    pn_delivery_pending,
    pn_delivery_settle,
    pn_delivery_settled,
    pn_link_advance,
)

from router.adapter import hotpath
from router.adapter.anonymous import AnonymousRelay
from router.adapter.hotpath import (
    ABORTED,
    EMPTY,
    NOT_READABLE,
    NULL,
    PARTIAL,
    send,
    send_inserted,
    set_buffer,
    settle_pair,
    take,
)
from router.adapter.meshdeliveries import MeshDeliveries
from router.adapter.outcomes import ACCEPT, BAD_SECTIONS, Rejection, oversize
from router.adapter.routerlinks import RouterLink
from router.adapter.settlement import Settlement
from router.adapter.streamlinks import WHOLE_ON_DATA_LINK
from router.adapter.streams import WHOLE_LIMIT
from router.amqp import annotations
from router.amqp.annotations import RouterAnnotations, strip
from router.amqp.codec import MalformedError
from router.amqp.peersections import IngressSections, PeerSections
from router.amqp.sections import SectionShapes
from router.forwarding.decisions import HANDED_OVER, HOLD, PRESETTLED, TO_MANY, TO_ONE
from router.forwarding.records import ACCEPTED, RELEASED, Address, Consumer, Held, Producer, RemoteDest


class Deliveries(AnonymousRelay, MeshDeliveries, Settlement):
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
        self._unused_keys_of_to: dict[bytes, str] = {}   # those before the last `forget_unused`
        self._bufsize = 64 * 1024
        self.buf = ffi.new("char[]", self._bufsize)
        self.view = memoryview(ffi.buffer(self.buf))    # the same bytes, indexed as ints
        self.reader = hotpath.reader(self.buf, min(self._bufsize, WHOLE_LIMIT))   # reads into it, follows
        # a peer stream; it takes a transfer of at most WHOLE_LIMIT bytes (a larger one: `_not_taken`)
        self.stream: tuple | None = None     # that stream: its section and growth (`_follow`)
        self.in_flight = self.core.in_flight     # the core's table (see RouterCore.forward_from_peer)
        self._tagnum = hotpath.TAG_COUNTER    # delivery tags: hotpath.send draws from the same counter
        self._tag = hotpath.TAG

    def forget_unused(self) -> None:
        """Forget the memos by routing key not used since the last call (the node calls it every
        ``node.forget_after`` seconds): annotations sections from peers and for clients, anonymous-relay
        `to` keys, the codec's encodings. A caller's reply address is such a key: without this, every
        caller that came and went left about 1.5 KB here until a table reached its bound (4,096)."""
        self.peer_sections.forget_unused()
        self.ingress_sections.forget_unused()
        self.forget_unused_to_keys()
        annotations.forget_unused()

    def memo_sizes(self) -> dict[str, int]:
        """Entries in those memos (the state line's `memos`)."""
        return {"peer_sections": len(self.peer_sections), "ingress_sections": self.ingress_sections.size(),
                "to_keys": len(self._keys_of_to) + len(self._unused_keys_of_to), **annotations.memo_sizes()}

    def buffer(self, n: int) -> object:
        """The reusable read buffer, at least `n` bytes long."""
        if n > self._bufsize:
            self._bufsize = max(n, self._bufsize * 2)
            self.buf = ffi.new("char[]", self._bufsize)
            self.view = memoryview(ffi.buffer(self.buf))
            set_buffer(self.reader, self.buf, min(self._bufsize, WHOLE_LIMIT))   # `take` stops there
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
        else:                                   # TOO_LARGE: over WHOLE_LIMIT (or the read buffer)
            n = pn_delivery_pending(d)
            if n > p.conn.max_message_size:
                pn_link_advance(link)
                self._reject(d, p, pn_delivery_settled(d), oversize(p.conn.max_message_size))
                return
            if not p.router or p.streaming:     # streamed, as if it had come in pieces (module doc)
                self.streams.start(d, link, p)
                return
            self.buffer(n)                      # a peer's data link: read whole, the reader let take it
            set_buffer(self.reader, self.buf, self._bufsize)
            try:
                self.on_delivery(d, link)
            finally:
                set_buffer(self.reader, self.buf, min(self._bufsize, WHOLE_LIMIT))

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








