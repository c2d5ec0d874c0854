"""AMQP 0-9-1 gateway: the node's bridge to brokers (RabbitMQ) for store-and-forward.

Each ``brokers:`` entry of the node config becomes a :class:`~router.gateway.gateway.BrokerGateway`
running on the node's own asyncio loop (pika's ``AsyncioConnection``, no threads). The gateway reaches
its node as an ordinary AMQP 1.0 client over an in-process socketpair
(:class:`~router.adapter.inprocess.NodeConnection`, the node's one in-process client), so the forwarding
engine is unchanged. It uses nothing else of the node than :class:`~router.gateway.node.GatewayNode`:
that connection, and the node's report of changes to an address's consumers (never its tables).

* mesh -> broker (:mod:`router.gateway.publisher`): a consumer link per bridged address, attached only
  while the broker is usable, so the address is advertised mesh-wide and producers get credit only
  then; publishes with confirms and mandatory; credit follows confirms, at most ``confirm_window``
  unconfirmed per broker.
* broker -> mesh (:mod:`router.gateway.consumer`): a producer link per bridged address; the queue is
  consumed with manual acks while the mesh gives credit; acks follow the mesh consumers' outcomes.
* :mod:`router.gateway.mapping` maps messages both ways; :mod:`router.gateway.topology` names and
  declares the broker objects; :mod:`router.gateway.wire091` writes publishes without pika's per-call
  frame objects.
* :mod:`router.gateway.ownership`: one node bridges a ``direction: both`` address (a lock queue in the
  broker); :mod:`router.gateway.liveness`: a silent broker is dropped within 1.5–1.75 heartbeats.
* :mod:`router.gateway.context`: what the bridges share with their gateway (so they never import it).

What it may import: ``router.adapter.inprocess`` (the client), ``router.amqp`` (the codec), pika, and
its own modules, which import each other without cycles; nothing of ``router.node`` or
``router.forwarding``. ``router.node.server`` imports this package only when ``brokers:`` is
configured, and passes itself as the :class:`~router.gateway.node.GatewayNode`.

Delivery is at-least-once: after a reconnect, a message the broker had stored but whose ack was lost
(either direction) is delivered again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from router.gateway.config import BridgeConfig, BrokerConfig
from router.gateway.node import GatewayNode

__all__ = ["BridgeConfig", "BrokerConfig", "GatewayNode", "Gateways"]


class Gateways:
    """Every broker gateway of one node."""

    def __init__(self, configs: Sequence[BrokerConfig], node_id: str, loop: asyncio.AbstractEventLoop,
                 node: GatewayNode) -> None:
        """``node`` serves each gateway's in-process connection and reports consumer changes."""
        from router.adapter.inprocess import NodeConnection
        from router.gateway.gateway import BrokerGateway

        pika_log = logging.getLogger("pika")
        if pika_log.level == logging.NOTSET:      # pika logs each step (INFO) and each failure (ERROR)
            pika_log.setLevel(logging.CRITICAL)   # the gateway logs one line per failure streak
        self.gateways = []
        for cfg in configs:
            local = NodeConnection(loop, node.add_broker_connection, cfg.name)
            self.gateways.append(BrokerGateway(cfg, node_id, loop, local, node))

    def start(self) -> None:
        for gw in self.gateways:
            gw.start()

    def stop(self) -> None:
        """Release what is unconfirmed, close the broker connections and the links to the node."""
        for gw in self.gateways:
            gw.stop()
            gw.local.close()

    def snapshot(self) -> dict[str, Any]:
        """Per broker name: state, counters and in-flight numbers (the node's state dump)."""
        return {gw.name: gw.snapshot() for gw in self.gateways}

    def entities(self) -> list[dict[str, Any]]:
        """One management ``broker`` entity per broker (docs/MANAGEMENT.md): identity, url (no password),
        state (connected / connecting / down), addresses, and the counters published, confirmed,
        returned, nacked, unconfirmed, consumed, acked, requeued, deadLettered, reconnects."""
        return [gw.entity() for gw in self.gateways]
