"""``brokers:``: the AMQP 0-9-1 brokers a node bridges addresses through (run by router.gateway).

The gateway's configuration objects are declared here, with their keys, so that router.config never
imports the gateway; :mod:`router.gateway.config` is where the gateway takes them from. Free of pika.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from router.config.checks import (
    NAME_RE,
    boolean,
    choice,
    first_duplicate,
    int_in,
    list_of,
    number_at_least,
    prefix,
    string,
)
from router.config.keys import Check, Invalid, declare, section

SEMANTICS = ("anycast", "multicast", "unicast")
DIRECTIONS = ("to-broker", "from-broker", "both")


def _name(value: object, path: str) -> str:
    if not NAME_RE.fullmatch(string(value, path)):
        raise Invalid(path, f"invalid name {value!r}: use only letters, digits, '_', '.' and '-'")
    return value


def _broker_url(value: object, path: str) -> str:
    raw = string(value, path)
    try:
        u = urlsplit(raw)
        port = u.port
    except ValueError as exc:
        raise Invalid(path, f"bad URL {raw!r}: {exc}") from None
    if u.scheme not in ("amqp", "amqps"):
        raise Invalid(path, f"bad URL {raw!r}: scheme must be amqp or amqps")
    if not u.hostname:
        raise Invalid(path, f"bad URL {raw!r}: no host")
    if port == 0:
        raise Invalid(path, f"bad URL {raw!r}: port 0")
    return raw


def _exchange_name(value: object, path: str) -> str:
    if not string(value, path) or len(value.encode()) > 255:
        raise Invalid(path, "must be a non-empty exchange name of at most 255 bytes")
    return value


def _bridged_address(value: object, path: str) -> str:
    address = prefix(value, path)
    if len(address.encode()) > 200:     # queue names (address.<node id>) are at most 255 bytes
        size = len(address.encode())
        raise Invalid(path, f"address too long for a broker queue name ({size} bytes, max 200)")
    return address


@dataclass(frozen=True)
class BridgeConfig:
    """One mesh address served through the broker.

    ``address`` is an exact AMQP 1.0 address (links need concrete addresses; there are no prefixes).
    Broker objects are named after it: ``anycast`` a queue ``address``; ``multicast`` a fanout exchange
    ``address`` and, to feed the mesh, the queue ``address.<node id>`` bound to it; ``unicast`` a direct
    exchange ``address`` and a queue ``address`` bound with routing key ``address``.
    """

    address: str = declare(
        Check(_bridged_address, "address (≤ 200 bytes)"),
        "the exact mesh address served through the broker; queues and exchanges are named after it")
    semantics: str = declare(
        choice(SEMANTICS, "semantics"),
        "a queue / a fanout exchange / a direct exchange; multicast needs a multicast address, the others "
        "closest or balanced", "anycast")
    direction: str = declare(
        choice(DIRECTIONS, "direction"),
        "`both` stores while the mesh has no other consumer and feeds the mesh once it has", "both")
    durable: bool = declare(boolean, "durable queue / exchange, persistent messages", True)
    dead_letter_exchange: str | None = declare(
        Check(_exchange_name, "exchange name (≤ 255 bytes)"),
        "the queue's dead-letter exchange (x-dead-letter-exchange)", None)
    ttl: float | None = declare(
        number_at_least(0.001, "seconds"), "how long a message may wait in the queue (x-message-ttl)", None)
    # last field: from here on its name hides the function in this class body
    declare: bool = declare(boolean, "declare the queue / exchange (`false`: they must exist)", True)

    @property
    def to_broker(self) -> bool:
        return self.direction in ("to-broker", "both")

    @property
    def from_broker(self) -> bool:
        return self.direction in ("from-broker", "both")


@dataclass(frozen=True)
class BrokerConfig:
    """One AMQP 0-9-1 broker connection and the addresses bridged through it."""

    name: str = declare(
        Check(_name, "string"), "names the broker in logs, management and metrics; letters, digits, `_ . -`")
    url: str = declare(
        Check(_broker_url, "`amqp://` or `amqps://` URL"), "the broker", "amqp://guest:guest@127.0.0.1:5672/%2F")
    heartbeat: int = declare(
        int_in(0, 65535), "AMQP heartbeat in seconds, 0 = off; a silent broker is dropped after 1.5–1.75 "
                          "of them", 10)
    confirm_window: int = declare(
        int_in(1, 65535), "most unconfirmed publishes on this broker (all its addresses)", 250)
    addresses: tuple[BridgeConfig, ...] = declare(
        list_of(section(BridgeConfig), "addresses", at_least=1), "the mesh addresses bridged through it", (),
        required=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "addresses", tuple(self.addresses))


def check_brokers(brokers: Sequence[BrokerConfig], rules: Sequence[tuple[str, str]], default: str) -> None:
    """Names and addresses across brokers, and each address's semantics against its distribution."""
    from router.addressing import AddressRules

    table = AddressRules(list(rules), default)
    first_duplicate([b.name for b in brokers], lambda i: f"brokers[{i}].name", "broker name")
    seen: dict[str, str] = {}
    for i, broker in enumerate(brokers):
        for j, b in enumerate(broker.addresses):
            path = f"brokers[{i}].addresses[{j}]"
            if b.address in seen:
                raise Invalid(f"{path}.address", f"duplicate address {b.address!r} "
                                                 f"(already bridged by {seen[b.address]})")
            seen[b.address] = path
            dist = table.distribution(b.address)
            if (b.semantics == "multicast") != (dist == "multicast"):
                raise Invalid(f"{path}.semantics",
                              f"semantics {b.semantics!r} does not match the address's distribution "
                              f"{dist!r} (addresses.rules): multicast needs multicast, anycast and "
                              f"unicast need closest or balanced")
