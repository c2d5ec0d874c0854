"""Broker objects per bridged address: what to declare, where to publish, which queue to consume.

======================  ====================================  =======================================
semantics               mesh -> broker (publish)              broker -> mesh (consume)
======================  ====================================  =======================================
anycast                 default exchange, key = address       queue ``address`` (competing consumers)
multicast               fanout exchange ``address``           queue ``address.<node id>`` bound to the
                                                              exchange: one queue per gateway node;
                                                              the mesh copies to each of its consumers
unicast                 direct exchange ``address``,          queue ``address`` bound with key
                        key = address                         ``address`` (the server's own queue)
======================  ====================================  =======================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.gateway.config import BridgeConfig


@dataclass(frozen=True)
class Topology:
    """The broker side of one bridged address."""

    exchange: str            # where to publish ("" = the default exchange)
    exchange_type: str | None
    routing_key: str
    queue: str | None        # the queue to declare / consume (None: publish only, multicast)
    bind_key: str | None     # binding of `queue` to `exchange` (None: no binding)
    durable: bool
    arguments: dict[str, Any]


def topology(bridge: BridgeConfig, node_id: str) -> Topology:
    """Names and options for ``bridge`` on node ``node_id``."""
    args: dict[str, Any] = {}
    if bridge.dead_letter_exchange is not None:
        args["x-dead-letter-exchange"] = bridge.dead_letter_exchange
    if bridge.ttl is not None:
        args["x-message-ttl"] = int(bridge.ttl * 1000)
    a = bridge.address
    if bridge.semantics == "anycast":
        return Topology("", None, a, a, None, bridge.durable, args)
    if bridge.semantics == "multicast":
        queue = f"{a}.{node_id}" if bridge.from_broker else None
        return Topology(a, "fanout", "", queue, "" if queue else None, bridge.durable, args)
    return Topology(a, "direct", a, a, a, bridge.durable, args)
