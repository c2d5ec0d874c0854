"""The node's telemetry hooks: turn engine happenings into TelemetryWriter records.

The engine calls these only when telemetry is configured (`engine.tel is not None`), so a node without
telemetry pays one attribute test per message. A delivery costs one small tuple when it is forwarded
(kept until it settles) and one when it settles, both numbers only: the strings of its route (address,
ingress, hops, link kinds, egress) are interned once per route as a route id. The writer does the rest
off the hot path (router.telemetry).
"""

from __future__ import annotations

import time

from cproton_ffi import ffi

from router.telemetry import DROPPED, PRESETTLED, TelemetryWriter


def link_id(link: object) -> str:
    """A node-local id for a Proton link, stable while the link lives."""
    return f"l{int(ffi.cast('uintptr_t', link)):x}"


CLIENT = "client"
ROUTER = "inter-router"
HERE = ""  # egress: this node (the engine does not know the node id where it computes routes)
RELEASED = 0x26


class NodeTelemetry:
    """Delivery and event records of one node.

    Deliveries from clients have this node as ingress and 0 hops; deliveries from a peer carry the
    ingress node and hop count of their router annotations, which the engine passes in. `egress` is
    the node where this node sent the delivery out of the mesh as far as it knows: itself when it left
    on a client (or broker) link, the destination node for anycast toward a peer, None otherwise.
    """

    def __init__(self, writer: TelemetryWriter, node_id: str) -> None:
        self.writer = writer
        self.node_id = node_id
        # out delivery / group -> (route id, size, arrival)
        self._arrivals: dict[object, tuple] = {}
        self._local: dict[str | None, int] = {}  # address -> route id of client in, client out
        self._routes: dict[tuple, int] = {}      # (address, ingress, hops, in, out, egress) -> route id
        # the server calls tick() once per pump: one clock read per batch of messages, not two per message
        self.now = time.time()
        self._put = writer.putter()

    def tick(self, now: float) -> None:
        """Once per pump: the time stamp of this batch of messages (and the writer's current putter)."""
        self.now = now
        self._put = self.writer.putter()

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
        rid = self._local.get(address)
        if rid is None:
            rid = self._local[address] = self._route(address, None, 0, CLIENT, CLIENT, HERE)
        return rid

    # ---- deliveries ---------------------------------------------------------------------------------------
    def arrived(self, key: object, size: int, address: str, *route) -> None:
        """An unsettled delivery was forwarded; `key` is what its settlement will be reported under.

        `route`: (ingress, hops, in_link, out_link, egress) as _route takes them; none for a delivery
        from a client to a client of this node (the fast path)."""
        if route:
            rid = self._route(address, *route)
        else:
            rid = self._local.get(address)
            if rid is None:
                rid = self._local_route(address)
        self._arrivals[key] = (rid, size, self.now)

    def grew(self, key: object, size: int) -> None:
        """A streamed delivery's final size is known."""
        entry = self._arrivals.get(key)
        if entry is not None:
            self._arrivals[key] = (entry[0], size, entry[2])

    def settled(self, key: object, outcome: int) -> None:
        """The delivery recorded under `key` was settled upstream with `outcome`."""
        e = self._arrivals.pop(key, None)
        if e is not None:
            self._put((e[0], outcome, e[1], e[2], self.now))

    def presettled(self, address: str | None, size: int, delivered: bool, ingress: str | None = None,
                   hops: int = 0, in_link: str = CLIENT, out_link: str = CLIENT,
                   egress: str | None = HERE) -> None:
        now = self.now
        if delivered:
            self._put((self._route(address, ingress, hops, in_link, out_link, egress), PRESETTLED, size,
                       now, now))
        else:
            self._put((self._route(address, ingress, hops, in_link, None, None), DROPPED, size, now, now))

    def unroutable(self, address: str | None, size: int, ingress: str | None = None, hops: int = 0,
                   in_link: str = CLIENT) -> None:
        """An unsettled delivery found no destination and went back RELEASED (or was rejected)."""
        now = self.now
        self._put((self._route(address, ingress, hops, in_link, None, None), RELEASED, size, now, now))

    # ---- events -------------------------------------------------------------------------------------------
    def event(self, name: str, link: object, address: str | None, peer: str | None) -> None:
        self.writer.event((name, link_id(link) if link is not None else None, address, peer, time.time()))

    def close(self) -> None:
        self.writer.close()
