"""The settlement tracker: which outbound delivery carries which inbound one, until the consumer decides.

Part of the forwarding core (router.forwarding.core.RouterCore builds on it; it builds on the address
table). Each unsettled delivery sent to a consumer has an in-flight entry (records.InFlight) keyed by its
outbound delivery handle; `settle` pops it when the consumer decides, `copy_settled` folds a multicast
copy's outcome into its group. Sending settled (pre-settled, or handed over to an at-most-once consumer)
follows one table, decisions.SEND_MODES. The per-link and per-node counters of deliveries and outcomes
are kept here, where each is decided.

Entries are reused: allocating one slotted object per delivery cost about 2,000 instructions (4% of a
one-node hop). The entry `settle` returns stays valid for its caller until the next `settle`.
"""

from __future__ import annotations

import random

from router.addressing import AddressRules
from router.forwarding.credit import CreditLedger
from router.forwarding.decisions import BEST, DONE, SEND_MODES, TRACKED
from router.forwarding.records import (
    ACCEPTED,
    OUTCOME_NAMES,
    OUTCOME_RANK,
    STUCK_AFTER,
    Consumer,
    Held,
    InFlight,
    McastGroup,
    Producer,
    RemoteDest,
)
from router.forwarding.table import AddressTable

SPARE_ENTRIES = 4096        # settled in-flight entries kept for reuse
NEW_ENTRY = object.__new__  # an InFlight whose fields `sent` sets itself


class Settlement(AddressTable):
    """In-flight deliveries, held deliveries, multicast groups and the counters of what was settled."""

    def __init__(self, node_id: str, rules: AddressRules, ledger: CreditLedger,
                 rng: random.Random | None = None) -> None:
        super().__init__(node_id, rules, ledger, rng)
        self.in_flight: dict[object, InFlight] = {}
        self._spare: list[InFlight] = []        # settled entries, reused by `sent` (see `settle`)
        self._settled: InFlight | None = None   # the entry `settle` returned last (its caller's)
        self._grant = ledger.grant              # the hot path marks producers here directly
        self.counters = {"presettled": 0, "dropped_presettled": 0, "unroutable": 0, "hop_limit": 0,
                         "delayed_1s": 0, "delayed_10s": 0}
        self.now = 0.0                  # `tick(now)` once per batch of events: in-flight stamps
        self._delayed_before = -1.0     # entries sent before this are settled late (> 1 s)
        # outcomes settled to producers: counted per producer; these are the detached producers' totals
        self.producers: set[Producer] = set()
        self.retired_outcomes = [0, 0, 0, 0]

    # ---- time ---------------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """The time (monotonic seconds) of the batch of events about to be handled."""
        self.now = now
        self._delayed_before = now - 1.0
        if len(self._spare) > SPARE_ENTRIES:
            del self._spare[SPARE_ENTRIES:]

    # ---- the deliveries: sent, held, refused --------------------------------------------------------------
    def arrived(self, p: Producer) -> None:
        """A transfer used one of `p`'s credits (`route` counts this itself, except for streams)."""
        p.credit -= 1

    def refused(self, p: Producer, presettled: bool, counted: bool = False) -> None:
        """A delivery from `p` is REJECTED here (unreadable, too big...); `counted`: it went through
        `route` already."""
        if not counted:
            p.credit -= 1
        if not presettled:
            p.outcomes[1] += 1
        self._grant.add(p)

    def sent(self, p: Producer, c: Consumer, in_dlv: object, out_dlv: object, presettled: bool,
             rd: RemoteDest | None = None, size: int = -1, route: int = -1) -> int:
        """A delivery from `p` went to `c` as `out_dlv` (toward remote destination `rd`). Returns its send
        mode (decisions.SEND_MODES); a TRACKED one is in flight until `settle`. `size` and `route` are
        kept in the entry for the observer."""
        if presettled or c.presettle:
            mode = SEND_MODES[presettled][c.presettle]
            self.sent_presettled(p, (c,))
            return mode
        # TRACKED (SEND_MODES[False][False]): `track`, inlined, since this is the hot path
        c.delivered += 1
        spare = self._spare
        e = spare.pop() if spare else NEW_ENTRY(InFlight)
        e.in_dlv = in_dlv
        e.producer = p
        e.consumer = c
        e.group = None
        e.seq = c.delivered
        e.dest = rd
        e.sent_at = self.now
        e.size = size
        e.route = route
        self.in_flight[out_dlv] = e
        if rd is not None:
            rd.unsettled += 1
        c.unsettled += 1
        p.in_flight += 1
        p.delivered += 1
        c.credit -= 1
        if c.credit == 0:
            self.ledger.update_ready(c.address)
        return TRACKED

    def track(self, p: Producer, c: Consumer, in_dlv: object, out_dlv: object, rd: RemoteDest | None = None,
              size: int = -1, route: int = -1) -> None:
        """An unsettled delivery from `p` is on its way to `c` as `out_dlv`: in flight until `settle` (a
        streamed one is, whatever the consumer's settle mode, until its last frame is sent)."""
        c.delivered += 1
        self.in_flight[out_dlv] = InFlight(in_dlv, p, c, None, c.delivered, rd, self.now, size, route)
        if rd is not None:
            rd.unsettled += 1
        c.unsettled += 1
        p.in_flight += 1
        p.delivered += 1
        c.credit -= 1
        if c.credit == 0:
            self.ledger.update_ready(c.address)

    def sent_presettled(self, p: Producer, consumers: list[Consumer] | tuple[Consumer, ...]) -> None:
        """A delivery from `p` went settled to `consumers` (credit goes back to `p` at once)."""
        p.delivered += 1
        p.presettled += 1
        self.counters["presettled"] += 1
        if not consumers:
            self.counters["dropped_presettled"] += 1
            p.dropped += 1
        for c in consumers:
            c.delivered += 1
            c.presettled += 1
            c.credit -= 1
            if c.credit == 0:
                self.ledger.update_ready(c.address)
        self._grant.add(p)

    def new_group(self, in_dlv: object, p: Producer) -> McastGroup:
        """An unsettled multicast delivery from `p`: its copies are counted in the group."""
        p.in_flight += 1
        p.delivered += 1
        return McastGroup(in_dlv, p)

    def sent_copy(self, g: McastGroup | None, c: Consumer, out_dlv: object) -> int:
        """One copy of a multicast delivery (group `g`; None: pre-settled) went to `c`. Returns its send
        mode; HANDED_OVER copies count in the group and end ACCEPTED (the adapter reports them)."""
        mode = SEND_MODES[g is None][c.presettle]
        if not mode:
            self.track_copy(g, c, out_dlv)
        elif g is not None:
            g.pending += 1
            self.sent_presettled(g.producer, (c,))
        return mode

    def track_copy(self, g: McastGroup, c: Consumer, out_dlv: object) -> None:
        """One copy of unsettled multicast delivery `g` is on its way to `c`: in flight until `settle`."""
        c.delivered += 1
        self.in_flight[out_dlv] = InFlight(g.in_dlv, g.producer, c, g, c.delivered, None, self.now, -1, -1)
        g.pending += 1
        c.unsettled += 1
        c.credit -= 1
        if c.credit == 0:
            self.ledger.update_ready(c.address)

    def hold(self, c: Consumer, item: Held) -> None:
        """Keep `item` for `c` until the message being streamed to it is complete."""
        if c.held is None:
            c.held = []
        if item.group is not None:
            item.group.pending += 1
        c.held.append(item)

    def take_held(self, c: Consumer) -> list[Held]:
        """What waited for `c`'s stream, in order; a multicast copy leaves its group's count to the caller
        (`sent_copy` counts it again, `unhold` drops it)."""
        held, c.held = c.held, None
        return held or []

    def unhold(self, item: Held) -> None:
        """A held multicast copy is about to be sent or settled: it no longer counts as held."""
        if item.group is not None:
            item.group.pending -= 1

    def unroutable(self, p: Producer, presettled: bool) -> None:
        """A delivery from `p` found no destination: RELEASED (pre-settled: dropped)."""
        if presettled:
            p.presettled += 1
            p.dropped += 1
            self.counters["presettled"] += 1
            self.counters["dropped_presettled"] += 1
        else:
            p.outcomes[2] += 1
            self.counters["unroutable"] += 1
        self._grant.add(p)

    def credit_back(self, p: Producer) -> None:
        """A delivery from `p` was dealt with here (rejected, aborted, answered later): replenish `p`."""
        self._grant.add(p)

    # ---- settlement ---------------------------------------------------------------------------------------
    def settle(self, out_dlv: object, outcome: int = 0, upstream: bool = False) -> InFlight | None:
        """The consumer settled (or decided) `out_dlv` with terminal `outcome` (0: none, not counted).

        Returns its in-flight entry (None if the delivery is not tracked): a unicast delivery's outcome
        goes to its producer if it is still there (`upstream`: the caller settles it now, so it is counted
        here), a multicast copy's to `copy_settled`."""
        e = self.in_flight.pop(out_dlv, None)
        if e is not None:
            # entries are reused (allocating one per delivery costs more than the rest of `sent`): this
            # one stays valid for the caller until the next `settle`, the previous one is free now
            last = self._settled
            if last is not None:
                self._spare.append(last)
            self._settled = e
            if e.sent_at < self._delayed_before:
                self._late(e)
            c = e.consumer
            c.unsettled -= 1
            if outcome:
                c.outcomes[outcome - ACCEPTED] += 1
            if e.dest is not None:
                e.dest.unsettled -= 1
            if e.group is None:
                p = e.producer
                p.in_flight -= 1
                self._grant.add(p)
                if upstream and p.alive:
                    p.outcomes[outcome - ACCEPTED] += 1
        return e

    def copy_settled(self, g: McastGroup, outcome: int) -> int:
        """One multicast copy's terminal outcome: BEST if it is now the group's best (keep its details),
        DONE if it was the last one (settle upstream with the best outcome, then `group_done`)."""
        g.pending -= 1
        flags = 0
        if OUTCOME_RANK.get(outcome, 0) > OUTCOME_RANK.get(g.outcome, 0):
            g.outcome = outcome
            flags = BEST
        if g.pending == 0:
            flags |= DONE
        return flags

    def group_done(self, g: McastGroup) -> None:
        """All copies of `g` are terminal and the adapter settled it upstream."""
        p = g.producer
        p.in_flight -= 1
        self._grant.add(p)

    def _late(self, e: InFlight) -> None:
        """`e` is settled more than 1 s after it was sent: count it for the node, its consumer and (unicast)
        its producer."""
        over10 = e.sent_at < self.now - 10.0
        self.counters["delayed_1s"] += 1
        self.counters["delayed_10s"] += over10
        links = (e.consumer,) if e.group is not None else (e.consumer, e.producer)
        for link in links:
            link.delays[0] += 1
            link.delays[1] += over10

    def count_outcome(self, outcome: int, p: Producer) -> None:
        """Count an outcome settled upstream (to producer `p`)."""
        if outcome in OUTCOME_NAMES:
            p.outcomes[outcome - ACCEPTED] += 1

    def outcome_totals(self) -> dict[str, int]:
        """Outcomes settled to producers since the start: accepted, rejected, released, modified."""
        totals = list(self.retired_outcomes)
        for p in self.producers:
            for i, n in enumerate(p.outcomes):
                totals[i] += n
        return dict(zip(("accepted", "rejected", "released", "modified"), totals, strict=True))

    # ---- introspection ----------------------------------------------------------------------------------
    def stuck(self, after: float = STUCK_AFTER) -> int:
        """Deliveries in flight for more than `after` seconds (as of `now`)."""
        limit = self.now - after
        return sum(1 for e in self.in_flight.values() if e.sent_at < limit)

