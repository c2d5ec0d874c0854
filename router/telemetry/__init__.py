"""Node telemetry: one JSON Lines record per settled delivery and per link/connection event.

The node's hot path hands plain tuples to a :class:`TelemetryWriter`; formatting and file I/O happen
off the hot path (a child process by default). Records land in ``<dir>/<node>-<start>-<seq>.jsonl``.

Delivery record (one per delivery settled at this node)::

    {"kind":"delivery","node":"A","address":"svc/orders","ingress":"A","hops":0,
     "in_link":"client","out_link":"inter-router","outcome":"accepted","size":312,
     "arrival":1763770000.123456,"settled":1763770000.125012}

Event record (link or connection up/down, credit starvation start/end)::

    {"kind":"event","node":"A","event":"link_up","link":"c3/l7","address":"svc/orders",
     "peer":"client-42","time":1763770000.100000}

Times are float epoch seconds (microsecond resolution). Link kinds: ``client``, ``inter-router``,
``broker``. Outcomes: ``accepted``, ``rejected``, ``released``, ``modified``, ``presettled``,
``dropped``. Every field is described in ``router/telemetry/SCHEMA.md``.
"""

from router.telemetry.config import TelemetryConfig
from router.telemetry.schema import (
    DELIVERY_FIELDS,
    EVENT_FIELDS,
    EVENTS,
    LINK_KINDS,
    OUTCOMES,
    DeliveryRecord,
    EventRecord,
)
from router.telemetry.writer import TelemetryWriter

__all__ = [
    "DELIVERY_FIELDS",
    "EVENT_FIELDS",
    "EVENTS",
    "LINK_KINDS",
    "OUTCOMES",
    "DeliveryRecord",
    "EventRecord",
    "TelemetryConfig",
    "TelemetryWriter",
]
