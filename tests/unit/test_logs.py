"""router.logs.LogEvery: one line per key per interval, bounded keys, pending counts written at stop."""

from __future__ import annotations

import logging

from router.logs import LogEvery


def test_log_every_one_line_per_key_per_interval(caplog):
    every = LogEvery("test.every", 10.0, lambda key, n, last: ("%s: %d (last %s)", key, n, last))
    with caplog.at_level(logging.WARNING, logger="test.every"):
        for i in range(100):
            every.note("h1", i * 0.01, i)          # 100 in one second: the first line only
        every.note("h2", 0.5, "x")
        every.flush(5.0)                           # the interval has not passed
        every.flush(10.5)                          # h1's 99 others; h2 had none: forgotten
        every.flush(21.0)                          # h1 quiet for an interval: forgotten
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["h1: 1 (last 0)", "h2: 1 (last x)", "h1: 99 (last 99)"]
    assert every._keys == {}


def test_log_every_bounded_keys(caplog):
    every = LogEvery("test.every2", 10.0, lambda key, n, last: ("%s %d", key, n), max_keys=3)
    for i in range(1000):
        every.note(f"host{i}", 0.0)
    assert len(every._keys) == 3


def test_log_every_drain_writes_what_is_pending_when_the_process_stops(caplog):
    every = LogEvery("test.every3", 60.0, lambda key, n, last: ("%s: %d (last %s)", key, n, last))
    with caplog.at_level(logging.WARNING, logger="test.every3"):
        for i in range(5):
            every.note("h1", i, i)                  # the first line, then 4 counted
        every.note("h2", 1, "x")                    # its first line: nothing pending
        every.drain()
        every.drain()                               # nothing twice
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["h1: 1 (last 0)", "h2: 1 (last x)", "h1: 4 (last 4)"]
