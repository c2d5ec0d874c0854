"""The gateway's configuration objects (built and validated by :mod:`router.config`, ``brokers:``).

Kept free of pika so that validating a config never imports the broker client.
"""

from __future__ import annotations

from dataclasses import dataclass

SEMANTICS = ("anycast", "multicast", "unicast")
DIRECTIONS = ("to-broker", "from-broker", "both")


@dataclass(frozen=True)
class BridgeConfig:
    """One mesh address served through the broker.

    ``address`` is an exact AMQP 1.0 address (links need concrete addresses; there are no prefixes).
    Broker objects are named after it: ``anycast`` a queue ``address``; ``multicast`` a fanout exchange
    ``address`` and, to feed the mesh, the queue ``address.<node id>`` bound to it; ``unicast`` a direct
    exchange ``address`` and a queue ``address`` bound with routing key ``address``.
    """

    address: str
    semantics: str = "anycast"          # anycast | multicast | unicast
    direction: str = "both"             # to-broker | from-broker | both
    durable: bool = True                # durable queue/exchange, persistent messages
    dead_letter_exchange: str | None = None
    ttl: float | None = None            # seconds a message may wait in the queue (x-message-ttl)
    declare: bool = True                # declare the queue / exchange (False: they must exist)

    @property
    def to_broker(self) -> bool:
        return self.direction in ("to-broker", "both")

    @property
    def from_broker(self) -> bool:
        return self.direction in ("from-broker", "both")


@dataclass(frozen=True)
class BrokerConfig:
    """One AMQP 0-9-1 broker connection and the addresses bridged through it."""

    name: str
    url: str = "amqp://guest:guest@127.0.0.1:5672/%2F"
    heartbeat: int = 10                 # seconds, 0 disables AMQP heartbeats
    confirm_window: int = 250           # most unconfirmed publishes on this broker (all its addresses)
    addresses: tuple[BridgeConfig, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "addresses", tuple(self.addresses))
