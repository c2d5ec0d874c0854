"""oslo.messaging Targets to AMQP 1.0 addresses, exactly as oslo.messaging 14.x's ``amqp`` driver makes them
(``amqp1_driver/addressing.py``), so both drivers meet on the same addresses.

Routable (the mesh's ``product`` is ``meshrouter``, so ``addressing_mode = dynamic`` picks these)::

    rpc    anycast    openstack.org/om/rpc/anycast[/VHOST]/EXCHANGE/TOPIC
           unicast    openstack.org/om/rpc/unicast[/VHOST]/EXCHANGE/TOPIC/SERVER
           multicast  openstack.org/om/rpc/multicast[/VHOST]/EXCHANGE/TOPIC
    notify anycast    openstack.org/om/notify/anycast[/VHOST]/EXCHANGE/TOPIC.PRIORITY

Legacy (qpidd; the same for RPC and notifications)::

    anycast  unicast[.VHOST].EXCHANGE.TOPIC     unicast  exclusive[.VHOST].EXCHANGE.TOPIC.SERVER
    fanout   broadcast[.VHOST].EXCHANGE.TOPIC.all
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RPC, NOTIFY = 0, 1
"""The two services (14.x ``SERVICE_RPC`` / ``SERVICE_NOTIFY``)."""


@dataclass(frozen=True)
class Dest:
    """What an address is made from: the Target's fields that matter, and the service."""

    topic: str
    exchange: str | None = None
    server: str | None = None
    fanout: bool = False
    service: int = RPC

    @classmethod
    def of(cls, target: Any, service: int = RPC) -> Dest:
        """From an ``oslo_messaging.Target``."""
        return cls(target.topic, target.exchange, target.server, bool(target.fanout), service)


def _join(sep: str, parts: list[str | None]) -> str:
    return sep.join(p for p in parts if p)


@dataclass(frozen=True)
class Prefixes:
    """The addressing options of ``[oslo_messaging_amqp]``."""

    rpc: str = "openstack.org/om/rpc"
    notify: str = "openstack.org/om/notify"
    unicast: str = "unicast"
    multicast: str = "multicast"
    anycast: str = "anycast"
    legacy_server: str = "exclusive"
    legacy_broadcast: str = "broadcast"
    legacy_group: str = "unicast"
    rpc_exchange: str | None = None
    notify_exchange: str | None = None


class Addresser:
    """Resolves :class:`Dest` to addresses for one connection (the mode may depend on the peer)."""

    def __init__(self, routable: bool, default_exchange: str | None, prefixes: Prefixes,
                 vhost: str | None = None) -> None:
        self.routable = routable
        self.p = prefixes
        self.vhost = vhost or None
        self.default_exchange = default_exchange
        if routable:
            default = default_exchange or "openstack"
            self._exchange = (prefixes.rpc_exchange or default, prefixes.notify_exchange or default)
        else:
            self._exchange = (default_exchange, default_exchange)

    def exchange(self, dest: Dest) -> str | None:
        return dest.exchange or self._exchange[dest.service]

    def resolve(self, dest: Dest) -> str:
        """The address a message to ``dest`` is sent to."""
        if dest.fanout:
            return self.multicast(dest)
        if dest.server:
            return self.unicast(dest)
        return self.anycast(dest)

    def _routable(self, tag: str, dest: Dest, *tail: str | None) -> str:
        prefix = self.p.rpc if dest.service == RPC else self.p.notify
        return _join("/", [f"{prefix}/{tag}", self.vhost, self.exchange(dest), dest.topic, *tail])

    def multicast(self, dest: Dest) -> str:
        if self.routable:
            return self._routable(self.p.multicast, dest)
        return _join(".", [self.p.legacy_broadcast, self.vhost, self.exchange(dest), dest.topic, "all"])

    def unicast(self, dest: Dest) -> str:
        if self.routable:
            return self._routable(self.p.unicast, dest, dest.server)
        return _join(".", [self.p.legacy_server, self.vhost, self.exchange(dest), dest.topic, dest.server])

    def anycast(self, dest: Dest) -> str:
        if self.routable:
            return self._routable(self.p.anycast, dest)
        return _join(".", [self.p.legacy_group, self.vhost, self.exchange(dest), dest.topic])

    def server_addresses(self, dest: Dest) -> list[str]:
        """What an RPC server for ``dest`` (topic and server name) subscribes to: unicast, multicast,
        anycast (14.x's order)."""
        return [self.unicast(dest), self.multicast(dest), self.anycast(dest)]


def choose(mode: str, remote_product: str | None) -> bool:
    """True for routable addresses: ``routable``, or ``dynamic`` unless the peer is qpidd (or says
    nothing, as 14.x assumed)."""
    if mode == "routable":
        return True
    if mode == "legacy":
        return False
    return (remote_product or "qpid-cpp") != "qpid-cpp"
