"""router.node.collector: survivors are frozen tick by tick, full collections wait for a calm node.

These use the real collector (the process's own gc module), with the node's clock and busy time given.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from router.node import collector
from router.node.collector import GcPacer


class Node:
    """Something that lives in reference cycles, like the node's records."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def pacer() -> Iterator[GcPacer]:
    p = GcPacer()
    p.start()
    try:
        yield p
    finally:
        p.stop()
        gc.collect()


def run(p: GcPacer, start: float, seconds: float, busy_share: float,
        busy0: float = 0.0) -> tuple[float, float]:
    """Tick every TICK for `seconds`, the node busy `busy_share` of the time; returns (now, busy)."""
    now, busy = start, busy0
    for _ in range(round(seconds / collector.TICK)):
        now += collector.TICK
        busy += busy_share * collector.TICK
        p.tick(now, busy)
    return now, busy


def test_survivors_are_frozen_at_the_next_tick_and_young_collections_stay_small(pacer):
    frozen = gc.get_freeze_count()
    keep = [Node() for _ in range(3 * collector.MIN_SURVIVORS)]
    gc.collect()                                # now long-lived: what a storm leaves behind
    assert len(gc.get_objects(2)) >= len(keep)
    pacer.tick(1.0, 0.0)
    assert gc.get_freeze_count() >= frozen + len(keep)
    assert len(gc.get_objects(2)) < collector.MIN_SURVIVORS   # nothing left for a full collection to scan
    assert pacer.freezes == 1


def test_a_due_full_collection_waits_for_calm_then_frees_frozen_cycles(pacer):
    garbage = [Node() for _ in range(2 * max(gc.get_freeze_count(), collector.MIN_SURVIVORS))]
    probe = weakref.ref(garbage[0])
    gc.collect()
    pacer.tick(0.1, 0.0)                        # frozen: the frozen set more than doubled
    del garbage                                 # cycles: reference counting cannot free them
    assert probe() is not None
    now, busy = run(pacer, 0.1, 10.0, busy_share=0.5)      # a busy node: the collection waits
    assert pacer.full_due_since is not None and pacer.full_collections == 0
    assert probe() is not None
    run(pacer, now, 3.0, busy_share=0.0, busy0=busy)       # calm: it runs once
    assert pacer.full_collections == 1 and pacer.full_due_since is None
    assert probe() is None


def test_a_node_that_is_never_calm_gets_its_full_collection_after_max_wait(pacer):
    pacer.connections_freed()                   # a wave of connections freed: due without growth
    now, busy = run(pacer, 0.0, collector.MAX_WAIT - 1.0, busy_share=0.9)
    assert pacer.full_collections == 0
    run(pacer, now, 2.0, busy_share=0.9, busy0=busy)
    assert pacer.full_collections == 1 and not pacer.wave


def test_full_collections_are_spaced_and_counted_in_the_snapshot(pacer):
    pacer.connections_freed()
    now, busy = run(pacer, 0.0, 3.0, busy_share=0.0)
    assert pacer.full_collections == 1
    first = pacer.last_full
    pacer.connections_freed()
    now, busy = run(pacer, now, first + collector.MIN_FULL_INTERVAL - 0.5 - now, busy_share=0.0, busy0=busy)
    assert pacer.full_collections == 1          # not twice within MIN_FULL_INTERVAL
    run(pacer, now, 1.0, busy_share=0.0, busy0=busy)
    assert pacer.full_collections == 2
    snap = pacer.snapshot()
    assert snap["full_collections"] == 2
    # re-counted at the full collection: frozen objects freed since (another thread of the test process;
    # 5 of ~273,000 once) make the real count a little lower, never higher
    assert 0 <= snap["frozen"] - gc.get_freeze_count() <= 1000
    assert snap["longest_pause_ms"] >= 0


def test_a_tick_freezes_the_oldest_generation_without_examining_it(pacer):
    """The oldest generation's objects survived two young collections: a tick freezes them as they are (a
    full collection there cost 3-11 ms per tick during a storm); cycles among them that are garbage wait
    for the next full collection, and it frees them."""
    garbage = [Node() for _ in range(2 * max(gc.get_freeze_count(), collector.MIN_SURVIVORS))]
    probe = weakref.ref(garbage[0])
    gc.collect()                                # now in the oldest generation
    del garbage                                 # cycles: reference counting cannot free them
    pacer.tick(0.1, 0.0)
    assert probe() is not None                  # frozen, not examined
    assert len(gc.get_objects(2)) < collector.MIN_SURVIVORS
    assert pacer.full_due_since is not None     # the frozen set more than doubled: a full one is due
    run(pacer, 0.1, 3.0, busy_share=0.0)        # calm: the full collection runs, and frees them
    assert pacer.full_collections == 1 and probe() is None
