"""Memory and CPU of node processes, read from /proc."""

from __future__ import annotations

import os
import time

from tests.support.waiting import pump_for


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS from /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def assert_not_spinning(pid: int, duration: float = 1.0, max_share: float = 0.5) -> None:
    """The process (an idle node) uses less than ``max_share`` of a CPU over ``duration`` s while
    the clients keep being pumped."""
    before = cpu_seconds(pid)
    pump_for(duration)
    used = cpu_seconds(pid) - before
    assert used < max_share * duration, f"node busy: {used:.2f} s CPU in {duration:.1f} s while idle"


class RssSampler:
    """RSS of some processes (node pids), sampled at most every ``interval`` s by :meth:`poll`."""

    def __init__(self, pids: dict[str, int], interval: float = 0.5):
        self.pids = pids
        self.interval = interval
        self.samples: dict[str, list[tuple[float, int]]] = {name: [] for name in pids}
        self._next = 0.0
        self.t0 = time.monotonic()

    def poll(self) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            for name, pid in self.pids.items():
                try:
                    self.samples[name].append((now - self.t0, rss_bytes(pid)))
                except (OSError, RuntimeError):
                    pass
        return True

    def window(self, name: str, start: float, end: float) -> list[int]:
        """The samples of ``name`` taken between fractions ``start`` and ``end`` of the run so far."""
        s = self.samples[name]
        if not s:
            return []
        span = s[-1][0] - s[0][0]
        lo, hi = s[0][0] + start * span, s[0][0] + end * span
        return [v for t, v in s if lo <= t <= hi]
