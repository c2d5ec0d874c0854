"""Password guessing costs the guesser: per-remote-host failure tracking and fair queueing of checks.

A PLAIN check costs the node one scrypt hash (~50 ms, 16 MiB); the node runs them one at a time in a
worker. Without care, one host sending wrong passwords fills the queue and every other host's login
waits behind it or fails. :class:`CheckQueue` (sans-IO, given the time) keeps:

- a queue per remote host, served round robin: a host with many attempts waiting gets one check in
  turn, so another host's check waits for at most about one check per busy host;
- per host, failures in a row: after ``free_failures`` of them the host's next check starts only after a
  delay that doubles with each further failure, from ``base_delay`` up to ``max_delay``; a success resets
  it, and a host quiet for ``forget_after`` seconds is forgotten;
- at most ``max_queued`` attempts waiting per host: more are failed at once without a hash (counted);
- at most ``max_hosts`` hosts remembered (the oldest quiet one is forgotten first), so memory stays
  bounded whatever addresses connect.

The caller (router.adapter.sasl) asks :meth:`next_ready` for the attempt to check now, or the time to
wake up at, and reports each result with :meth:`result`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

FREE_FAILURES = 3       # failures in a row from one host before its checks are delayed
BASE_DELAY = 0.25       # seconds: the first delay, doubled at each further failure
MAX_DELAY = 8.0         # seconds: the longest delay
MAX_QUEUED = 4          # attempts of one host waiting at once; more fail at once (no hash)
MAX_HOSTS = 10_000      # hosts remembered
FORGET_AFTER = 600.0    # seconds without a failure after which a host starts afresh


@dataclass
class HostState:
    """What the node remembers of one remote host."""

    failures: int = 0                # failed checks in a row
    not_before: float = 0.0          # its next check starts no earlier than this
    last: float = 0.0                # when it last failed or queued
    queue: deque = field(default_factory=deque)


class CheckQueue:
    """Per-host queues of password checks, served round robin, with growing delays for failing hosts."""

    def __init__(self, free_failures: int = FREE_FAILURES, base_delay: float = BASE_DELAY,
                 max_delay: float = MAX_DELAY, max_queued: int = MAX_QUEUED, max_hosts: int = MAX_HOSTS,
                 forget_after: float = FORGET_AFTER) -> None:
        self.free_failures = free_failures
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_queued = max_queued
        self.max_hosts = max_hosts
        self.forget_after = forget_after
        self.hosts: OrderedDict[str, HostState] = OrderedDict()   # least recently active first
        self._turn: deque[str] = deque()          # hosts with attempts waiting, in serving order

    def __len__(self) -> int:
        """Attempts waiting."""
        return sum(len(self.hosts[h].queue) for h in self._turn)

    def _host(self, host: str, now: float) -> HostState:
        st = self.hosts.get(host)
        if st is not None and not st.queue and now - st.last > self.forget_after:
            st.failures, st.not_before = 0, 0.0
        if st is None:
            while len(self.hosts) >= self.max_hosts:
                oldest = next((h for h, s in self.hosts.items() if not s.queue), None)
                if oldest is None:
                    break
                del self.hosts[oldest]
            st = self.hosts[host] = HostState()
        self.hosts.move_to_end(host)
        return st

    def add(self, host: str, attempt: Any, now: float) -> bool:
        """Queue `attempt` from `host`; False: too many of that host's are waiting (fail it now)."""
        st = self._host(host, now)
        st.last = now
        if len(st.queue) >= self.max_queued:
            return False
        if not st.queue:
            self._turn.append(host)
        st.queue.append(attempt)
        return True

    def delay(self, host: str) -> float:
        """The delay the host's next check waits after its last failure (0 below the free failures)."""
        st = self.hosts.get(host)
        if st is None or st.failures < self.free_failures:
            return 0.0
        return min(self.max_delay, self.base_delay * 2 ** (st.failures - self.free_failures))

    def next_ready(self, now: float) -> tuple[Any, float | None]:
        """`(attempt, None)`: check this one now (its host goes to the back of the turn); `(None, t)`:
        nothing may start before time `t`; `(None, None)`: nothing is waiting."""
        wake = None
        for _ in range(len(self._turn)):
            host = self._turn.popleft()
            st = self.hosts[host]
            if st.not_before <= now:
                attempt = st.queue.popleft()
                if st.queue:
                    self._turn.append(host)
                return attempt, None
            self._turn.append(host)
            wake = st.not_before if wake is None else min(wake, st.not_before)
        return None, wake

    def result(self, host: str, ok: bool, now: float) -> None:
        """The check of an attempt from `host` is done."""
        st = self._host(host, now)
        if ok:
            st.failures, st.not_before = 0, 0.0
            return
        st.failures += 1
        st.last = now
        st.not_before = now + self.delay(host)

    def drop(self, attempt: Any) -> None:
        """Forget a waiting attempt (its connection went away)."""
        for host in list(self._turn):
            st = self.hosts[host]
            if attempt in st.queue:
                st.queue.remove(attempt)
                if not st.queue:
                    self._turn.remove(host)
                return
