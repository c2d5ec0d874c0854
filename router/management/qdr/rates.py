"""Per-link settlement rates (qdrouterd's ``settleRate``), from the agent's once-a-second sample of links.

A link's rate is the deliveries it settled as accepted or rejected in the last `DEPTH` samples, divided by
the seconds those samples cover (qdrouterd averages the same outcomes over its last 5 seconds). A link
younger than one sample has rate 0.
"""

from __future__ import annotations

from collections import deque
from typing import Any

DEPTH = 5


class LinkRates:
    """The last `DEPTH` + 1 (time, settled total) samples of every link."""

    def __init__(self) -> None:
        self._samples: dict[Any, deque[tuple[float, int]]] = {}

    def sample(self, now: float, links: Any) -> None:
        """Record `now` and each link's accepted + rejected total; forget links that are gone."""
        samples: dict[Any, deque[tuple[float, int]]] = {}
        old = self._samples
        for rec in links:
            outcomes = getattr(rec, "outcomes", None)
            if outcomes is None:
                continue
            seen = old.get(rec)
            if seen is None:
                seen = deque(maxlen=DEPTH + 1)
            seen.append((now, outcomes[0] + outcomes[1]))
            samples[rec] = seen
        self._samples = samples

    def rate(self, rec: Any) -> int:
        """Settlements per second of `rec` over its last samples (0 before it has two)."""
        seen = self._samples.get(rec)
        if seen is None or len(seen) < 2:
            return 0
        (t0, n0), (t1, n1) = seen[0], seen[-1]
        return int((n1 - n0) / (t1 - t0)) if t1 > t0 else 0
