"""The node's telemetry: what the adapter reports of the core's decisions, as records for the writer.

`NodeTelemetry` implements router.adapter.observer.Observer: the engine calls it at its one hook point per
decision (a delivery forwarded, settled, gone nowhere; a multicast group; a stream; a link event) only when
telemetry is configured, so a node without telemetry pays one attribute test per message. With telemetry,
an unsettled delivery from a client to a client of this node costs nothing while it is in flight (its
size rides in the core's in-flight entry, which exists anyway) and, when it settles, one call that appends
one int to the current `DeliveryColumns` batch. Everything else is kept as runs: the route (that of the
consumer's address), the outcome, the arrival time (the core's in-flight stamp `sent_at`: the time of the
batch of events the delivery came in) and the settlement time (the time of the batch of events it settled
in). The strings of a route (address, ingress, hops, link kinds, egress, next hop) are interned once per
route as a route id.

Once per pump (`tick`) the batch closes its settlement-time run; about twice a second (or every
HANDOFF_RECORDS records) it goes whole to the writer process (router.telemetry.process), which converts
and writes it in another process: the node itself stays single-threaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from router.adapter.handles import link_id
from router.amqp.annotations import RouterAnnotations
from router.forwarding.decisions import PRESETTLED as SENT_PRESETTLED
from router.forwarding.records import Consumer, Held, InFlight, McastGroup, Producer, RemoteDest
from router.telemetry.columns import DeliveryColumns
from router.telemetry.process import WriterProcess
from router.telemetry.schema import DROPPED, PRESETTLED

CLIENT = "client"
ROUTER = "inter-router"
HERE = ""  # egress: this node (routes are computed before the node id is put in)
ACCEPTED = 0x24
RELEASED = 0x26
HANDOFF_RECORDS = 65_536  # hand a batch to the writer at this many records
HANDOFF_SECONDS = 0.5     # or when it is this old (the server pumps at least once a second)
MAX_ROUTE_KEYS = 10_000   # route_ids entries before it starts over
STARVED_START, STARVED_END = "credit_starved_start", "credit_starved_end"

Source = tuple[str | None, int, str]
RouteInfo = tuple[str | None, int, str, str, str | None, str | None]


def source_of(p: Producer, ann: RouterAnnotations | None) -> Source:
    """(ingress, hops, in_link) of a delivery from `p` with router annotations `ann`."""
    ingress = ann.ingress.partition("/")[2] if ann is not None and ann.ingress else None
    return ingress, len(ann.trace) if ann is not None else 0, p.conn.kind


def route_info(p: Producer, c: Consumer, ann: RouterAnnotations | None, rd: RemoteDest | None = None,
               copies: list[Consumer] | None = None) -> RouteInfo:
    """(ingress, hops, in_link, out_link, egress, next_hop) of a delivery from `p` to `c` (toward remote
    destination `rd`; multicast: `copies`). egress "" is this node; None: unknown or several. next_hop:
    the peer node `c` leads to (multicast: the peer of the copies that went to peers, if they went to
    one; None if to several or none)."""
    if copies is not None:
        peers = {x.peer for x in copies if x.peer is not None}
        egress = None if peers else HERE
        next_hop = peers.pop() if len(peers) == 1 else None
    else:
        egress = rd.node if rd is not None else None if c.peer is not None else HERE
        next_hop = c.peer
    return (*source_of(p, ann), c.conn.kind, egress, next_hop)


class NodeTelemetry:
    """Delivery and event records of one node.

    Deliveries from clients have this node as ingress and 0 hops; deliveries from a peer carry the
    ingress node and hop count of their router annotations, which the engine passes in. `egress` is
    the node where this node sent the delivery out of the mesh as far as it knows: itself when it left
    on a client (or broker) link, the destination node for anycast toward a peer, None otherwise.
    `next_hop` is the peer node it was sent to when it left on an inter-router link (multicast: when its
    copies went to one peer only).
    """

    def __init__(self, writer: WriterProcess, node_id: str, handoff_records: int = HANDOFF_RECORDS,
                 handoff_seconds: float = HANDOFF_SECONDS,
                 wall_offset: Callable[[], float] = lambda: time.time() - time.monotonic()) -> None:
        self.writer = writer
        self.node_id = node_id
        self.mesh: dict[object, tuple[int, int]] = {}   # in delivery -> (route id, size), other ways
        self._groups: dict[object, tuple[int, int, float]] = {}  # multicast group -> (rid, size, arrival)
        self._routes: dict[tuple, int] = {}     # (address, ingress, hops, in, out, egress, next hop) -> id
        self._local: dict[str | None, int] = {}  # address -> route id client in, client out here
        # what the engine's mesh path looks a route id up by: (address, raw ingress annotation, hops,
        # producer's and consumer's link kinds, destination node, next hop) -> route id (bounded: peers
        # choose ingress)
        self.route_ids: dict[tuple, int] = {}
        self.starved: set[str | None] = set()   # ids of links with a credit_starved_start not yet ended
        # the server calls tick() once per pump with the node's monotonic clock (the core's in-flight stamps
        # are on it too): one clock read per batch of messages, not two per message. Records are for
        # people: their times are put on the wall clock when a batch is handed to the writer.
        self._wall_offset = wall_offset
        self.now = time.monotonic()
        # the current run of the batch: route (and the address whose local route it is, if it is one),
        # outcome, arrival
        self.rid = 0
        self.address: object = None
        self.outcome = ACCEPTED
        self.arrived: float | None = None
        self._handoff_records = handoff_records
        self._handoff_seconds = handoff_seconds
        self._due = self.now + handoff_seconds
        self._marked = 0                        # records of the batch that have their settlement time
        self._new_batch()

    def _new_batch(self) -> None:
        b = self.batch = DeliveryColumns(self.rid, self.outcome, self.arrived)
        self.sizes = b.sizes
        self._marked = 0

    def tick(self, now: float) -> None:
        """Once per pump: the time stamp of this batch of events; the records of the last one were
        settled at the previous stamp. Hands the batch to the writer when it is big or old enough."""
        b = self.batch
        n = len(b.sizes)
        if n != self._marked:
            b.ends.append(n)
            b.times.append(self.now)
            self._marked = n
        if now >= self._due or n >= self._handoff_records:
            if n:
                self._hand_off(b)
                self._new_batch()
            else:
                self.writer.send()              # events and routes
            self._due = now + self._handoff_seconds
        self.now = now

    # ---- runs ---------------------------------------------------------------------------------------------
    def run(self, outcome: int, arrival: float, address: object) -> None:
        """The records appended from now on: local route of `address` (a core Address), `outcome`,
        `arrival`."""
        rid = self._local.get(address.key)
        if rid is None:
            rid = self._local_route(address.key)
        self.route_run(rid, outcome, arrival)
        self.address = address

    def route_id(self, rk: tuple, address: str | None, *route) -> int:
        """The route id of `address` and `route` (as `_route` takes it), remembered under `rk`."""
        if len(self.route_ids) >= MAX_ROUTE_KEYS:
            self.route_ids.clear()
        rid = self.route_ids[rk] = self._route(address, *route)
        return rid

    def route_run(self, rid: int, outcome: int, arrival: float) -> None:
        """The records appended from now on: route `rid`, `outcome`, `arrival`."""
        self.batch.run(rid, outcome, arrival)
        self.rid = rid
        self.outcome = outcome
        self.arrived = arrival
        self.address = None

    def _record(self, rid: int, size: int, outcome: int, arrival: float) -> None:
        if rid != self.rid or outcome != self.outcome or arrival is not self.arrived:
            self.route_run(rid, outcome, arrival)
        self.sizes.append(size)

    # ---- routes -------------------------------------------------------------------------------------------
    def _route(self, address: str | None, ingress: str | None = None, hops: int = 0,
               in_link: str | None = CLIENT, out_link: str | None = CLIENT, egress: str | None = HERE,
               next_hop: str | None = None) -> int:
        key = (address, ingress, hops, in_link, out_link, egress, next_hop)
        rid = self._routes.get(key)
        if rid is None:
            if egress == HERE:
                egress = self.node_id
            rid = self._routes[key] = self.writer.route(
                (address, ingress or self.node_id, hops, in_link, out_link, egress, next_hop))
        return rid

    def _local_route(self, address: str | None) -> int:
        rid = self._local[address] = self._route(address)
        return rid

    # ---- the Observer hooks (router.adapter.observer) ------------------------------------------------
    def route_of(self, key: str, p: Producer, c: Consumer, ann: RouterAnnotations | None,
                 rd: RemoteDest | None) -> int:
        """The route id an unsettled delivery from `p` to `c` carries in its in-flight entry; -1 for the
        common route, client to client of this node (the consumer's address's)."""
        pk, ck = p.conn.kind, c.conn.kind
        if ann is None and rd is None and c.peer is None:
            if pk == CLIENT and ck == CLIENT:
                return -1
            rk: tuple = (key, pk, ck)
        else:
            rk = (key, ann.ingress if ann is not None else None, len(ann.trace) if ann is not None else 0,
                  pk, ck, rd.node if rd is not None else None, c.peer)
        rid = self.route_ids.get(rk)
        if rid is None:
            rid = self.route_id(rk, key, *route_info(p, c, ann, rd))
        return rid

    def settled(self, entry: InFlight, outcome: int) -> None:
        """The delivery of the core's in-flight `entry` was settled upstream with `outcome`. A size in the
        entry comes with its route id (-1: the consumer's address's local route); otherwise (a stream) the
        route and size are those kept by `stream_routed` / `grew`."""
        size = entry.size
        if size >= 0:
            rid = entry.route
            arrival = entry.sent_at
            if rid < 0:                             # client to client here: the address's route (runs)
                address = entry.consumer.address
                if outcome != self.outcome or arrival is not self.arrived or address is not self.address:
                    self.run(outcome, arrival, address)
            elif rid != self.rid or outcome != self.outcome or arrival is not self.arrived:
                self.route_run(rid, outcome, arrival)
            self.sizes.append(size)
            return
        e = self.mesh.pop(entry.in_dlv, None)
        if e is not None:
            self._record(e[0], e[1], outcome, entry.sent_at)

    def forwarded_settled(self, key: str, p: Producer, c: Consumer, ann: RouterAnnotations | None,
                          rd: RemoteDest | None, mode: int, size: int) -> None:
        """A delivery went out settled: pre-settled, or handed over to an at-most-once consumer."""
        outcome = PRESETTLED if mode == SENT_PRESETTLED else ACCEPTED
        self._record(self._route(key, *route_info(p, c, ann, rd)), size, outcome, self.now)

    def ended(self, key: str | None, p: Producer, presettled: bool, size: int) -> None:
        """A delivery went nowhere: RELEASED back to its producer, or dropped (pre-settled)."""
        self._record(self._route(key, None, 0, p.conn.kind, None, None), size,
                     DROPPED if presettled else RELEASED, self.now)

    def multicast(self, key: str, p: Producer, ann: RouterAnnotations | None, copies: list[Consumer],
                  group: McastGroup | None, size: int) -> None:
        """A multicast delivery went out as `copies` (recorded once, with the first copy's link kind)."""
        route = route_info(p, copies[0], ann, copies=copies)
        if group is not None:
            self._groups[group] = (self._route(key, *route), size, self.now)
        else:
            self._record(self._route(key, *route), size, PRESETTLED, self.now)

    def group_settled(self, group: McastGroup, outcome: int) -> None:
        """Every copy of `group` is terminal: it was settled upstream with `outcome`."""
        e = self._groups.pop(group, None)
        if e is not None:
            self._record(e[0], e[1], outcome, e[2])

    def grew(self, key: object, size: int) -> None:
        """A streamed delivery's size (so far) is known; `key`: its inbound delivery or multicast group."""
        e = self.mesh.get(key)
        if e is not None:
            self.mesh[key] = (e[0], size)
            return
        g = self._groups.get(key)
        if g is not None:
            self._groups[key] = (g[0], size, g[2])

    def forget(self, key: object) -> None:
        """The streamed delivery kept under `key` was aborted: nothing to record."""
        self.mesh.pop(key, None)
        self._groups.pop(key, None)

    def held_sent_settled(self, item: Held, c: Consumer, mode: int) -> None:
        outcome = PRESETTLED if mode == SENT_PRESETTLED else ACCEPTED
        self._record(self._route(item.key, *route_info(item.producer, c, item.ann, item.dest)),
                     len(item.payload), outcome, self.now)

    def held_released(self, item: Held, c: Consumer) -> None:
        route = self._route(item.key, *source_of(item.producer, item.ann), None, None)
        self._record(route, len(item.payload), DROPPED if item.presettled else RELEASED, self.now)

    def stream_routed(self, stream: object, multicast: bool, copies: list[Consumer],
                      rd: RemoteDest | None) -> None:
        """A streamed message found `copies`: keep (address, route or None, source) in `stream.tel`."""
        s = stream
        p = s.producer
        route = route_info(p, copies[0], s.ann, rd, copies if multicast else None) if copies else None
        s.tel = (s.key, route, source_of(p, s.ann))
        if s.group is not None:
            self._groups[s.group] = (self._route(s.key, *route), 0, self.now)   # its size: at the end
        elif not s.presettled:
            for c in copies:
                self.mesh[s.in_dlv] = (self._route(s.key, *route_info(p, c, s.ann, rd)), 0)

    def stream_sunk(self, stream: object) -> None:
        s = stream
        if s.tel is None:
            s.tel = (s.key, None, source_of(s.producer, s.ann))

    def stream_ended(self, stream: object, aborted: bool) -> None:
        """What a streamed message became once its last frame arrived (an unsettled unicast copy's
        settlement records it: `stream_routed` kept its route, `grew` its size)."""
        s = stream
        if aborted:                                 # no delivery to record
            self.forget(s.group if s.group is not None else s.in_dlv)
            return
        if s.tel is None:
            return
        address, route, src = s.tel
        if s.presettled:
            if route is not None and s.outs:
                self._record(self._route(address, *route), s.size, PRESETTLED, self.now)
            else:
                self._record(self._route(address, *src, None, None), s.size, DROPPED, self.now)
        elif s.group is not None:
            self.grew(s.group, s.size)
        elif not s.outs and (s.final is None or route is None):     # it went nowhere
            outcome = RELEASED if s.final is None else s.final.outcome
            self._record(self._route(address, *src, None, None), s.size, outcome, self.now)

    # ---- events -------------------------------------------------------------------------------------------
    def event(self, name: str, link: object, address: str | None, peer: str | None) -> None:
        """Record a link or connection event. Credit starvation is recorded as pairs: a start only for a
        link not starved already, an end only for a link that is (the ledger also tops up links that
        never ran dry: a producer's first credit, the FLOW that ends a drain); a link that goes down is
        no longer starved (its records close the interval with `link_down`)."""
        lid = link_id(link) if link is not None else None
        if name == STARVED_START:
            if lid in self.starved:
                return
            self.starved.add(lid)
        elif name == STARVED_END:
            if lid not in self.starved:
                return
            self.starved.discard(lid)
        elif name in ("link_down", "link_up"):          # link ids are reused once a link is freed
            self.starved.discard(lid)
        self.writer.event((name, lid, address, peer, time.time()))

    def _hand_off(self, b: DeliveryColumns) -> None:
        """Give a complete batch to the writer, its times on the wall clock."""
        off = self._wall_offset()
        b.arrivals = [t + off if t is not None else None for t in b.arrivals]
        b.times = [t + off for t in b.times]
        self.writer.deliveries(b)

    def close(self) -> None:
        """Hand the current batch to the writer, which writes what is pending and stops."""
        b = self.batch
        b.settle(self.now)
        self._hand_off(b)
        self._new_batch()
        self.writer.close()
