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
from collections.abc import Callable, Iterable, Iterator, Mapping

from router.addressing import MULTICAST, AddressRules, address_key, dynamic_address, topo_prefix
from router.defaults import LINK_CAPACITY

TOPO = "_topo/0/"

# Delivery outcome codes: the AMQP 1.0 descriptor codes (equal to Proton's PN_ACCEPTED etc.).
RECEIVED = 0x23
ACCEPTED = 0x24
REJECTED = 0x25
RELEASED = 0x26
MODIFIED = 0x27
TERMINAL = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))
# Multicast: the outcome reported upstream once every copy is terminal (highest rank wins).
OUTCOME_RANK = {RELEASED: 1, MODIFIED: 2, ACCEPTED: 3, REJECTED: 4}
STUCK_AFTER = 10.0    # seconds in flight after which a delivery counts as stuck


class RemoteDest:
    """A node elsewhere in the mesh that has consumers for an address, and how to reach it."""

    __slots__ = ("node", "cost", "out", "unsettled")

    def __init__(self, node: str, cost: int, out: Consumer) -> None:
        self.node = node
        self.cost = cost           # path cost from this node
        self.out = out             # the data-out link of the next hop toward it
        self.unsettled = 0         # deliveries of this address sent toward it, not yet settled

    def __repr__(self) -> str:
        return f"RemoteDest({self.node!r}, cost={self.cost}, unsettled={self.unsettled})"


class Address:
    """One routable address: its distribution, the local links using it and its remote destinations."""

    __slots__ = ("key", "distribution", "multicast", "consumers", "producers", "rr", "ready", "remote",
                 "links", "ingress", "egress", "transit")

    def __init__(self, key: str, distribution: str) -> None:
        self.key = key
        self.distribution = distribution
        self.multicast = distribution == MULTICAST
        self.consumers: list[Consumer] = []
        self.producers: list[Producer] = []
        self.rr = 0                # round-robin cursor for `closest` (and balanced ties)
        self.ready = False         # a local consumer with credit, or a reachable remote destination
        # other nodes with consumers, cheapest first (empty on a single node: the fast path)
        self.remote: list[RemoteDest] = []
        # multicast: (next-hop data-out link, nodes behind it that have the address)
        self.links: list[tuple[Consumer, frozenset[str]]] = []
        # deliveries counted by the adapter: from local producers, to local consumers, peer to peer
        self.ingress = 0
        self.egress = 0
        self.transit = 0

    def __repr__(self) -> str:
        return f"Address({self.key!r}, {self.distribution}, consumers={len(self.consumers)})"


class Consumer:
    """A link on which the node sends to a client receiver (our sender link)."""

    __slots__ = ("handle", "conn", "address", "credit", "unsettled", "delivered", "alive", "name", "busy",
                 "held", "presettle", "peer", "outcomes", "presettled", "zero_credit")

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
        self.peer: str | None = None  # set on the data-out link to a peer node: its node id
        self.outcomes = [0, 0, 0, 0]  # terminal outcomes it returned: accepted, rejected, released, modified
        self.presettled = 0           # deliveries sent to it pre-settled
        self.zero_credit = 0.0        # seconds seen with no credit (sampled by management)


class Producer:
    """A link on which a client sends to the node (our receiver link)."""

    __slots__ = ("handle", "conn", "address", "credit", "in_flight", "draining", "delivered", "alive",
                 "name", "router", "outcomes", "presettled", "zero_credit")

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
        self.router = False        # the data-in link from a peer node (routed by x-opt-qd.to)
        self.outcomes = [0, 0, 0, 0]  # outcomes settled back to it: accepted, rejected, released, modified
        self.presettled = 0           # pre-settled deliveries it sent
        self.zero_credit = 0.0        # seconds seen with no credit from us (sampled by management)

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


# In-flight entry: (in_dlv, producer, consumer, group-or-None, seq, remote-dest-or-None, sent-at, size,
# route), keyed by the outbound delivery handle; seq is the consumer's `delivered` count when it was sent,
# so the adapter can tell sent from queued; the remote destination (anycast toward another node) has its
# count decremented; sent-at is the core's `now` (the time stamp of the batch the delivery arrived in);
# size and route are the adapter's telemetry's: the message's size (-1: telemetry keeps it elsewhere, or
# is off) and its route id (-1: the consumer's local route).
InFlight = tuple


class RouterCore:
    """Address table + forwarding decisions + credit ledger + settlement tracker for one node."""

    def __init__(self, node_id: str, rules: AddressRules, capacity: int = LINK_CAPACITY,
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
        self.counters = {"presettled": 0, "dropped_presettled": 0, "unroutable": 0, "hop_limit": 0,
                         "delayed_1s": 0, "delayed_10s": 0}
        # `tick(now)` once per batch of events: the time stamp of in-flight entries
        self.now = 0.0
        self._delayed_before = -1.0     # entries sent before this are settled late (> 1 s)
        # ingress / egress / transit of addresses no longer in the table (node totals add them)
        self.retired = [0, 0, 0]
        # outcomes settled to producers: counted per producer; these are the detached producers' totals
        self.producers: set[Producer] = set()
        self.retired_outcomes = [0, 0, 0, 0]
        # the mesh (set by `set_routes`): reachable node -> (path cost, next-hop data-out link), the
        # mesh radius (hop limit) and, for multicast, node -> origins whose tree passes through us
        self.nodes: dict[str, tuple[int, Consumer]] = {}
        self.radius = 0
        self._valid_origins: Callable[[], Mapping[str, frozenset[str]]] = dict
        self._origins_cache: Mapping[str, frozenset[str]] | None = None
        self._node_addresses: dict[str, Address] = {}   # node -> its `_topo/0/<node>/` route
        self._topo = topo_prefix(node_id)
        # addresses whose consumers someone watches (key -> watchers), and those changed since
        # `take_watched_changes` was last called
        self._watched: dict[str, int] = {}
        self._watch_changed: set[str] = set()

    # ---- address table -------------------------------------------------------------------------------
    def lookup(self, name: str) -> Address | None:
        """The address for a message `to` (anonymous relay); None when nothing uses it here."""
        return self.lookup_key(address_key(name, self.node_id))

    def lookup_key(self, key: str) -> Address | None:
        """The address for a routing key; `_topo/0/<other>/...` resolves to that node's route."""
        a = self.addresses.get(key)
        if a is None and key.startswith(TOPO) and not key.startswith(self._topo):
            return self._node_addresses.get(key[8:key.find("/", 8)])
        return a

    def _address(self, name: str) -> Address:
        key = address_key(name, self.node_id)
        a = self.addresses.get(key)
        if a is None:
            a = self.addresses[key] = Address(key, self.rules.distribution(key))
            node = self._scoped_node(key)
            if node is not None:
                a.remote = self._node_route(node)
                a.ready = bool(a.remote)
        return a

    def _scoped_node(self, key: str) -> str | None:
        """The other node a `_topo/0/<node>/...` key names (None: not node-scoped, or scoped to us)."""
        if key.startswith(TOPO) and not key.startswith(self._topo):
            end = key.find("/", 8)
            return key[8:end] if end > 8 else None
        return None

    def _node_route(self, node: str) -> list[RemoteDest]:
        route = self.nodes.get(node)
        return [RemoteDest(node, route[0], route[1])] if route is not None else []

    def tick(self, now: float) -> None:
        """The time (seconds) of the batch of events about to be handled."""
        self.now = now
        self._delayed_before = now - 1.0

    def _forget_if_unused(self, a: Address) -> None:
        if not a.consumers and not a.producers and not a.remote and self.addresses.get(a.key) is a:
            del self.addresses[a.key]
            self._retire(a)

    def _retire(self, a: Address) -> None:
        r = self.retired
        r[0] += a.ingress
        r[1] += a.egress
        r[2] += a.transit

    def new_dynamic_address(self) -> str:
        """A fresh, unused node-scoped reply address."""
        while True:
            name = dynamic_address(self.node_id, self.rng)
            if address_key(name, self.node_id) not in self.addresses:
                return name

    # ---- watched addresses -------------------------------------------------------------------------------
    def watch(self, key: str) -> None:
        """Report changes of the consumers (local or remote) of routing key `key` from now on."""
        self._watched[key] = self._watched.get(key, 0) + 1

    def unwatch(self, key: str) -> None:
        n = self._watched.get(key, 0) - 1
        if n > 0:
            self._watched[key] = n
        else:
            self._watched.pop(key, None)
            self._watch_changed.discard(key)

    def take_watched_changes(self) -> set[str]:
        """Watched keys whose local consumers or remote destinations changed since the last call."""
        changed, self._watch_changed = self._watch_changed, set()
        return changed

    def consumers_of(self, key: str, exclude_conn: object = None) -> int:
        """Local consumers of `key` not on connection `exclude_conn`, plus its remote destinations."""
        a = self.addresses.get(key)
        if a is None:
            return 0
        return sum(1 for c in a.consumers if c.conn is not exclude_conn) + len(a.remote)

    # ---- links ---------------------------------------------------------------------------------------
    def add_consumer(self, handle: object, conn: object, source: str) -> Consumer:
        a = self._address(source)
        c = Consumer(handle, conn, a, source)
        a.consumers.append(c)
        if a.key in self._watched:
            self._watch_changed.add(a.key)
        if len(a.consumers) == 1 and self.on_local_address is not None and self._mobile(a.key):
            self.on_local_address(a.key, True)
        return c

    def _mobile(self, key: str) -> bool:
        return not key.startswith("_topo/")

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
        self._grant.add(p)
        self.producers.add(p)
        return p

    def add_producer(self, handle: object, conn: object, target: str | None) -> Producer:
        """Register a producer; its first credit comes from `take_credit_actions`."""
        a = self._address(target) if target else None
        p = Producer(handle, conn, a, target or "")
        if a is not None:
            a.producers.append(p)
        self._grant.add(p)
        self.producers.add(p)
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
        ready = bool(a.remote)
        if not ready:
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
            if a.key in self._watched:
                self._watch_changed.add(a.key)
        left = [(od, e) for od, e in self.in_flight.items() if e[2] is c]
        for od, e in left:
            del self.in_flight[od]
            if e[3] is None:
                p = e[1]
                p.in_flight -= 1
                self._grant.add(p)
        for _od, e in left:
            if e[5] is not None:
                e[5].unsettled -= 1
        c.unsettled = 0
        if c.peer is not None:
            return left
        self._update_ready(a)
        if not a.consumers and self.on_local_address is not None and self._mobile(a.key):
            self.on_local_address(a.key, False)
        if not a.consumers and not a.remote:
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

    # ---- the mesh ------------------------------------------------------------------------------------------
    def set_routes(self, nodes: Mapping[str, tuple[int, Consumer]], holders: Mapping[str, Iterable[str]],
                   radius: int, valid_origins: Callable[[], Mapping[str, frozenset[str]]]) -> None:
        """Take a new view of the mesh (after the control plane changed it).

        `nodes`: each reachable node -> (path cost, data-out link of the next hop toward it);
        `holders`: each mobile address -> the other nodes that have consumers for it (reachable or not);
        `valid_origins` computes, when multicast needs it, node -> origins whose shortest-path tree
        reaches it through this node. Addresses gain or lose remote destinations; producers of an
        address that becomes ready get credit, those of one left with no destination are drained.
        """
        self.nodes = dict(nodes)
        self.radius = radius
        self._valid_origins = valid_origins
        self._origins_cache = None
        for old in self._node_addresses.values():
            self._retire(old)
        self._node_addresses = {}
        for node, (cost, out) in self.nodes.items():
            a = self._node_addresses[node] = Address(self._topo_of(node), "closest")
            a.remote = [RemoteDest(node, cost, out)]
            a.ready = True
        wanted: dict[str, list[str]] = {}
        for key, where in holders.items():
            reachable = [n for n in where if n in self.nodes]
            if reachable:
                wanted[key] = reachable
        for key in wanted:
            if key not in self.addresses:
                self.addresses[key] = Address(key, self.rules.distribution(key))
        for a in list(self.addresses.values()):
            node = self._scoped_node(a.key)
            if node is not None:
                self._set_remote(a, [node] if node in self.nodes else [])
            elif a.remote or a.key in wanted:
                self._set_remote(a, wanted.get(a.key, []))

    def _topo_of(self, node: str) -> str:
        return TOPO + node + "/"

    def _set_remote(self, a: Address, nodes: list[str]) -> None:
        old = {d.node: d for d in a.remote}
        remote = []
        for node in nodes:
            cost, out = self.nodes[node]
            d = old.get(node)
            if d is None:
                d = RemoteDest(node, cost, out)
            else:
                d.cost, d.out = cost, out
            remote.append(d)
        remote.sort(key=lambda d: (d.cost, d.node))
        if a.key in self._watched and [d.node for d in remote] != [d.node for d in a.remote]:
            self._watch_changed.add(a.key)
        a.remote = remote
        by_link: dict[Consumer, set[str]] = {}
        for d in remote:
            by_link.setdefault(d.out, set()).add(d.node)
        a.links = [(out, frozenset(behind)) for out, behind in by_link.items()]
        self._update_ready(a)
        if not a.remote:
            if not a.consumers:
                for p in a.producers:
                    if p.credit > 0:
                        self._drain.add(p)
            self._forget_if_unused(a)

    def pick_mesh(self, a: Address, came_from: str | None = None
                  ) -> tuple[Consumer | None, RemoteDest | None]:
        """A destination for an anycast delivery when `a` has remote destinations.

        Returns (consumer, None) for a local consumer and (next-hop data-out link, destination) for a
        remote one. A delivery that came from peer `came_from` is delivered here if a local consumer
        has credit (the upstream node chose this one) and is never sent back to that peer.
        """
        if a.distribution == "balanced" and came_from is None:
            return self._pick_balanced(a)
        consumers = a.consumers
        if consumers:
            c = self.pick(a)
            if c is not None and c.credit > 0 and not c.busy:
                return c, None
        best: RemoteDest | None = None
        ties: list[RemoteDest] = []
        for d in a.remote:
            if not d.out.alive or d.out.peer == came_from:
                continue
            if best is None:
                best = d
            elif d.cost != best.cost:
                break
            ties.append(d)
        if len(ties) > 1:
            best = ties[a.rr % len(ties)]
            a.rr += 1
        if best is not None:
            return best.out, best
        if consumers:
            return self.pick(a), None
        return None, None

    def _pick_balanced(self, a: Address) -> tuple[Consumer | None, RemoteDest | None]:
        """Fewest outstanding deliveries wins, remote ones weighted by path cost once they have any.

        The start rotates, so equal scores (sequential calls: every score 0) take turns and no
        destination with credit starves; slower or farther ones collect deliveries and get less.
        """
        consumers = a.consumers
        remote = a.remote
        nl = len(consumers)
        n = nl + len(remote)
        start = a.rr % n
        a.rr = start + 1
        best_c: Consumer | None = None
        best_d: RemoteDest | None = None
        best_score = 1 << 62
        for k in range(n):
            i = (start + k) % n
            if i < nl:
                c = consumers[i]
                score = c.unsettled if c.credit > 0 and not c.busy else c.unsettled + (1 << 40)
                if score < best_score:
                    best_c, best_d, best_score = c, None, score
            else:
                d = remote[i - nl]
                out = d.out
                if not out.alive:
                    continue
                score = d.unsettled + d.cost if d.unsettled else 0
                if out.busy:
                    score += 1 << 40
                if score < best_score:
                    best_c, best_d, best_score = out, d, score
            if best_score == 0:
                break
        return best_c, best_d

    def mesh_fanout(self, a: Address, presettled: bool, origin: str | None, trace: Iterable[str] = (),
                    came_from: str | None = None) -> list[Consumer]:
        """Every destination of a multicast delivery: local consumers plus one data-out link per next hop.

        A link is used only toward nodes whose shortest-path tree from the delivery's `origin` (None:
        this node) passes through here, and never toward a peer in the delivery's trace or the peer it
        came from, so in meshes with redundant paths each consumer gets exactly one copy.
        """
        out = self.fanout(a, presettled) if a.consumers else []
        if a.links:
            seen = set(trace)
            if came_from is not None:
                seen.add(came_from)
            origins = None
            for link, behind in a.links:
                if not link.alive or link.peer in seen:
                    continue
                if origin is not None and origin != self.node_id:
                    if origins is None:
                        origins = self.valid_origins()
                    if not any(origin in origins.get(n, ()) for n in behind):
                        continue
                out.append(link)
        return out

    def valid_origins(self) -> Mapping[str, frozenset[str]]:
        """Node -> origins whose tree reaches it through this node (computed once per route change)."""
        if self._origins_cache is None:
            self._origins_cache = self._valid_origins()
        return self._origins_cache

    def route_hops_ok(self, hops: int) -> bool:
        """False when a delivery has crossed more nodes than any shortest path has (a loop): drop it."""
        if hops > self.radius + 1:
            self.counters["hop_limit"] += 1
            return False
        return True

    def forwarded(self, p: Producer) -> None:
        """A delivery from a peer's data-in link was passed on: its window may be replenished."""
        self._grant.add(p)

    # ---- bookkeeping of forwarded deliveries -----------------------------------------------------------
    def sent(self, p: Producer, c: Consumer, in_dlv: object, out_dlv: object,
             rd: RemoteDest | None = None, size: int = -1, route: int = -1) -> None:
        """An unsettled delivery from `p` went to `c` as `out_dlv` (toward remote destination `rd`);
        `size` and `route` are kept in the entry for the adapter (see InFlight)."""
        c.delivered += 1
        self.in_flight[out_dlv] = (in_dlv, p, c, None, c.delivered, rd, self.now, size, route)
        if rd is not None:
            rd.unsettled += 1
        c.unsettled += 1
        p.in_flight += 1
        p.delivered += 1
        c.credit -= 1
        if c.credit == 0:
            self._update_ready(c.address)

    def sent_presettled(self, p: Producer, consumers: list[Consumer] | tuple[Consumer, ...]) -> None:
        """A pre-settled delivery from `p` went to `consumers` (credit goes back to `p` at once)."""
        p.delivered += 1
        p.presettled += 1
        self.counters["presettled"] += 1
        if not consumers:
            self.counters["dropped_presettled"] += 1
        for c in consumers:
            c.delivered += 1
            c.presettled += 1
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
        self.in_flight[out_dlv] = (g.in_dlv, g.producer, c, g, c.delivered, None, self.now, -1, -1)
        g.pending += 1
        c.unsettled += 1
        c.credit -= 1
        if c.credit == 0:
            self._update_ready(c.address)

    def unroutable(self, p: Producer, presettled: bool) -> None:
        """A delivery from `p` found no destination: the adapter releases (or drops) it."""
        if presettled:
            p.presettled += 1
            self.counters["presettled"] += 1
            self.counters["dropped_presettled"] += 1
        else:
            p.outcomes[2] += 1
            self.counters["unroutable"] += 1
        self._grant.add(p)

    def credit_back(self, p: Producer) -> None:
        """A delivery from `p` was dealt with here (rejected, aborted, answered later): replenish `p`."""
        self._grant.add(p)

    def settle(self, out_dlv: object) -> InFlight | None:
        """The consumer settled (or decided) `out_dlv`: pop its entry. None if not tracked."""
        e = self.in_flight.pop(out_dlv, None)
        if e is not None:
            if e[6] < self._delayed_before:
                self._late(e[6])
            e[2].unsettled -= 1
            if e[5] is not None:
                e[5].unsettled -= 1
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

    def _late(self, sent_at: float) -> None:
        self.counters["delayed_1s"] += 1
        if sent_at < self.now - 10.0:
            self.counters["delayed_10s"] += 1

    def count_outcome(self, outcome: int, p: Producer) -> None:
        """Count an outcome settled upstream (to producer `p`); the adapter's hot path inlines it."""
        if outcome in _OUTCOME_NAMES:
            p.outcomes[outcome - ACCEPTED] += 1

    def outcome_totals(self) -> dict[str, int]:
        """Outcomes settled to producers since the start: accepted, rejected, released, modified."""
        totals = list(self.retired_outcomes)
        for p in self.producers:
            for i, n in enumerate(p.outcomes):
                totals[i] += n
        return dict(zip(("accepted", "rejected", "released", "modified"), totals, strict=True))

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
                # a peer's data-in link: its window is replenished as deliveries are forwarded (not
                # settled), so one slow consumer never starves the link every address shares
                give = cap - p.credit if p.router else cap - p.in_flight - p.credit
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
                if p.alive and a is not None and not a.consumers and not a.remote and p.credit > 0:
                    p.draining = True
                    drains.append(p)
            self._drain.clear()
        return grants, drains

    # ---- introspection ---------------------------------------------------------------------------------
    def delivery_totals(self) -> tuple[int, int, int]:
        """Node totals (ingress, egress, transit): every address now in the table plus retired ones."""
        ingress, egress, transit = self.retired
        for a in self.addresses.values():
            ingress += a.ingress
            egress += a.egress
            transit += a.transit
        for a in self._node_addresses.values():
            ingress += a.ingress
            transit += a.transit
        return ingress, egress, transit

    def stuck(self, after: float = STUCK_AFTER) -> int:
        """Deliveries in flight for more than `after` seconds (as of `now`)."""
        limit = self.now - after
        return sum(1 for e in self.in_flight.values() if e[6] < limit)

    def iter_links(self) -> Iterator[Consumer | Producer]:
        for a in self.addresses.values():
            yield from a.consumers
            yield from a.producers

    def snapshot(self, hidden: Callable[[Consumer | Producer], bool] | None = None) -> dict:
        """Sizes of the internal tables and the counters (for tests and logs).

        Links for which `hidden(link)` is true are left out, and so are addresses only they use.
        """
        def shown(links: list) -> list:
            return links if hidden is None else [x for x in links if not hidden(x)]

        addresses = {}
        for a in self.addresses.values():
            consumers, producers = shown(a.consumers), shown(a.producers)
            if consumers or producers or a.remote or (not a.consumers and not a.producers):
                addresses[a.key] = {"distribution": a.distribution, "consumers": len(consumers),
                                    "producers": len(producers), "ready": a.ready,
                                    "remote": [d.node for d in a.remote]}
        return {
            "node": self.node_id,
            "addresses": addresses,
            "in_flight": len(self.in_flight),
            "counters": {**self.counters, **self.outcome_totals()},
        }


_OUTCOME_NAMES = {ACCEPTED: "accepted", REJECTED: "rejected", RELEASED: "released", MODIFIED: "modified"}
