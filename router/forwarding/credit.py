"""The credit ledger: how much credit each producer gets, and which producers to drain.

Credit model ("no queueing"): a producer link targeted at an address gets credit only while the address
is *ready* (a local consumer with credit, or a reachable remote destination); then it is topped up to
`capacity - in_flight`, where in-flight counts its deliveries not yet settled end to end. So a producer
never has more than `capacity` deliveries in the node, and the node never settles on a consumer's behalf.
When an address loses its last consumer (local and remote), its producers are drained. Anonymous producers
get full capacity whatever the destinations. A peer's data-in link is replenished as its deliveries are
forwarded, not settled, so one slow consumer never starves the link every address shares.

Credit is topped up in batches (an eighth of the window, or whatever is due once the producer is down to
half its window), so a steady stream costs one FLOW per batch, not one per message. A client producer with
nothing left in flight gets what is due at once, however little: its pipeline is empty, so a batch would
never fill, and many clients (Proton's proactor examples, the C load generator) send their next messages
only when a FLOW wakes them. Without it a rate-limited stream's second message waited for the client's own
timer (100 ms with the load generator; issue 21). The price: sequential RPC calls leave their producers
idle after each call, so each call costs a FLOW per producer, as with qdrouterd (+4.5% instructions per
call through one node; streams keep their batches).

The core marks producers (`grant`, `drain`); `take` turns the marks into decisions once per pump.

With a node-wide memory budget (router.forwarding.budget, `budget`), a producer the budget holds gets no
credit until the budget releases it, and the window shrinks while the node buffers half its budget.
"""

from __future__ import annotations

from router.forwarding.budget import MemoryBudget
from router.forwarding.records import Address, Producer


class CreditLedger:
    """Producers whose credit may need topping up or draining, and the rule that decides how much."""

    def __init__(self, capacity: int, producers: set[Producer] | None = None) -> None:
        self.capacity = capacity
        self.producers = producers if producers is not None else set()   # every producer link (the core's)
        self.grant: set[Producer] = set()       # producers whose credit may need topping up
        self.drain: set[Producer] = set()       # producers to drain (address lost its consumers)
        self.budget: MemoryBudget | None = None  # the node's memory budget, if any

    def update_ready(self, a: Address) -> None:
        """Recompute whether `a` can take deliveries; producers of an address that became ready get credit."""
        ready = bool(a.remote)
        if not ready:
            for c in a.consumers:
                if c.credit > 0:
                    ready = True
                    break
        if ready != a.ready:
            a.ready = ready
            if ready:
                self.grant.update(a.producers)

    def lost_destinations(self, a: Address) -> None:
        """`a` may have lost its last consumer: drain its producers that still hold credit."""
        if not a.consumers and not a.remote:
            for p in a.producers:
                if p.credit > 0:
                    self.drain.add(p)

    def forget(self, p: Producer) -> None:
        self.grant.discard(p)
        self.drain.discard(p)
        if self.budget is not None:
            self.budget.drop(p)

    def take(self) -> tuple[list[tuple[Producer, int]], list[Producer]]:
        """Credit to flow to producers `(producer, amount)` and producers to drain, since the last call."""
        grants: list[tuple[Producer, int]] = []
        budget = self.budget
        capacity = cap = self.capacity
        if budget is not None:
            released = budget.take_released()
            if released:
                self.grant.update(released)
            budget.start_round(len(self.producers))
        if self.grant:
            low = cap // 2
            batch = max(1, cap // 8)
            for p in self.grant:
                if not p.alive:
                    continue
                a = p.address
                if a is not None and not a.ready:
                    continue
                if budget is not None:
                    if budget.holds(p):
                        continue
                    cap = budget.window(capacity, p)
                    low = cap // 2
                    batch = max(1, cap // 8)
                give = cap - p.credit if p.router else cap - p.in_flight - p.credit
                if p.draining:
                    # a consumer is back: any FLOW (even of 0 credit) ends the drain we asked for
                    p.draining = False
                    give = max(give, 0)
                    p.credit += give
                    grants.append((p, give))
                    continue
                if give >= batch or (give > 0 and (p.credit <= low or (p.in_flight == 0 and not p.router))):
                    p.credit += give
                    grants.append((p, give))
            self.grant.clear()
        drains: list[Producer] = []
        if self.drain:
            for p in self.drain:
                a = p.address
                if p.alive and a is not None and not a.consumers and not a.remote and p.credit > 0:
                    p.draining = True
                    drains.append(p)
            self.drain.clear()
        return grants, drains
