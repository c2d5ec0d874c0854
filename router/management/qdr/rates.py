"""Per-link settlement rates (qdrouterd's ``settleRate``): accepted and rejected settlements per second.

Every `DEPTH` seconds the agent's link sample takes a snapshot of each link's accepted + rejected total
(one dict of the links, so a node of 100,000 links pays ~15 ms every 5 s, not a per-link history every
second). A link's rate is its total now minus its total in the snapshot before the latest one, divided
by the seconds in between: the average of the last 5 to 10 seconds (qdrouterd averages the same outcomes
over its last 5 seconds). A link younger than that snapshot has rate 0.
"""

from __future__ import annotations

import time
from typing import Any

DEPTH = 5.0


def settled(rec: Any) -> int:
    outcomes = rec.outcomes
    return outcomes[0] + outcomes[1]


class LinkRates:
    """The two latest snapshots of the links' settled totals."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._old: tuple[float, dict[Any, int]] | None = None
        self._new: tuple[float, dict[Any, int]] | None = None

    def sample(self, now: float, links: Any) -> None:
        """Take a snapshot of `links` if the latest is `DEPTH` seconds old (or there is none)."""
        if self.due(now):
            self.take(now, {rec: settled(rec) for rec in links if getattr(rec, "outcomes", None) is not None})

    def due(self, now: float) -> bool:
        """The latest snapshot is `DEPTH` seconds old (or there is none)."""
        return self._new is None or now - self._new[0] >= DEPTH

    def take(self, now: float, totals: dict[Any, int]) -> None:
        """`totals` (link -> `settled(link)`, as of `now`) becomes the latest snapshot."""
        self._old = self._new
        self._new = (now, totals)

    def rate(self, rec: Any) -> int:
        """Settlements per second of `rec` since the snapshot before the latest one (0: it was not in it)."""
        base = self._old or self._new
        if base is None:
            return 0
        then, totals = base
        seconds = self.clock() - then
        before = totals.get(rec)
        if before is None or seconds <= 0:
            return 0
        return int((settled(rec) - before) / seconds)
