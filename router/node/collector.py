"""Garbage collection paced by the node instead of by allocation bursts.

CPython runs a full (generation 2) collection whenever the objects that survived the young collections
exceed a quarter of the long-lived ones, and a full collection examines every tracked object. An address
storm creates about eight tracked objects per address (the address record, its lists, its remote
destinations), so 20,000 new addresses set off half a dozen full collections of up to 200,000 objects within
the second the storm lasts, 25-60 ms each (measured on this project's four-node mesh): every message in
flight waits for them, on every node of the mesh.

:class:`GcPacer` keeps full collections small and puts the large ones where they hurt least:

* every tick (``TICK`` seconds) it *freezes* the objects that survived since the last tick, once there are
  ``MIN_SURVIVORS`` of them (``gc.collect(1)``, the young generations only, then ``gc.freeze()``): those
  in the oldest generation already survived two young collections, so they are frozen without another
  look (a full ``gc.collect()`` there examined a tick's worth of a storm's survivors, 3-11 ms per tick on
  the survivors of a busy node's restart); CPython's own collections stay on and stay small for the same
  reason (frozen objects are never examined);
* objects freed by reference counting are freed whether frozen or not; only reference cycles that became
  garbage in the oldest generation or after being frozen wait, so once the frozen set doubled since the
  last full collection, or a wave of connections was freed, the pacer unfreezes everything and runs one
  full collection, at a *calm* moment: when the node spent less than ``CALM_BUSY`` of the last
  ``CALM_WINDOW`` seconds, and of the last tick, in its pump; failing that, after ``MAX_WAIT`` seconds.

The node calls :meth:`tick` from a timer with its clock and the seconds it has spent working so far
(the sum of its pump times, ``NodeServer.pump_latency.sum``); the pacer reads no clock itself.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque

log = logging.getLogger(__name__)

TICK = 0.1              # seconds between ticks (the node's timer)
MIN_SURVIVORS = 1000    # objects surviving since the last freeze before a collect-and-freeze is worth it
GROWTH = 1.0            # the frozen set grew by this share since the last full collection: time for one
CALM_WINDOW = 2.0       # seconds over which the node's load is judged
CALM_BUSY = 0.05        # share of CALM_WINDOW spent working below which the node is calm
MAX_WAIT = 60.0         # seconds a due full collection waits for calm at most
MIN_FULL_INTERVAL = 5.0  # seconds between two full collections at least


class GcPacer:
    """Collect-and-freeze every tick; full collections at calm moments (see the module docstring)."""

    def __init__(self) -> None:
        self.frozen_base = 0                # frozen objects right after the last full collection
        # frozen objects, counted as they are frozen (gc.get_freeze_count() walks them all: milliseconds
        # each call with a large table); objects freed since are still counted, until the next full one
        self.frozen = 0
        self.full_due_since: float | None = None   # when a full collection became due (None: not due)
        self.wave = False                   # connections were freed in a wave: a full collection is due
        self.last_full = -MIN_FULL_INTERVAL
        self._load: deque[tuple[float, float]] = deque()   # (time, busy seconds so far) over CALM_WINDOW
        # counters for the state line
        self.freezes = 0
        self.full_collections = 0
        self.freeze_seconds = 0.0
        self.full_seconds = 0.0
        self.longest_pause = 0.0

    def start(self) -> None:
        """Freeze what start-up allocated (modules, config): it stays alive as long as the node."""
        gc.collect()
        gc.freeze()
        self.frozen = self.frozen_base = gc.get_freeze_count()

    def stop(self) -> None:
        """Give the frozen objects back to the collector (an in-process node stopping in a test)."""
        gc.unfreeze()

    def connections_freed(self) -> None:
        """A wave of connections was freed: collect their cycles at the next calm moment."""
        self.wave = True

    def tick(self, now: float, busy: float) -> bool:
        """Collect-and-freeze the survivors of the last tick; run a due full collection if calm. True if
        a full collection ran (memory it freed may be worth giving back to the system)."""
        self._load.append((now, busy))
        while len(self._load) > 1 and now - self._load[0][0] > CALM_WINDOW:
            self._load.popleft()
        if len(gc.get_objects(2)) >= MIN_SURVIVORS:
            self._freeze()
        grown = self.frozen > self.frozen_base * (1 + GROWTH)
        if self.full_due_since is None and (self.wave or grown):
            self.full_due_since = now
        due = self.full_due_since
        if due is not None and now - self.last_full >= MIN_FULL_INTERVAL and (
                self.calm(now) or now - due >= MAX_WAIT):
            self._full(now)
            return True
        return False

    def calm(self, now: float) -> bool:
        """The node spent less than CALM_BUSY of the last CALM_WINDOW seconds working."""
        load = self._load
        if len(load) < 2 or now - load[0][0] < CALM_WINDOW / 2:
            return False                    # not enough history yet
        (t0, b0), (tp, bp), (t1, b1) = load[0], load[-2], load[-1]
        return (b1 - b0) < CALM_BUSY * (t1 - t0) and (b1 - bp) < CALM_BUSY * (t1 - tp)

    def _freeze(self) -> None:
        t0 = time.perf_counter()
        gc.collect(1)                       # the young ones; the oldest generation's are frozen as they are
        survivors = len(gc.get_objects(2))  # everything the collection left is in the oldest generation
        gc.freeze()
        self.frozen += survivors
        self._paused(time.perf_counter() - t0, full=False)

    def _full(self, now: float) -> None:
        t0 = time.perf_counter()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        took = time.perf_counter() - t0
        self._paused(took, full=True)
        self.frozen = self.frozen_base = gc.get_freeze_count()
        self.full_due_since = None
        self.wave = False
        self.last_full = now
        log.debug("full garbage collection: %d objects freed, %d kept, %.1f ms", collected, self.frozen_base,
                  1000 * took)

    def _paused(self, seconds: float, full: bool) -> None:
        if full:
            self.full_collections += 1
            self.full_seconds += seconds
        else:
            self.freezes += 1
            self.freeze_seconds += seconds
        self.longest_pause = max(self.longest_pause, seconds)

    def snapshot(self) -> dict[str, float | int]:
        """Counters for the state line: collections run and the time they took."""
        return {"frozen": self.frozen, "freezes": self.freezes,
                "full_collections": self.full_collections, "freeze_ms": round(1000 * self.freeze_seconds, 1),
                "full_ms": round(1000 * self.full_seconds, 1),
                "longest_pause_ms": round(1000 * self.longest_pause, 1)}
