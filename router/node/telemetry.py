"""The node's telemetry hooks: turn engine happenings into telemetry records for the writer process.

The engine calls these only when telemetry is configured (`engine.tel is not None`), so a node without
telemetry pays one attribute test per message. With telemetry, an unsettled delivery from a client to a
client of this node (the hot path, which the engine inlines) costs nothing while it is in flight (its
size rides in the core's in-flight entry, which exists anyway) and, when it settles, one list append to
the current `DeliveryColumns` batch. Everything else is kept as runs: the route (that of the consumer's
address), the outcome, the arrival time (the core's in-flight stamp `sent_at`: the time of the batch of
events the delivery came in) and the settlement time (the time of the batch of events it settled
in). The strings of a route (address, ingress, hops, link kinds, egress) are interned once per route
as a route id. The inlined
code is written so that CPython 3.11 specializes every step (plain dicts and lists, no bound methods in
attributes):

    core.sent(p, c, d, od, None, n)                     # forwarded: the size goes in the in-flight entry
    v = e[7]                                            # settled (`e`: the core's in-flight entry)
    if v >= 0:
        if outcome != tel.outcome or e[6] is not tel.arrived or c.address is not tel.address:
            tel.run(outcome, e[6], c.address)
        tel.sizes.append(v)
    elif tel.mesh:
        tel.settled(e, outcome, c)

Other deliveries (from or to peers, streamed, multicast, pre-settled, unroutable) go through the
methods below. Once per pump (`tick`) the batch closes its settlement-time run; about twice a second (or
every HANDOFF_RECORDS records) it goes whole to the writer process (router.telemetry.process), which
converts and writes it in another process: the node itself stays single-threaded.
"""

from __future__ import annotations

import time

from router.adapter.handles import link_id
from router.telemetry import DROPPED, PRESETTLED
from router.telemetry.columns import DeliveryColumns
from router.telemetry.process import WriterProcess

CLIENT = "client"
ROUTER = "inter-router"
HERE = ""  # egress: this node (the engine does not know the node id where it computes routes)
ACCEPTED = 0x24
RELEASED = 0x26
HANDOFF_RECORDS = 65_536  # hand a batch to the writer at this many records
HANDOFF_SECONDS = 0.5     # or when it is this old (the server pumps at least once a second)
MAX_ROUTE_KEYS = 10_000   # route_ids entries before it starts over


class NodeTelemetry:
    """Delivery and event records of one node.

    Deliveries from clients have this node as ingress and 0 hops; deliveries from a peer carry the
    ingress node and hop count of their router annotations, which the engine passes in. `egress` is
    the node where this node sent the delivery out of the mesh as far as it knows: itself when it left
    on a client (or broker) link, the destination node for anycast toward a peer, None otherwise.
    """

    def __init__(self, writer: WriterProcess, node_id: str, handoff_records: int = HANDOFF_RECORDS,
                 handoff_seconds: float = HANDOFF_SECONDS) -> None:
        self.writer = writer
        self.node_id = node_id
        self.mesh: dict[object, tuple[int, int]] = {}   # in delivery -> (route id, size), other ways
        self._groups: dict[object, tuple[int, int, float]] = {}  # multicast group -> (rid, size, arrival)
        self._routes: dict[tuple, int] = {}     # (address, ingress, hops, in, out, egress) -> route id
        self._local: dict[str | None, int] = {}  # address -> route id client in, client out here
        # what the engine's mesh path looks a route id up by: (address, raw ingress annotation, hops,
        # from a peer, consumer's peer, destination node) -> route id (bounded: peers choose ingress)
        self.route_ids: dict[tuple, int] = {}
        # the server calls tick() once per pump: one clock read per batch of messages, not two per message
        self.now = time.time()
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
                self.writer.deliveries(b)
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
               in_link: str | None = CLIENT, out_link: str | None = CLIENT, egress: str | None = HERE) -> int:
        key = (address, ingress, hops, in_link, out_link, egress)
        rid = self._routes.get(key)
        if rid is None:
            if egress == HERE:
                egress = self.node_id
            rid = self._routes[key] = self.writer.route(
                (address, ingress or self.node_id, hops, in_link, out_link, egress))
        return rid

    def _local_route(self, address: str | None) -> int:
        rid = self._local[address] = self._route(address)
        return rid

    # ---- deliveries ---------------------------------------------------------------------------------------
    def sent(self, key: object, size: int, address: str | None, *route) -> None:
        """An unsettled delivery was forwarded (other than client to client here, which the engine
        inlines); `key` (its inbound delivery, as the core's in-flight entry holds it) is what its
        settlement will be reported under.

        `route`: (ingress, hops, in_link, out_link, egress) as _route takes them."""
        self.mesh[key] = (self._route(address, *route), size)

    def grew(self, key: object, size: int) -> None:
        """A streamed delivery's size (so far) is known; `key`: as for `sent`, or a multicast group."""
        e = self.mesh.get(key)
        if e is not None:
            self.mesh[key] = (e[0], size)
            return
        g = self._groups.get(key)
        if g is not None:
            self._groups[key] = (g[0], size, g[2])

    def forget(self, key: object) -> None:
        """The delivery `sent` (or `sent_group`) kept under `key` was aborted: nothing to record."""
        self.mesh.pop(key, None)
        self._groups.pop(key, None)

    def settled(self, entry: tuple, outcome: int, consumer: object) -> None:
        """The delivery of the core's in-flight `entry` (forwarded to `consumer`, a core Consumer) was
        settled upstream with `outcome`. A size in the entry (`entry[7] >= 0`) comes with its route id
        (`entry[8]`; -1: client to client here); otherwise the route and size are those `sent` kept."""
        size = entry[7]
        if size >= 0:
            rid = entry[8]
            if rid < 0:
                rid = self._local.get(consumer.address.key)
                if rid is None:
                    rid = self._local_route(consumer.address.key)
            self._record(rid, size, outcome, entry[6])
            return
        e = self.mesh.pop(entry[0], None)
        if e is not None:
            self._record(e[0], e[1], outcome, entry[6])

    def sent_group(self, group: object, size: int, address: str | None, *route) -> None:
        """An unsettled multicast delivery went out as copies of `group`."""
        self._groups[group] = (self._route(address, *route), size, self.now)

    def group_settled(self, group: object, outcome: int) -> None:
        """Every copy of `group` is terminal: it was settled upstream with `outcome`."""
        e = self._groups.pop(group, None)
        if e is not None:
            self._record(e[0], e[1], outcome, e[2])

    def presettled_here(self, address: str | None, size: int) -> None:
        """A pre-settled delivery from a client went to a client of this node."""
        rid = self._local.get(address)
        if rid is None:
            rid = self._local_route(address)
        self._record(rid, size, PRESETTLED, self.now)

    def local(self, address: str | None, size: int, outcome: int) -> None:
        """A delivery from a client went to a client of this node and ends now with `outcome`
        (PRESETTLED, or ACCEPTED when it was handed over to an at-most-once consumer)."""
        rid = self._local.get(address)
        if rid is None:
            rid = self._local_route(address)
        self._record(rid, size, outcome, self.now)

    def ended(self, address: str | None, size: int, outcome: int, *route) -> None:
        """A delivery ends now with `outcome` (any code); `route` as `_route` takes it."""
        self._record(self._route(address, *route), size, outcome, self.now)

    def presettled(self, address: str | None, size: int, delivered: bool, ingress: str | None = None,
                   hops: int = 0, in_link: str = CLIENT, out_link: str = CLIENT,
                   egress: str | None = HERE) -> None:
        if delivered:
            self._record(self._route(address, ingress, hops, in_link, out_link, egress), size, PRESETTLED,
                         self.now)
        else:
            self._record(self._route(address, ingress, hops, in_link, None, None), size, DROPPED, self.now)

    def unroutable(self, address: str | None, size: int, ingress: str | None = None, hops: int = 0,
                   in_link: str = CLIENT) -> None:
        """An unsettled delivery found no destination and went back RELEASED (or was rejected)."""
        self._record(self._route(address, ingress, hops, in_link, None, None), size, RELEASED, self.now)

    # ---- events -------------------------------------------------------------------------------------------
    def event(self, name: str, link: object, address: str | None, peer: str | None) -> None:
        self.writer.event((name, link_id(link) if link is not None else None, address, peer, time.time()))

    def close(self) -> None:
        """Hand the current batch to the writer, which writes what is pending and stops."""
        b = self.batch
        b.settle(self.now)
        self.writer.deliveries(b)
        self._new_batch()
        self.writer.close()
