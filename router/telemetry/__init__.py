"""Node telemetry: one record per settled delivery and per link/connection event, in Parquet files.

The node's hot path fills columnar batches of numbers (``columns.DeliveryColumns``) and hands them whole
to a child process (``process.WriterProcess`` -> ``child``) that runs a :class:`TelemetryWriter`:
conversion and file I/O happen outside the node's process (a background thread there, Arrow's C++
code). Records land in ``<dir>/<node>-<start>-<seq>.parquet`` (or ``.jsonl`` with ``fmt="jsonl"``),
one row per record.

Delivery record (one per delivery settled at this node), as JSON::

    {"kind":"delivery","node":"A","address":"svc/orders","ingress":"A","hops":0,
     "in_link":"client","out_link":"inter-router","outcome":"accepted","size":312,
     "arrival":1763770000.123456,"settled":1763770000.125012,"egress":"C","next_hop":"B"}

Event record (link or connection up/down, credit starvation start/end)::

    {"kind":"event","node":"A","event":"link_up","link":"c3/l7","address":"svc/orders",
     "peer":"client-42","time":1763770000.100000}

Times are float epoch seconds (microsecond resolution). Link kinds: ``client``, ``inter-router``,
``broker``. Outcomes: ``accepted``, ``rejected``, ``released``, ``modified``, ``presettled``,
``dropped``. Every field is described in ``router/telemetry/SCHEMA.md``.

``observer`` (NodeTelemetry) is the node's side: it implements router.adapter.observer.Observer, the
adapter's one hook point for decisions. May import: router.adapter (the Observer protocol, link ids),
the core's records and decisions, router.config, the base; pyarrow only in the writer.
"""

from router.telemetry.config import TelemetryConfig
from router.telemetry.schema import (
    DELIVERY_FIELDS,
    DROPPED,
    EVENT_FIELDS,
    EVENTS,
    LINK_KINDS,
    OUTCOMES,
    PRESETTLED,
    DeliveryRecord,
    EventRecord,
)

__all__ = [
    "DELIVERY_FIELDS",
    "DROPPED",
    "EVENT_FIELDS",
    "EVENTS",
    "LINK_KINDS",
    "OUTCOMES",
    "PRESETTLED",
    "DeliveryRecord",
    "EventRecord",
    "TelemetryConfig",
    "TelemetryWriter",
]


def __getattr__(name: str) -> object:
    """``TelemetryWriter`` on first use: it imports pyarrow (~0.1-0.2 s), which a node without
    ``telemetry:`` (and `meshrouter check-config`) never needs."""
    if name == "TelemetryWriter":
        from router.telemetry.writer import TelemetryWriter

        return TelemetryWriter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
