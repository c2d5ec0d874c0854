"""Transfers from peer nodes and toward the mesh: router annotations read, rewritten and forwarded.

A mixin of router.adapter.deliveries.Deliveries: a peer's message is read from the table of sections seen
before (router.amqp.peersections) and forwarded from the read buffer; anything else is decoded here.
"""

from __future__ import annotations

from router.adapter.hotpath import NOT_READABLE, send_stream, set_stream, settle_pair, take_peer
from router.adapter.outcomes import UNREADABLE, oversize
from router.addressing import address_key
from router.amqp.annotations import (
    AnnotationLayout,
    RouterAnnotations,
    RouterView,
    annotate_ingress,
    router_view,
    with_hop,
)
from router.amqp.codec import MalformedError
from router.amqp.peersections import insertion_point
from router.forwarding.decisions import HOLD, TO_MANY
from router.forwarding.records import Address, Consumer, Held, Producer


class MeshDeliveries:
    """Transfers from peer nodes and toward the mesh: router annotations read, rewritten and forwarded."""

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
