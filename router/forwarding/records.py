"""The forwarding core's records: addresses, the links using them, deliveries in flight.

Plain slotted classes, no behaviour beyond small helpers: the core (router.forwarding.core) owns and
changes them; the adapter reads them and keeps its Proton handles in `handle` / `conn` (opaque here).
Outcome codes are the AMQP 1.0 descriptor codes (equal to Proton's PN_ACCEPTED etc.).
"""

from __future__ import annotations

from dataclasses import dataclass

RECEIVED = 0x23
ACCEPTED = 0x24
REJECTED = 0x25
RELEASED = 0x26
MODIFIED = 0x27
TERMINAL = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))
OUTCOME_NAMES = {ACCEPTED: "accepted", REJECTED: "rejected", RELEASED: "released", MODIFIED: "modified"}
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
        self.multicast = distribution == "multicast"
        self.consumers: list[Consumer] = []
        self.producers: list[Producer] = []
        self.rr = 0                # round-robin cursor for `closest` (and balanced ties)
        self.ready = False         # a local consumer with credit, or a reachable remote destination
        # other nodes with consumers, cheapest first (empty on a single node: the fast path)
        self.remote: list[RemoteDest] = []
        # multicast: (next-hop data-out link, nodes behind it that have the address)
        self.links: list[tuple[Consumer, frozenset[str]]] = []
        # deliveries routed: from local producers, to local consumers, peer to peer
        self.ingress = 0
        self.egress = 0
        self.transit = 0

    def __repr__(self) -> str:
        return f"Address({self.key!r}, {self.distribution}, consumers={len(self.consumers)})"


class Consumer:
    """A link on which the node sends to a receiver: a client's, or the data-out link to a peer node."""

    __slots__ = ("handle", "conn", "address", "credit", "unsettled", "delivered", "alive", "name", "busy",
                 "held", "presettle", "peer", "outcomes", "presettled", "zero_credit", "delays")

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
        self.held: list[Held] | None = None  # deliveries waiting for the stream in progress
        self.presettle = False     # it asked for snd-settle-mode=settled: everything goes pre-settled
        self.peer: str | None = None  # set on the data-out link to a peer node: its node id
        self.outcomes = [0, 0, 0, 0]  # terminal outcomes it returned: accepted, rejected, released, modified
        self.presettled = 0           # deliveries sent to it pre-settled
        self.zero_credit = 0.0        # seconds seen with no credit (sampled by management)
        self.delays = [0, 0]          # deliveries it settled more than 1 s / 10 s after they were sent


class Producer:
    """A link on which a client (or a peer node's data-out link) sends to the node."""

    __slots__ = ("handle", "conn", "address", "credit", "in_flight", "draining", "delivered", "alive",
                 "name", "router", "peer", "outcomes", "presettled", "zero_credit", "delays", "dropped",
                 "streaming", "last")

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
        self.peer: str | None = None   # that peer node's id (None: a client's link)
        self.outcomes = [0, 0, 0, 0]  # outcomes settled back to it: accepted, rejected, released, modified
        self.presettled = 0           # pre-settled deliveries it sent
        self.zero_credit = 0.0        # seconds seen with no credit from us (sampled by management)
        self.delays = [0, 0]          # its unicast deliveries settled more than 1 s / 10 s after sent
        self.dropped = 0              # pre-settled deliveries it sent that no consumer got
        self.streaming = False        # a peer's streaming link (router.adapter.streamlinks)
        self.last: Address | None = None   # the address of its last routed delivery (the memory budget's)

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
        self.detail: object = None  # the adapter's snapshot of the best outcome's details


@dataclass(slots=True)
class InFlight:
    """An unsettled delivery sent to a consumer, keyed in the core by the outbound delivery handle.

    `seq` is the consumer's `delivered` count when it was handed over (so a lost consumer's entries can
    be told apart: never on the wire -> RELEASED, else MODIFIED); `dest` is the remote destination of an
    anycast delivery toward another node (its count is decremented on settlement); `sent_at` is the
    core's `now` when it was sent; `size` and `route` belong to the telemetry observer (-1: not kept).
    """

    in_dlv: object
    producer: Producer
    consumer: Consumer
    group: McastGroup | None
    seq: int
    dest: RemoteDest | None
    sent_at: float
    size: int
    route: int


@dataclass(slots=True)
class Held:
    """A delivery waiting for the multi-frame message being streamed to its consumer.

    `payload` is the bytes to send (adapter-owned); `key` the address it was routed by, `ann` its router
    annotations (from a peer) and `dest` its remote destination, for the observer. `copy`: a pre-settled
    multicast copy, counted with its delivery when that was sent (`sent_presettled`).
    """

    payload: object
    in_dlv: object
    producer: Producer
    presettled: bool
    group: McastGroup | None
    key: str | None = None
    ann: object = None
    dest: RemoteDest | None = None
    copy: bool = False
