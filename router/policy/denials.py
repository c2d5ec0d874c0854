"""Denials: counted per listener, vhost and group, and logged at most once a second per remote host.

The counters are exact (management's `policy` entity and `/metrics` read them). The log is not: after a
line for a host, further denials from that host within a second are only counted, and the next line for
it says how many were left out. So a client that retries a refused attach in a tight loop costs one log
line a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("router.policy")

KINDS = ("connections", "sessions", "links", "messages")
LOG_INTERVAL = 1.0          # seconds between two log lines for one remote host
MAX_HOSTS = 4096            # remembered hosts before the stale ones are forgotten


@dataclass(slots=True)
class Stats:
    """The counts of one (listener, vhost, group)."""

    connections: int = 0            # open now
    opened: int = 0                 # admitted since the node started
    denied_connections: int = 0
    denied_sessions: int = 0
    denied_links: int = 0
    denied_receivers: int = 0       # of denied_links: receivers (the others are senders)
    denied_messages: int = 0


class Denials:
    """Counters per (listener, vhost, group) and the rate-limited log."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.stats: dict[tuple[str, str, str], Stats] = {}
        self._logged: dict[str, tuple[float, int]] = {}     # host -> (time of its last line, left out since)

    def of(self, listener: str | None, vhost: str, group: str) -> Stats:
        key = (listener or "-", vhost, group)
        s = self.stats.get(key)
        if s is None:
            s = self.stats[key] = Stats()
        return s

    def deny(self, kind: str, listener: str | None, vhost: str, group: str, host: str, user: str,
             problem: str) -> None:
        """Count one denial of `kind` (KINDS) and log it unless `host` was logged less than a second ago."""
        s = self.of(listener, vhost, group)
        setattr(s, f"denied_{kind}", getattr(s, f"denied_{kind}") + 1)
        now = self.clock()
        last, left_out = self._logged.get(host, (None, 0))
        if last is not None and now - last < LOG_INTERVAL:
            self._logged[host] = (last, left_out + 1)
            return
        if len(self._logged) >= MAX_HOSTS:
            self._forget(now)
        more = f" (and {left_out} more denials from {host} not logged)" if left_out else ""
        log.warning("%s refused: user %s from %s (listener %s, vhost %s, group %s): %s%s",
                    kind.rstrip("s"), user, host or "?", listener or "-", vhost, group, problem, more)
        self._logged[host] = (now, 0)

    def _forget(self, now: float) -> None:
        for host, (last, _) in list(self._logged.items()):
            if now - last >= LOG_INTERVAL:
                del self._logged[host]
        if len(self._logged) >= MAX_HOSTS:
            self._logged.clear()
