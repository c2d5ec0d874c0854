"""Record layout shared by the node (tuples) and the files (JSON Lines); see SCHEMA.md."""

from __future__ import annotations

# What the hot path passes to TelemetryWriter.delivery(): a plain tuple in this order.
DELIVERY_FIELDS = (
    "address", "ingress", "hops", "in_link", "out_link", "outcome", "size", "arrival", "settled",
)
DeliveryRecord = tuple[str | None, str | None, int, str | None, str | None, str, int, float, float]

# What the hot path passes to TelemetryWriter.event(): a plain tuple in this order.
EVENT_FIELDS = ("event", "link", "address", "peer", "time")
EventRecord = tuple[str, str | None, str | None, str | None, float]

LINK_KINDS = ("client", "inter-router", "broker")
OUTCOMES = ("accepted", "rejected", "released", "modified", "presettled", "dropped")
EVENTS = ("link_up", "link_down", "conn_up", "conn_down", "credit_starved_start", "credit_starved_end")
