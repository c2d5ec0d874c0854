"""Sampling a process from /proc (CPU seconds, RSS), an RSS sampler thread, and the statistics the
tables use (medians, exact percentiles), with the load average to note beside a figure."""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Sequence
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat; 0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` in bytes (/proc/PID/status VmRSS; 0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rss_mib(pid: int) -> float:
    return rss_bytes(pid) / 2**20


class RssSampler(threading.Thread):
    """Samples the RSS of ``pids`` every ``period`` seconds until :meth:`stop`; ``peak`` per pid (bytes)."""

    def __init__(self, pids: Sequence[int], period: float = 0.1) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pids, self.period = list(pids), period
        self.peak = {p: rss_bytes(p) for p in self.pids}
        self.first = dict(self.peak)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.period):
            for p in self.pids:
                self.peak[p] = max(self.peak[p], rss_bytes(p))

    def stop(self) -> dict[int, int]:
        """Stop sampling; the peak RSS of each pid."""
        self._halt.set()
        self.join()
        return self.peak


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that are not None (None if there are none)."""
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def percentile(values: Sequence[float], q: float) -> float:
    """Exact percentile (``q`` in 0..1), linear interpolation between the closest ranks (numpy's
    default); the values need not be sorted."""
    s = sorted(values)
    if not s:
        raise ValueError("percentile of no values")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (the box is shared: note them beside a figure)."""
    return os.getloadavg()


def nearest_rank(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): the smallest value with at least q% of the values at or
    below it (what the RPC benchmarks report)."""
    s = sorted(values)
    if not s:
        raise ValueError("percentile of no values")
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]
