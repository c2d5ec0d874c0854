"""The forwarding core: address table, distribution choices, credit ledger and settlement tracker.

Plain Python, no Proton and no clock. The Proton adapter (router.node) tells the core what happened on
the wire (a link attached, a consumer granted credit, a delivery was forwarded or settled) and asks it
what to do (which consumer gets this delivery, how much credit each producer gets, which deliveries a
lost consumer leaves behind). Link and delivery handles are opaque objects owned by the adapter.

Credit model ("no queueing"): a producer link targeted at an address gets credit only while the address
is *ready* (at least one consumer with credit); then it is topped up to `capacity - in_flight`, where
in-flight counts its unsettled deliveries not yet settled end to end. So a producer never has more than
`capacity` deliveries in the node, and the node never settles on a consumer's behalf. When an address
loses its last consumer, its producers are drained. Anonymous producers get full capacity whatever
the destinations and are replenished the same way. Credit is topped up in batches (an eighth of the
window, or whatever is due once the producer is down to half its window), so a steady stream costs one
FLOW per batch, not one per message.

The hot path (route / sent / settle) is written for speed: slotted records, tuples in the in-flight
table, no allocations beyond one tuple per forwarded delivery.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from router.addressing import MULTICAST, AddressRules, address_key, dynamic_address

# Delivery outcome codes: the AMQP 1.0 descriptor codes (equal to Proton's PN_ACCEPTED etc.).
RECEIVED = 0x23
ACCEPTED = 0x24
REJECTED = 0x25
RELEASED = 0x26
MODIFIED = 0x27
TERMINAL = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))
# Multicast: the outcome reported upstream once every copy is terminal (highest rank wins).
OUTCOME_RANK = {RELEASED: 1, MODIFIED: 2, ACCEPTED: 3, REJECTED: 4}


class Address:
    """One routable address: its distribution and the local links using it."""

    __slots__ = ("key", "distribution", "multicast", "consumers", "producers", "rr", "ready")

    def __init__(self, key: str, distribution: str) -> None:
        self.key = key
        self.distribution = distribution
        self.multicast = distribution == MULTICAST
        self.consumers: list[Consumer] = []
        self.producers: list[Producer] = []
        self.rr = 0                # round-robin cursor for `closest` (and balanced ties)
        self.ready = False         # at least one consumer with credit

    def __repr__(self) -> str:
        return f"Address({self.key!r}, {self.distribution}, consumers={len(self.consumers)})"


class Consumer:
    """A link on which the node sends to a client receiver (our sender link)."""

    __slots__ = ("handle", "conn", "address", "credit", "unsettled", "delivered", "alive", "name", "busy",
                 "held", "presettle")

    def __init__(self, handle: object, conn: object, address: Address, name: str) -> None:
        self.handle = handle
        self.conn = conn
        self.address = address
        self.name = name
        self.credit = 0            # credit the receiver granted and we have not used
        self.unsettled = 0         # deliveries sent (or queued) to it, not yet settled by it
        self.delivered = 0         # deliveries handed to the link (its sequence number, pre-settled too)
        self.alive = True
        self.busy = False          # a multi-frame delivery is being streamed on it
        self.held: list | None = None  # deliveries waiting for the stream in progress (adapter-owned)
        self.presettle = False     # it asked for snd-settle-mode=settled: everything goes pre-settled


class Producer:
    """A link on which a client sends to the node (our receiver link)."""

    __slots__ = ("handle", "conn", "address", "credit", "in_flight", "draining", "delivered", "alive",
                 "name")

    def __init__(self, handle: object, conn: object, address: Address | None, name: str) -> None:
        self.handle = handle
        self.conn = conn
        self.address = address     # None: anonymous relay, routed per message `to`
        self.name = name
        self.credit = 0            # credit we granted that the producer has not used
        self.in_flight = 0         # its unsettled deliveries not yet settled end to end
        self.draining = False
        self.delivered = 0
        self.alive = True

    @property
    def anonymous(self) -> bool:
        return self.address is None


class McastGroup:
    """An unsettled multicast delivery: settles upstream when every copy is terminal."""

    __slots__ = ("in_dlv", "producer", "pending", "outcome", "detail")

    def __init__(self, in_dlv: object, producer: Producer) -> None:
        self.in_dlv = in_dlv
        self.producer = producer
        self.pending = 0
        self.outcome = 0           # best outcome so far (0 = none)
        self.detail: object = None  # adapter's snapshot of the best outcome's details


# In-flight entry: (in_dlv, producer, consumer, group-or-None, seq), keyed by the outbound delivery handle;
# seq is the consumer's `delivered` count when it was sent, so the adapter can tell sent from queued.
InFlight = tuple


class RouterCore:
    """Address table + forwarding decisions + credit ledger + settlement tracker for one node."""

    def __init__(self, node_id: str, rules: AddressRules, capacity: int = 250,
                 rng: random.Random | None = None,
                 backlog: Callable[[object], int] | None = None,
                 backlog_limit: int = 32) -> None:
        self.node_id = node_id
        self.rules = rules
        self.capacity = capacity
        self.rng = rng or random.Random()
        # backlog(consumer.handle) -> deliveries handed to that link but not yet on the wire (a closed
        # session window keeps them there); a consumer with a backlog over the limit is skipped while
        # another consumer can take the delivery.
        self.backlog = backlog or (lambda handle: 0)
        self.backlog_limit = backlog_limit
        # told (key, True) when a mobile address gets its first local consumer and (key, False) when
        # it loses its last one, so the mesh can advertise it; node-scoped addresses are not mobile
        self.on_local_address: Callable[[str, bool], None] | None = None
        self.addresses: dict[str, Address] = {}
        self.in_flight: dict[object, InFlight] = {}
        self._grant: set[Producer] = set()      # producers whose credit may need topping up
        self._drain: set[Producer] = set()      # producers to drain (address lost its consumers)
        self.counters = {"accepted": 0, "rejected": 0, "released": 0, "modified": 0,
                         "presettled": 0, "dropped_presettled": 0, "unroutable": 0, "delivered": 0}

    # ---- address table -------------------------------------------------------------------------------
    def lookup(self, name: str) -> Address | None:
        """The address for a message `to` (anonymous relay); None when nothing uses it here."""
        return self.addresses.get(address_key(name, self.node_id))

    def _address(self, name: str) -> Address:
        key = address_key(name, self.node_id)
        a = self.addresses.get(key)
        if a is None:
            a = self.addresses[key] = Address(key, self.rules.distribution(key))
        return a

    def _forget_if_unused(self, a: Address) -> None:
        if not a.consumers and not a.producers and self.addresses.get(a.key) is a:
            del self.addresses[a.key]

    def new_dynamic_address(self) -> str:
        """A fresh, unused node-scoped reply address."""
        while True:
            name = dynamic_address(self.node_id, self.rng)
            if address_key(name, self.node_id) not in self.addresses:
                return name

    # ---- links ---------------------------------------------------------------------------------------
    def add_consumer(self, handle: object, conn: object, source: str) -> Consumer:
        a = self._address(source)
        c = Consumer(handle, conn, a, source)
        a.consumers.append(c)
        if len(a.consumers) == 1 and self.on_local_address is not None and self._mobile(a.key):
            self.on_local_address(a.key, True)
        return c

    def _mobile(self, key: str) -> bool:
        return not key.startswith("_topo/")

    def add_producer(self, handle: object, conn: object, target: str | None) -> Producer:
        """Register a producer; its first credit comes from `take_credit_actions`."""
        a = self._address(target) if target else None
        p = Producer(handle, conn, a, target or "")
        if a is not None:
            a.producers.append(p)
        self._grant.add(p)
        return p

    def consumer_credit(self, c: Consumer, credit: int) -> None:
        """The consumer's available credit changed (it sent FLOW, or we sent on it)."""
        before = c.credit > 0
        c.credit = credit
        if (credit > 0) != before:
            self._update_ready(c.address)

    def producer_credit(self, p: Producer, credit: int) -> None:
        """Resynchronise a producer's outstanding credit (after it answered a drain)."""
        p.credit = credit
        if credit <= 0:
            p.draining = False

    def _update_ready(self, a: Address) -> None:
        ready = False
        for c in a.consumers:
            if c.credit > 0:
                ready = True
                break
        if ready != a.ready:
            a.ready = ready
            if ready:
                self._grant.update(a.producers)

    def remove_consumer(self, c: Consumer) -> list[tuple[object, InFlight]]:
        """Forget a consumer; returns its in-flight entries `(out_dlv, entry)` for the adapter to fail."""
        c.alive = False
        a = c.address
        if c in a.consumers:
            a.consumers.remove(c)
        left = [(od, e) for od, e in self.in_flight.items() if e[2] is c]
        for od, e in left:
            del self.in_flight[od]
            if e[3] is None:
                p = e[1]
                p.in_flight -= 1
                self._grant.add(p)
        c.unsettled = 0
        self._update_ready(a)
        if not a.consumers and self.on_local_address is not None and self._mobile(a.key):
            self.on_local_address(a.key, False)
        if not a.consumers:
            for p in a.producers:
                if p.credit > 0:
                    self._drain.add(p)
        self._forget_if_unused(a)
        return left

    def remove_producer(self, p: Producer) -> None:
        """Forget a producer. Its deliveries still at consumers settle there; upstream is gone."""
        p.alive = False
        self._grant.discard(p)
        self._drain.discard(p)
        a = p.address
        if a is not None:
            if p in a.producers:
                a.producers.remove(p)
            self._forget_if_unused(a)

    # ---- forwarding decisions -----------------------------------------------------------------------
    def pick(self, a: Address) -> Consumer | None:
        """One consumer for an anycast delivery (closest: round-robin; balanced: fewest unsettled)."""
        consumers = a.consumers
        n = len(consumers)
        if n == 1:
            return consumers[0]
        if n == 0:
            return None
        limit = self.backlog_limit
        if a.distribution == "balanced":
            # fewest unsettled wins; consumers without credit only when none has credit. A consumer
            # whose session window is closed keeps its deliveries unsettled, so it loses naturally.
            best = consumers[0]
            best_score = 1 << 62
            start = a.rr
            for k in range(n):
                c = consumers[(start + k) % n]
                score = c.unsettled if c.credit > 0 and not c.busy else c.unsettled + (1 << 40)
                if score < best_score:
                    best, best_score = c, score
                    if score == 0:
                        break
            a.rr = (start + 1) % n
            return best
        # closest: round-robin over consumers with credit whose session is not backed up
        start = a.rr
        for k in range(n):
            i = (start + k) % n
            c = consumers[i]
            if c.credit > 0 and not c.busy and (c.unsettled < limit or self.backlog(c.handle) <= limit):
                a.rr = (i + 1) % n
                return c
        a.rr = (start + 1) % n
        return consumers[start % n]

    def fanout(self, a: Address, presettled: bool) -> list[Consumer]:
        """Every consumer of a multicast address.

        A pre-settled copy for a consumer without credit waits on its link only while fewer than
        `capacity` deliveries wait there already; beyond that it is dropped (at-most-once), so a slow
        consumer never holds back the producer or the other consumers.
        """
        if not presettled:
            return list(a.consumers)
        cap = self.capacity
        return [c for c in a.consumers
                if not c.busy and (c.credit > 0 or self.backlog(c.handle) < cap)]

    # ---- bookkeeping of forwarded deliveries -----------------------------------------------------------
    def sent(self, p: Producer, c: Consumer, in_dlv: object, out_dlv: object) -> None:
        """An unsettled delivery from `p` went to `c` as `out_dlv`."""
        c.delivered += 1
        self.in_flight[out_dlv] = (in_dlv, p, c, None, c.delivered)
        c.unsettled += 1
        p.in_flight += 1
        p.delivered += 1
        c.credit -= 1
        if c.credit == 0:
            self._update_ready(c.address)

    def sent_presettled(self, p: Producer, consumers: list[Consumer] | tuple[Consumer, ...]) -> None:
        """A pre-settled delivery from `p` went to `consumers` (credit goes back to `p` at once)."""
        p.delivered += 1
        self.counters["presettled"] += 1
        if not consumers:
            self.counters["dropped_presettled"] += 1
        for c in consumers:
            c.delivered += 1
            c.credit -= 1
            if c.credit == 0:
                self._update_ready(c.address)
        self._grant.add(p)

    def new_group(self, in_dlv: object, p: Producer) -> McastGroup:
        p.in_flight += 1
        p.delivered += 1
        return McastGroup(in_dlv, p)

    def sent_copy(self, g: McastGroup, c: Consumer, out_dlv: object) -> None:
        """One copy of an unsettled multicast delivery went to `c`."""
        c.delivered += 1
        self.in_flight[out_dlv] = (g.in_dlv, g.producer, c, g, c.delivered)
        g.pending += 1
        c.unsettled += 1
        c.credit -= 1
        if c.credit == 0:
            self._update_ready(c.address)

    def unroutable(self, p: Producer, presettled: bool) -> None:
        """A delivery from `p` found no destination: the adapter releases (or drops) it."""
        if presettled:
            self.counters["presettled"] += 1
            self.counters["dropped_presettled"] += 1
        else:
            self.counters["unroutable"] += 1
            self.counters["released"] += 1
        self._grant.add(p)

    def settle(self, out_dlv: object) -> InFlight | None:
        """The consumer settled (or decided) `out_dlv`: pop its entry. None if not tracked."""
        e = self.in_flight.pop(out_dlv, None)
        if e is not None:
            e[2].unsettled -= 1
            if e[3] is None:
                p = e[1]
                p.in_flight -= 1
                self._grant.add(p)
        return e

    def copy_outcome(self, g: McastGroup, outcome: int) -> bool:
        """Record one multicast copy's terminal outcome; True if it is now the group's best outcome."""
        g.pending -= 1
        if OUTCOME_RANK.get(outcome, 0) > OUTCOME_RANK.get(g.outcome, 0):
            g.outcome = outcome
            return True
        return False

    def group_done(self, g: McastGroup) -> None:
        """All copies of `g` are terminal and the adapter settled it upstream."""
        p = g.producer
        p.in_flight -= 1
        self._grant.add(p)

    def count_outcome(self, outcome: int) -> None:
        """Count an outcome settled upstream (to the producer)."""
        name = _OUTCOME_NAMES.get(outcome)
        if name:
            self.counters[name] += 1

    # ---- credit ledger ---------------------------------------------------------------------------------
    def take_credit_actions(self) -> tuple[list[tuple[Producer, int]], list[Producer]]:
        """Credit to flow to producers `(producer, amount)` and producers to drain, since the last call."""
        grants: list[tuple[Producer, int]] = []
        if self._grant:
            cap = self.capacity
            low = cap // 2
            batch = max(1, cap // 8)
            for p in self._grant:
                if not p.alive:
                    continue
                a = p.address
                if a is not None and not a.ready:
                    continue
                give = cap - p.in_flight - p.credit
                if p.draining:
                    # a consumer is back: any FLOW (even of 0 credit) ends the drain we asked for
                    p.draining = False
                    give = max(give, 0)
                    p.credit += give
                    grants.append((p, give))
                    continue
                # top up in batches of an eighth of the window (or at once when the producer is
                # down to half): one FLOW per many messages, not one per settlement, while the
                # pipeline stays nearly full; never more than cap in flight
                if give >= batch or (give > 0 and p.credit <= low):
                    p.credit += give
                    grants.append((p, give))
            self._grant.clear()
        drains: list[Producer] = []
        if self._drain:
            for p in self._drain:
                a = p.address
                if p.alive and a is not None and not a.consumers and p.credit > 0:
                    p.draining = True
                    drains.append(p)
            self._drain.clear()
        return grants, drains

    # ---- introspection ---------------------------------------------------------------------------------
    def iter_links(self) -> Iterator[Consumer | Producer]:
        for a in self.addresses.values():
            yield from a.consumers
            yield from a.producers

    def snapshot(self) -> dict:
        """Sizes of the internal tables and the counters (for tests, logs and management)."""
        return {
            "node": self.node_id,
            "addresses": {a.key: {"distribution": a.distribution, "consumers": len(a.consumers),
                                  "producers": len(a.producers), "ready": a.ready}
                          for a in self.addresses.values()},
            "in_flight": len(self.in_flight),
            "counters": dict(self.counters),
        }


_OUTCOME_NAMES = {ACCEPTED: "accepted", REJECTED: "rejected", RELEASED: "released", MODIFIED: "modified"}
