"""Record layout shared by the node (tuples), the writer (Arrow) and the files; see SCHEMA.md."""

from __future__ import annotations

# What TelemetryWriter.delivery() takes: a plain tuple in this order.
DELIVERY_FIELDS = (
    "address", "ingress", "hops", "in_link", "out_link", "outcome", "size", "arrival", "settled", "egress",
    "next_hop",
)
# (egress and next_hop may be left out: None)
DeliveryRecord = tuple[str | None, str | None, int, str | None, str | None, str, int, float, float,
                       str | None, str | None]

# What the hot path passes to TelemetryWriter.event(): a plain tuple in this order.
EVENT_FIELDS = ("event", "link", "address", "peer", "time")
EventRecord = tuple[str, str | None, str | None, str | None, float]

# A route: what a delivery record shares with every other delivery that took the same way through this
# node. The node's hot path records a route id (an index into TelemetryWriter.routes), not the strings.
# ``next_hop``: the peer node a delivery that left on an inter-router link was sent to. A 6-tuple route
# (without it) is taken as next_hop None.
ROUTE_FIELDS = ("address", "ingress", "hops", "in_link", "out_link", "egress", "next_hop")
Route = tuple[str | None, str | None, int, str | None, str | None, str | None, str | None]

# The compact delivery record of the hot path (TelemetryWriter.put): numbers only.
#   (route id, outcome code, size, arrival, settled)
# Outcome codes: the AMQP descriptor codes of the terminal outcomes (0x24..0x27), PRESETTLED, DROPPED;
# any other code is written as "released".
PRESETTLED = 1
DROPPED = 2
OUTCOME_CODES = {0x24: "accepted", 0x25: "rejected", 0x26: "released", 0x27: "modified",
                 PRESETTLED: "presettled", DROPPED: "dropped"}
CompactRecord = tuple[int, int, int, float, float]

# Columns of the files, in order (deliveries and events share one schema; the other kind's are null).
FILE_COLUMNS = ("kind", "node", "address", "ingress", "hops", "in_link", "out_link", "outcome", "size",
                "arrival", "settled", "egress", "next_hop", "event", "link", "peer", "time")

LINK_KINDS = ("client", "inter-router", "broker")
OUTCOMES = ("accepted", "rejected", "released", "modified", "presettled", "dropped")
EVENTS = ("link_up", "link_down", "conn_up", "conn_down", "credit_starved_start", "credit_starved_end")


def check_route(route: Route) -> Route:
    """``route`` with all of schema.ROUTE_FIELDS (a 6-tuple gets next_hop None); TypeError unless it
    has their types."""
    if len(route) not in (6, 7) or type(route[2]) is not int:
        raise TypeError("a route is (address, ingress, hops, in_link, out_link, egress[, next_hop]) with "
                        "int hops")
    for i in range(len(route)):
        if i == 2:
            continue
        if route[i] is not None and not isinstance(route[i], str):
            raise TypeError(f"route field {i} must be str or None, not {type(route[i]).__name__}")
    return route if len(route) == 7 else (*route, None)
