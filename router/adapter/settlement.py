"""Outcomes of what was sent, multicast groups settled, and deliveries held behind a stream.

A mixin of router.adapter.deliveries.Deliveries: a consumer's outcome goes back to its producer; a
multicast group settles upstream on its last copy; held deliveries are sent or released.
"""

from __future__ import annotations

from cproton_ffi.lib import pn_delivery_link, pn_delivery_settle, pn_delivery_update

from router.adapter.hotpath import outcome as take_outcome
from router.adapter.hotpath import settle_pair
from router.adapter.outcomes import ACCEPT, NodeOutcome, OutcomeSnapshot, copy_outcome
from router.adapter.routerlinks import RouterLink
from router.forwarding.decisions import BEST, DONE, HANDED_OVER, TRACKED
from router.forwarding.records import ACCEPTED, RELEASED, Consumer, Held, InFlight, McastGroup


class Settlement:
    """Outcomes of what was sent, multicast groups settled, and deliveries held behind a stream."""

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
