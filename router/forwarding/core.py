"""The forwarding core of one node: routing decisions, credit ledger, settlement tracker.

Sans-IO, like router.linkstate: plain Python, no Proton, no clock (`tick(now)` gives the time of each
batch of events). What drives it, and what it answers:

==========================================  ====================================================
event (the adapter calls)                   decision (returned, or taken later)
==========================================  ====================================================
`attach_consumer` / `attach_producer`       the link's record, or a `Refusal` (authorization: `policy`)
`consumer_credit` / `consumer_flow`         whether to answer a drain now; credit for producers
`route` / `route_mesh` / `route_stream`      a consumer, or ``(kind, target, dest)``: decisions.py
`sent` / `sent_copy` / `sent_presettled`    the send mode (one table for every path)
`settle` (a consumer settled a delivery)    its `InFlight` entry (whose outcome goes upstream)
`copy_settled` (a multicast copy ended)     BEST / DONE flags for the group
`detach_consumer`                           each delivery it leaves: RELEASED or MODIFIED
`set_routes` (the mesh view changed)        credit for producers of addresses now reachable
`update_remote_addresses` (holders changed)  the same, for the changed mobile addresses only
`take_credit_actions` (once per pump)       ``(producer, amount)`` grants and producers to drain
`take_local_address_changes`                mobile addresses gained / lost, for the control plane
`take_watched_changes`                      watched addresses whose consumers changed
==========================================  ====================================================

The core is built in layers of one concern each: the address table and the mesh view
(router.forwarding.table), the settlement tracker (router.forwarding.settlement: in-flight entries, held
deliveries, multicast groups, the counters), and this module (the events of links and deliveries and their
decisions); it uses the credit ledger (router.forwarding.credit) and the choice of destinations
(router.forwarding.distribution); decisions.py lists the decisions and records.py the records. Link and
delivery handles are opaque objects owned by the adapter; the core only keys tables by them. The one thing
it asks the adapter is `backlog(handle)` (deliveries on a consumer's link not yet on the wire), and only for
a consumer with many unsettled deliveries (router.forwarding.distribution).

Authorization at attach is the core's `policy` (router.policy.engine.Policy): the reserved-address rules
with or without a configured policy, a group's rules with one; an attach to a `$management` address is
given the address of the agent for the connection's management level (router.policy.reserved).

Counters (per address: ingress / egress / transit; per link: delivered, pre-settled, outcomes; per node:
pre-settled, dropped, unroutable, hop-limit, delayed) are kept where the decisions are made (here and in
settlement.py), as plain integer increments; management reads them.

The hot path (route / sent / settle of a single-frame delivery between two clients) is written for speed:
slotted records, no allocation beyond the in-flight entry and the routing tuple.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator

from router.addressing import AddressRules, address_key
from router.amqp.annotations import RouterAnnotations, trace_nodes
from router.defaults import LINK_CAPACITY
from router.forwarding.credit import CreditLedger
from router.forwarding.decisions import (
    HOLD,
    NOWHERE,
    TO_MANY,
    TO_ONE,
    Refusal,
    Routing,
)
from router.forwarding.distribution import Backlog, fanout, mesh_fanout, pick, pick_mesh
from router.forwarding.records import (
    ACCEPTED,
    MODIFIED,
    REJECTED,
    RELEASED,
    TERMINAL,
    Address,
    Consumer,
    Held,
    InFlight,
    McastGroup,
    Producer,
    RemoteDest,
)
from router.forwarding.settlement import NEW_ENTRY, Settlement
from router.policy.access import Access
from router.policy.engine import Policy

UNAUTHORIZED = "amqp:unauthorized-access"   # the condition of every refusal by policy

__all__ = ["ACCEPTED", "MODIFIED", "REJECTED", "RELEASED", "TERMINAL", "Address", "Consumer", "Held",
           "InFlight", "McastGroup", "Producer", "RemoteDest", "RouterCore"]


class RouterCore(Settlement):
    """The events of one node's links and deliveries, and the decisions they lead to."""

    def __init__(self, node_id: str, rules: AddressRules, capacity: int = LINK_CAPACITY,
                 rng: random.Random | None = None, backlog: Backlog | None = None,
                 backlog_limit: int = 32, policy: Policy | None = None) -> None:
        super().__init__(node_id, rules, CreditLedger(capacity), rng)
        self.client_consumers: set[Consumer] = set()    # consumers of table addresses (not peers' links)
        self.ledger.producers = self.producers       # the memory budget shares credit among them
        self.capacity = capacity
        # backlog(consumer.handle) -> deliveries handed to that link but not yet on the wire; a consumer
        # with a backlog over the limit is skipped while another consumer can take the delivery
        self.backlog = backlog or (lambda handle: 0)
        self.backlog_limit = backlog_limit
        # authorization at attach (router.policy): the reserved-address rules always, a policy's if any
        self.policy = policy if policy is not None else Policy()
        self.policy.clock = lambda: self.now

    # ---- attach -------------------------------------------------------------------------------------------
    def attach_consumer(self, handle: object, conn: object, source: str | None, dynamic: bool = False,
                        at_most_once: bool = False, access: Access | None = None) -> Consumer | Refusal:
        """A receiver attached (we send to it). `source` is None when it is not valid UTF-8; a dynamic
        source gets a fresh node-scoped address (the consumer's `name`). `access` is the connection's
        grant (router.policy; None: a client without a policy): reserved addresses (rules 1 and 2) and
        the group's `sources`, `allow_dynamic_source` and `max_receivers` are checked here."""
        if dynamic:
            problem = self.policy.receive(access, None, True)
            if problem is not None:
                return Refusal(UNAUTHORIZED, problem)
            source = self.new_dynamic_address()
        elif source is None:
            return Refusal("amqp:invalid-field", "the source address is not valid UTF-8")
        else:
            key = address_key(source, self.node_id)
            if not key:                                     # also "/", "amqp:/": no address at all
                return Refusal("amqp:invalid-field", "a receiving link needs a source address")
            problem = self.policy.receive(access, key)
            if problem is not None:
                return Refusal(UNAUTHORIZED, problem)
        c = self.add_consumer(handle, conn, source)
        c.presettle = at_most_once
        return c

    def attach_producer(self, handle: object, conn: object, target: str | None,
                        dynamic: bool = False, access: Access | None = None) -> Producer | Refusal:
        """A sender attached: to `target`, or the anonymous relay when it is empty. `access` as for
        `attach_consumer`: a management agent's address is routed to the agent's address for the
        connection's management level (router.policy.reserved), other `$` services are refused, the
        group's `targets`, `allow_anonymous_sender` and `max_senders` are checked."""
        if dynamic:
            return Refusal("amqp:not-implemented", "dynamic targets are not supported")
        if target is None:
            return Refusal("amqp:invalid-field", "the target address is not valid UTF-8")
        routed, problem = self.policy.send(access, address_key(target, self.node_id) if target else None)
        if problem is not None:
            return Refusal(UNAUTHORIZED, problem)
        p = self.add_producer(handle, conn, routed or target or None)
        p.name = target
        return p

    def add_consumer(self, handle: object, conn: object, source: str) -> Consumer:
        a = self._address(source)
        c = Consumer(handle, conn, a, source)
        a.consumers.append(c)
        self.client_consumers.add(c)
        key = a.key
        if key in self._watched:
            self._watch_changed.add(key)
        if len(a.consumers) == 1 and not key.startswith("_topo/"):
            self.local_changes.append((key, True))
        return c

    def add_producer(self, handle: object, conn: object, target: str | None) -> Producer:
        """Register a producer; its first credit comes from `take_credit_actions`."""
        a = self._address(target) if target else None
        p = Producer(handle, conn, a, target or "")
        if a is not None:
            a.producers.append(p)
        self._grant.add(p)
        self.producers.add(p)
        return p

    def add_router_consumer(self, handle: object, conn: object, peer: str) -> Consumer:
        """The data-out link to peer node `peer`: a destination for every address routed through it."""
        c = Consumer(handle, conn, Address("_router/" + peer, "closest"), "_router/" + peer)
        c.address.consumers.append(c)       # a private address, never in the table
        c.peer = peer
        return c

    def add_router_producer(self, handle: object, conn: object, peer: str) -> Producer:
        """The data-in link from peer node `peer`: routed per message, credit replenished on forwarding."""
        p = Producer(handle, conn, None, "_router/" + peer)
        p.router = True
        p.peer = peer
        self._grant.add(p)
        self.producers.add(p)
        return p

    # ---- flow ---------------------------------------------------------------------------------------------
    def consumer_credit(self, c: Consumer, credit: int) -> None:
        """The consumer's available credit changed (it sent FLOW, or we sent on it)."""
        before = c.credit > 0
        c.credit = credit
        if (credit > 0) != before:
            self.ledger.update_ready(c.address)

    def consumer_flow(self, c: Consumer, credit: int, drain: bool) -> bool:
        """A consumer's FLOW. True: answer its drain now (nothing waits for it here: credit goes to 0)."""
        answer = drain and credit > 0
        self.consumer_credit(c, 0 if answer else credit)
        return answer

    def producer_credit(self, p: Producer, credit: int) -> None:
        """Resynchronise a producer's outstanding credit (after its FLOW, e.g. answering a drain).

        A FLOW may move delivery-count far ahead (Proton then reports credit far below zero): bounded, so
        that the top-up computed later still fits a FLOW.
        """
        p.credit = max(credit, -self.capacity)
        if credit <= 0:
            p.draining = False

    # ---- detach -------------------------------------------------------------------------------------------
    def detach_consumer(self, c: Consumer, queued: int) -> list[tuple[object, InFlight, int]]:
        """Forget a consumer. Returns each delivery it leaves unsettled, `(out_dlv, entry, outcome)`:
        RELEASED for those never on the wire (the last `queued` handed to its link), else MODIFIED
        (delivery-failed: the consumer may have seen it). Held deliveries are in `take_held`."""
        first_unsent = c.delivered - queued + 1     # sequence numbers >= this never reached the wire
        return [(od, e, RELEASED if e.seq >= first_unsent else MODIFIED)
                for od, e in self.remove_consumer(c)]

    def remove_consumer(self, c: Consumer) -> list[tuple[object, InFlight]]:
        """Forget a consumer; returns its in-flight entries `(out_dlv, entry)`."""
        c.alive = False
        self.client_consumers.discard(c)
        a = c.address
        if c in a.consumers:
            a.consumers.remove(c)
            if a.key in self._watched:
                self._watch_changed.add(a.key)
        left = [(od, e) for od, e in self.in_flight.items() if e.consumer is c]
        for od, e in left:
            del self.in_flight[od]
            if e.group is None:
                p = e.producer
                p.in_flight -= 1
                self._grant.add(p)
            if e.dest is not None:
                e.dest.unsettled -= 1
        c.unsettled = 0
        if c.peer is not None:
            return left
        self.ledger.update_ready(a)
        if not a.consumers and not a.key.startswith("_topo/"):
            self.local_changes.append((a.key, False))
        self.ledger.lost_destinations(a)
        self._forget_if_unused(a)
        return left

    def remove_producer(self, p: Producer) -> None:
        """Forget a producer. Its deliveries still at consumers settle there; upstream is gone."""
        p.alive = False
        self.ledger.forget(p)
        if p in self.producers:
            self.producers.discard(p)
            r = self.retired_outcomes
            for i, n in enumerate(p.outcomes):
                r[i] += n
        a = p.address
        if a is not None:
            if p in a.producers:
                a.producers.remove(p)
            self._forget_if_unused(a)

    def _produced_keys(self) -> list[str]:
        """Keys of the addresses with local producers: O(producers), not a scan of the table."""
        return list(dict.fromkeys(p.address.key for p in self.producers if p.address is not None))

    # ---- routing ------------------------------------------------------------------------------------------
    def route(self, p: Producer, a: Address | None, presettled: bool) -> Consumer | Routing:
        """Where a complete delivery from client producer `p` for `a` (None: no such address) goes: the
        consumer to send it to now (the common decision, returned as is), or a `Routing` for anything
        else (decisions.py). It used one of `p`'s credits; it is counted (ingress / egress / transit)
        when it has somewhere to go. An address served by other nodes is routed by `route_mesh`."""
        p.last = a          # where an anonymous producer's deliveries go (router.forwarding.budget)
        if a is not None and a.remote:
            return self.route_mesh(p, a, presettled)
        p.credit -= 1
        if a is None:
            return NOWHERE
        if a.multicast:
            targets = fanout(a, presettled, self.backlog, self.capacity) if a.consumers else []
            return self._to_many(a, p, targets, False)
        consumers = a.consumers
        c = consumers[0] if len(consumers) == 1 else pick(a, self.backlog, self.backlog_limit)
        if c is None:
            return NOWHERE
        a.ingress += 1
        a.egress += 1
        return (HOLD, c, None) if c.busy else c

    def route_mesh(self, p: Producer, a: Address | None, presettled: bool, came_from: str | None = None,
                   ann: RouterAnnotations | None = None, streaming: bool = False) -> Routing:
        """Where a delivery goes when its address is served by other nodes, or it came from peer node
        `came_from` (with router annotations `ann`; that data-in link's window is replenished as it is
        forwarded). `streaming`: a multi-frame delivery (see `route_stream`)."""
        if not streaming:
            p.credit -= 1
        if came_from is not None:
            self._grant.add(p)
        if a is None:
            return NOWHERE
        if ann is not None and len(ann.trace) > self.hop_limit:
            self.counters["hop_limit"] += 1     # crossed more nodes than any shortest path has: a loop
            return NOWHERE
        if a.multicast:
            origin = ann.ingress[2:] if ann is not None and ann.ingress else None
            if origin is not None and (self.edge_nodes or origin not in self.nodes):
                origin = self.origin_node(origin)      # edge mode: an edge's is its interior's
            trace = trace_nodes(ann) if ann is not None else ()
            local = fanout(a, presettled, self.backlog, self.capacity) if a.consumers else []
            targets = mesh_fanout(a, local, self.node_id, origin, trace, came_from, self.valid_origins)
            return self._to_many(a, p, targets, streaming)
        c, rd = pick_mesh(a, came_from, self.backlog, self.backlog_limit)
        if c is None or (streaming and c.busy):
            return NOWHERE
        if p.router:
            if c.peer is None:
                a.egress += 1
            else:
                a.transit += 1
        else:
            a.ingress += 1
            if c.peer is None:
                a.egress += 1
        return (HOLD if c.busy else TO_ONE), c, rd

    def route_ingress(self, p: Producer, a: Address, presettled: bool) -> RemoteDest | Routing:
        """`route_mesh` for a complete delivery from client producer `p` to anycast address `a`, which
        other nodes serve: the usual case on an ingress hop (no local consumer, one remote destination
        whose next hop can take it now) is decided here and returned as that `RemoteDest` (send on its
        `out`), with the same choice, counters and cursor as `route_mesh`; the others by it."""
        remote = a.remote
        if len(remote) == 1 and not a.consumers:
            rd = remote[0]
            out = rd.out
            if out.alive:
                p.credit -= 1
                if a.distribution == "balanced":
                    a.rr = 1                    # what the balanced pick leaves after a choice of one
                a.ingress += 1
                return (HOLD, out, rd) if out.busy else rd
        return self.route_mesh(p, a, presettled)

    def forward_from_peer(self, p: Producer, key: str, hops: int, in_dlv: object) -> InFlight | None:
        """`route_from_peer` and `sent` in one, for the usual unsettled delivery from peer node `p.peer`
        (for routing key `key`, having crossed `hops` nodes): one local consumer that takes it now
        (egress), or the one remote destination's next hop (transit), neither busy nor at-most-once.
        Returns its in-flight entry, counted as `sent` counts it; the caller sends it on `e.consumer` and
        files it under the outbound delivery: `in_flight[od] = e` (the one step that needs the delivery
        the send makes). None for anything else, with nothing counted: the caller takes `route_from_peer`.
        Two calls cost ~1,300 instructions in all, 3% of a hop."""
        a = self.addresses.get(key)
        if a is None or hops > self.hop_limit or a.multicast:
            return None
        consumers = a.consumers
        if consumers:
            if len(consumers) != 1:
                return None
            c = consumers[0]
            if c.credit <= 0 or c.busy or c.presettle:
                return None
            rd = None
            a.egress += 1
        else:
            remote = a.remote
            if len(remote) != 1:
                return None
            rd = remote[0]
            c = rd.out
            if not c.alive or c.peer == p.peer or c.busy or c.presettle:
                return None
            a.transit += 1
            rd.unsettled += 1
        p.credit -= 1
        self._grant.add(p)
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
        e.size = -1                     # the observer's (none on this path)
        e.route = -1
        c.unsettled += 1
        p.in_flight += 1
        p.delivered += 1
        c.credit -= 1
        if c.credit == 0:
            self.ledger.update_ready(c.address)
        return e

    def forward_settled_from_peer(self, p: Producer, key: str, hops: int) -> Consumer | None:
        """`route_from_peer` and `sent` in one, for the usual pre-settled delivery from peer node
        `p.peer`: one local consumer with credit (egress), or the one remote destination's next hop
        (transit), not busy. Returns that consumer, with the delivery counted as `sent` counts a
        pre-settled one; the caller sends it there settled. None for anything else, with nothing
        counted: the caller takes `route_from_peer`."""
        a = self.addresses.get(key)
        if a is None or hops > self.hop_limit or a.multicast:
            return None
        consumers = a.consumers
        if consumers:
            if len(consumers) != 1:
                return None
            c = consumers[0]
            if c.credit <= 0 or c.busy:
                return None
            a.egress += 1
        else:
            remote = a.remote
            if len(remote) != 1:
                return None
            c = remote[0].out
            if not c.alive or c.peer == p.peer or c.busy:
                return None
            a.transit += 1
        p.credit -= 1
        p.delivered += 1
        p.presettled += 1
        self.counters["presettled"] += 1
        c.delivered += 1
        c.presettled += 1
        c.credit -= 1
        if c.credit == 0:
            self.ledger.update_ready(c.address)
        self._grant.add(p)
        return c

    def route_from_peer(self, p: Producer, key: str, hops: int
                        ) -> tuple[Consumer | None, RemoteDest | None] | None:
        """`resolve` and `route_mesh` for the common delivery from peer node `p.peer` (its data-in link):
        complete, for routing key `key`, having crossed `hops` nodes. Returns the consumer (a local one, or
        the data-out link toward remote destination `rd`) and `rd`; (None, None): nowhere (RELEASED or
        dropped); None for a multicast address, left to `route_mesh` (nothing was counted). The
        single-destination cases, the usual ones on a transit or egress hop, are decided here; the others
        by `pick_mesh`, as in `route_mesh`."""
        a = self.addresses.get(key)
        if a is not None and hops <= self.hop_limit and not a.multicast:     # the usual cases, first
            consumers = a.consumers
            if consumers:
                if len(consumers) == 1:
                    c = consumers[0]
                    if c.credit > 0 and not c.busy:
                        p.credit -= 1
                        self._grant.add(p)
                        a.egress += 1
                        return c, None
            else:
                remote = a.remote
                if len(remote) == 1:
                    rd = remote[0]
                    out = rd.out
                    if out.alive and out.peer != p.peer:
                        p.credit -= 1
                        self._grant.add(p)
                        a.transit += 1
                        return out, rd
        return self._route_from_peer(p, key, p.peer, hops)

    def _route_from_peer(self, p: Producer, key: str, came_from: str, hops: int
                         ) -> tuple[Consumer | None, RemoteDest | None] | None:
        """`route_from_peer`, every case."""
        a = self.addresses.get(key)
        if a is None:
            a = self.resolve(key)               # a node-scoped `_topo/0/<node>/...` route, or nothing
        elif not (a.consumers or a.remote):
            a = None
        if a is not None and a.multicast:
            return None
        p.credit -= 1
        self._grant.add(p)
        if a is None:
            return None, None
        if hops > self.hop_limit:
            self.counters["hop_limit"] += 1     # crossed more nodes than any shortest path has: a loop
            return None, None
        consumers = a.consumers
        if len(consumers) == 1:
            c = consumers[0]
            if c.credit > 0 and not c.busy:
                a.egress += 1
                return c, None
        elif not consumers:
            remote = a.remote
            if len(remote) == 1:
                rd = remote[0]
                out = rd.out
                if out.alive and out.peer != came_from:
                    a.transit += 1
                    return out, rd
        c, rd = pick_mesh(a, came_from, self.backlog, self.backlog_limit)
        if c is None:
            return None, None
        if c.peer is None:
            a.egress += 1
        else:
            a.transit += 1
        return c, rd

    def route_stream(self, p: Producer, a: Address | None, presettled: bool, came_from: str | None = None,
                     ann: RouterAnnotations | None = None) -> Routing:
        """Where a multi-frame delivery goes: only consumers not busy with another stream can take it (no
        HOLD); its credit was counted when it started (`arrived`)."""
        if a is not None and (a.remote or came_from is not None):
            return self.route_mesh(p, a, presettled, came_from, ann, streaming=True)
        if came_from is not None:
            self._grant.add(p)
        if a is None:
            return NOWHERE
        if a.multicast:
            targets = fanout(a, presettled, self.backlog, self.capacity) if a.consumers else []
            return self._to_many(a, p, targets, True)
        c = pick(a, self.backlog, self.backlog_limit)
        if c is None or c.busy:
            return NOWHERE
        a.ingress += 1
        a.egress += 1
        return TO_ONE, c, None

    def _to_many(self, a: Address, p: Producer, targets: list[Consumer], streaming: bool) -> Routing:
        if streaming:
            targets = [c for c in targets if not c.busy]
        if not targets:
            return NOWHERE
        local = sum(1 for c in targets if c.peer is None)
        a.egress += local
        if not p.router:
            a.ingress += 1
        elif local < len(targets):
            a.transit += 1
        return TO_MANY, targets, None

    # ---- credit -------------------------------------------------------------------------------------------
    def take_credit_actions(self) -> tuple[list[tuple[Producer, int]], list[Producer]]:
        """Credit to flow to producers `(producer, amount)` and producers to drain, since the last call."""
        return self.ledger.take()

    # ---- choices, for tests and callers that want one part of `route` -------------------------------------
    def pick(self, a: Address) -> Consumer | None:
        """One local consumer for an anycast delivery (router.forwarding.distribution.pick)."""
        return pick(a, self.backlog, self.backlog_limit)

    def pick_mesh(self, a: Address, came_from: str | None = None
                  ) -> tuple[Consumer | None, RemoteDest | None]:
        """A local or remote destination for an anycast delivery (distribution.pick_mesh)."""
        return pick_mesh(a, came_from, self.backlog, self.backlog_limit)

    def fanout(self, a: Address, presettled: bool) -> list[Consumer]:
        """Every local consumer of a multicast delivery (distribution.fanout)."""
        return fanout(a, presettled, self.backlog, self.capacity)

    def mesh_fanout(self, a: Address, presettled: bool, origin: str | None, trace: Iterable[str] = (),
                    came_from: str | None = None) -> list[Consumer]:
        """Local consumers plus one data-out link per next hop (distribution.mesh_fanout)."""
        local = self.fanout(a, presettled) if a.consumers else []
        return mesh_fanout(a, local, self.node_id, origin, trace, came_from, self.valid_origins)

    # ---- introspection ------------------------------------------------------------------------------------
    def iter_links(self) -> Iterator[Consumer | Producer]:
        for a in self.addresses.values():
            yield from a.consumers
            yield from a.producers

    def snapshot(self, hidden: Callable[[Consumer | Producer], bool] | None = None) -> dict:
        """Sizes of the internal tables and the counters (for the state log line): counts, never the tables
        themselves, so the line stays small whatever the number of addresses (the tables are read through
        management).

        Links for which `hidden(link)` is true are left out, and so are addresses only they use.
        """
        def shown(links: list) -> int:
            return len(links) if hidden is None else sum(1 for x in links if not hidden(x))

        # O(local links), not a walk of the table (5-13 ms of a busy node's CPU at 20,000 addresses, at every
        # SIGUSR1 or poll of the state line): most addresses have remote destinations only, counted as kept
        table = self.addresses
        addresses, remote = len(table), self.remote_count
        consumers = producers = 0
        local = {c.address for c in self.client_consumers}
        local.update(p.address for p in self.producers if p.address is not None)
        for a in local:
            if table.get(a.key) is not a:
                continue
            c, p = shown(a.consumers), shown(a.producers)
            if c or p or a.remote:
                consumers += c
                producers += p
            else:
                addresses -= 1          # used by hidden links only
        return {
            "node": self.node_id,
            "addresses": addresses,
            "remote_addresses": remote,
            "consumers": consumers,
            "producers": producers,
            "in_flight": len(self.in_flight),
            "counters": {**self.counters, **self.outcome_totals()},
        }
