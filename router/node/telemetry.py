"""The node's telemetry hooks: turn engine happenings into TelemetryWriter records.

The engine calls these only when telemetry is configured (`engine.tel is not None`), so a node without
telemetry pays one attribute test per message. Each call builds one tuple and appends it; the writer does
the rest off the hot path (router.telemetry).
"""

from __future__ import annotations

import time

from cproton_ffi import ffi

from router.forwarding.core import ACCEPTED, MODIFIED, REJECTED, RELEASED
from router.telemetry import TelemetryWriter

OUTCOME_NAMES = {ACCEPTED: "accepted", REJECTED: "rejected", RELEASED: "released", MODIFIED: "modified"}


def link_id(link: object) -> str:
    """A node-local id for a Proton link, stable while the link lives."""
    return f"l{int(ffi.cast('uintptr_t', link)):x}"


CLIENT = "client"
ROUTER = "inter-router"


class NodeTelemetry:
    """Delivery and event records of one node.

    Deliveries from clients have this node as ingress and 0 hops; deliveries from a peer carry the
    ingress node and hop count of their router annotations, which the engine passes in.
    """

    def __init__(self, writer: TelemetryWriter, node_id: str) -> None:
        self.writer = writer
        self.node_id = node_id
        # out delivery / group -> (arrival, size, address, ingress, hops, in_link, out_link)
        self._arrivals: dict[object, tuple] = {}
        # the server sets this once per pump: one clock read per batch of messages, not two per message
        self.now = time.time()

    # ---- deliveries ---------------------------------------------------------------------------------------
    def arrived(self, key: object, size: int, address: str, ingress: str | None = None, hops: int = 0,
                in_link: str = CLIENT, out_link: str = CLIENT) -> None:
        """An unsettled delivery was forwarded; `key` is what its settlement will be reported under."""
        self._arrivals[key] = (self.now, size, address, ingress or self.node_id, hops, in_link, out_link)

    def grew(self, key: object, size: int) -> None:
        """A streamed delivery's final size is known."""
        entry = self._arrivals.get(key)
        if entry is not None:
            self._arrivals[key] = (entry[0], size, *entry[2:])

    def settled(self, key: object, outcome: int) -> None:
        """The delivery recorded under `key` was settled upstream with `outcome`."""
        entry = self._arrivals.pop(key, None)
        if entry is not None:
            arrival, size, address, ingress, hops, in_link, out_link = entry
            self.writer.delivery((address, ingress, hops, in_link, out_link,
                                  OUTCOME_NAMES.get(outcome, "released"), size, arrival, self.now))

    def presettled(self, address: str | None, size: int, delivered: bool, ingress: str | None = None,
                   hops: int = 0, in_link: str = CLIENT, out_link: str = CLIENT) -> None:
        now = self.now
        self.writer.delivery((address, ingress or self.node_id, hops, in_link,
                              out_link if delivered else None, "presettled" if delivered else "dropped",
                              size, now, now))

    def unroutable(self, address: str | None, size: int, ingress: str | None = None, hops: int = 0,
                   in_link: str = CLIENT) -> None:
        """An unsettled delivery found no destination and went back RELEASED (or was rejected)."""
        now = self.now
        self.writer.delivery((address, ingress or self.node_id, hops, in_link, None, "released", size,
                              now, now))

    # ---- events -------------------------------------------------------------------------------------------
    def event(self, name: str, link: object, address: str | None, peer: str | None) -> None:
        self.writer.event((name, link_id(link) if link is not None else None, address, peer, time.time()))

    def close(self) -> None:
        self.writer.close()
