"""The hosts of a transport URL (``amqp://u:p@n1:5672,u:p@n2:5672/vhost``), in failover order.

The first connection goes to a host picked at random (as 14.x does, so a service's processes spread over
the nodes); when a connection fails or is lost, the next host is tried, round the list.
Each host keeps its own credentials (oslo's TransportURL gives a user name and password per
host). ``amqps://`` (or ``ssl = true``) means TLS on every host; the default port is then 5671.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Host:
    """One node of the URL."""

    hostname: str
    port: int
    username: str | None = None
    password: str | None = None

    def __str__(self) -> str:
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{host}:{self.port}"


class Hosts:
    """The URL's hosts and the one in use; :meth:`next` moves on (failover)."""

    def __init__(self, url: Any, tls: bool, default_realm: str = "") -> None:
        default_port = 5671 if tls else 5672
        entries = []
        for h in url.hosts or []:
            user = h.username or None
            if user and default_realm and "@" not in user:
                user = f"{user}@{default_realm}"
            entries.append(Host(h.hostname or "localhost", int(h.port or default_port), user, h.password))
        self.entries: tuple[Host, ...] = tuple(entries) or (Host("localhost", default_port),)
        self.virtual_host: str | None = url.virtual_host or None
        self._i = random.randrange(len(self.entries))      # noqa: S311 - load spreading, not security

    @property
    def current(self) -> Host:
        return self.entries[self._i]

    def next(self) -> Host:
        self._i = (self._i + 1) % len(self.entries)
        return self.current

    def __str__(self) -> str:
        return ", ".join(str(h) for h in self.entries)
