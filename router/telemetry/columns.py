"""Delivery records in columns: what the node's hot path fills and hands to the writer whole.

A record costs the hot path one ``list.append`` of an int it already has, its size (no tuple, nothing
for the garbage collector to track). The other fields are the same for long runs of records, so they
are kept as runs:

* route, outcome and arrival: ``routes[k]``, ``codes[k]`` and ``arrivals[k]`` apply to the records from
  ``starts[k]`` up to ``starts[k + 1]`` (or the end). Deliveries mostly settle in the order they came,
  on one address, with one outcome, and every delivery forwarded in one batch of events has the same
  arrival stamp;
* settled: ``times[k]`` applies to the records before ``ends[k]`` (and from ``ends[k - 1]``): one time
  stamp per batch of events.

The writer thread turns a batch into Arrow columns with a few C-level calls (parquet.delivery_columns).
"""

from __future__ import annotations


class DeliveryColumns:
    """One batch of delivery records in columns (see the module docstring).

    Filled by one thread (the node's event loop), then handed to the writer and never touched again.
    Complete when ``ends[-1] == len(sizes)``. Only the last route/outcome/arrival run may be empty.
    """

    __slots__ = ("sizes", "starts", "routes", "codes", "arrivals", "ends", "times")

    def __init__(self, rid: int = 0, outcome: int = 0, arrival: float | None = None) -> None:
        self.sizes: list[int] = []
        self.starts: list[int] = [0]
        self.routes: list[int] = [rid]
        self.codes: list[int] = [outcome]
        self.arrivals: list[float | None] = [arrival]
        self.ends: list[int] = []
        self.times: list[float] = []

    def __len__(self) -> int:
        return len(self.sizes)

    def run(self, rid: int, outcome: int, arrival: float) -> None:
        """The records appended from now on have route id ``rid``, ``outcome`` and ``arrival``."""
        n = len(self.sizes)
        if self.starts[-1] == n:
            self.routes[-1] = rid
            self.codes[-1] = outcome
            self.arrivals[-1] = arrival
        else:
            self.starts.append(n)
            self.routes.append(rid)
            self.codes.append(outcome)
            self.arrivals.append(arrival)

    def settle(self, t: float) -> None:
        """The records appended since the last call were settled at ``t``."""
        n = len(self.sizes)
        if n and (not self.ends or self.ends[-1] < n):
            self.ends.append(n)
            self.times.append(t)

    def add(self, rid: int, outcome: int, size: int, arrival: float) -> None:
        """Append one record (the slow way: the node's hot path inlines this)."""
        if rid != self.routes[-1] or outcome != self.codes[-1] or arrival != self.arrivals[-1]:
            self.run(rid, outcome, arrival)
        self.sizes.append(size)
