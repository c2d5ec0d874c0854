"""A fixed-bucket histogram of durations, cheap enough to update on the forwarding path."""

from __future__ import annotations

from bisect import bisect_left

# forwarding latency (input read -> resulting output written), seconds
FORWARDING_BOUNDS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                     0.025, 0.05, 0.1, 0.25, 1.0)


class Histogram:
    """Counts of observations per bucket (`counts[i]`: values <= bounds[i]; the last: the rest) and sum.

    Hot paths may update it inline: ``h.sum += v; h.counts[bisect_left(h.bounds, v)] += 1``.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        self.counts[bisect_left(self.bounds, value)] += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it) for every bucket, the last bound being +inf."""
        out = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out
