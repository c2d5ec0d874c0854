"""What the bridges of one broker gateway share with it: a :class:`BridgeContext`.

The bridges (:mod:`router.gateway.publisher`, :mod:`router.gateway.consumer`) need their gateway's
name (for log lines), the node's event loop, the in-process connection to the node their links live
on, and the gateway's counters. They get exactly that, not the gateway itself, so they never import
:mod:`router.gateway.gateway` (which imports them).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from router.adapter.inprocess import NodeConnection

STAT_NAMES = ("published", "confirmed", "returned", "nacked", "consumed", "acked", "requeued",
              "dead_lettered", "connects", "failures", "silent")


def new_stats() -> dict[str, int]:
    """Every counter of a gateway at zero."""
    return dict.fromkeys(STAT_NAMES, 0)


@dataclass(eq=False)
class BridgeContext:
    """One broker gateway as its bridges see it."""

    name: str                               # the broker's name in the config
    loop: asyncio.AbstractEventLoop
    local: NodeConnection                   # the gateway's in-process connection to its node
    stats: dict[str, int] = field(default_factory=new_stats)   # counters since the node started
