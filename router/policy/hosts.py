"""Remote hosts of a group: IP addresses, CIDR ranges and ``localhost`` (the loopback networks).

The remote host of a connection is the IP address it connected from (an IPv4-mapped IPv6 address
counts as the IPv4 one). Host names other than ``localhost`` are not accepted: a policy does not
depend on DNS.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

LOOPBACK: tuple[Network, ...] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class HostError(ValueError):
    """An entry that is neither an address, a CIDR range nor ``localhost``."""


def parse_network(entry: object) -> tuple[Network, ...]:
    """The networks an entry of `remote_hosts` stands for; raises HostError."""
    if not isinstance(entry, str):
        raise HostError(f"expected a string (an address, a CIDR range or localhost), got "
                        f"{type(entry).__name__}")
    if entry.strip().lower() == "localhost":
        return LOOPBACK
    try:
        return (ipaddress.ip_network(entry.strip(), strict=False),)
    except ValueError:
        raise HostError(f"{entry!r} is not an IP address, a CIDR range (10.0.0.0/8) or localhost") from None


def parse_address(host: str) -> Address | None:
    """The IP address of a peer ``ip:port`` (the node's form, also for IPv6: ``::1:5672``) or of a bare
    address; None if it is not one."""
    for candidate in (host.rpartition(":")[0], host):
        if not candidate:
            continue
        try:
            ip = ipaddress.ip_address(candidate.strip("[]").split("%", 1)[0])
        except ValueError:
            continue
        mapped = getattr(ip, "ipv4_mapped", None)
        return mapped if mapped is not None else ip
    return None


def is_loopback(ip: Address | None) -> bool:
    return ip is not None and ip.is_loopback


class HostSet:
    """The remote hosts a group admits (None in the config: any host)."""

    def __init__(self, entries: Iterable[str] | None) -> None:
        self.networks: tuple[Network, ...] | None = None
        if entries is not None:
            self.networks = tuple(n for e in entries for n in parse_network(e))

    def admits(self, ip: Address | None) -> bool:
        if self.networks is None:
            return True
        return ip is not None and any(ip.version == n.version and ip in n for n in self.networks)

    def overlaps(self, other: HostSet) -> Network | None:
        """A network both admit (None: they are disjoint); any host is ``0.0.0.0/0``."""
        if self.networks is None and other.networks is None:
            return ipaddress.ip_network("0.0.0.0/0")
        if self.networks is None or other.networks is None:
            some = self.networks if other.networks is None else other.networks
            return some[0] if some else None
        for a in self.networks:
            for b in other.networks:
                if a.version == b.version and a.overlaps(b):
                    return a if a.prefixlen >= b.prefixlen else b
        return None
