"""The storm clients' redial waits (tests/support/storm.py): fixed by default, growing with a backoff (as
Proton's reconnect does with 2), never over MAX_RETRY."""

import time

import pytest

from tests.support.storm import MAX_RETRY, Storm


@pytest.mark.parametrize(("backoff", "expected"), [(1.0, [0.1] * 8),
                                                   (2.0, [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, MAX_RETRY])])
def test_each_refused_dial_waits_as_the_backoff_says(backoff, expected):
    storm = Storm(1, 1, retry=0.1, backoff=backoff)
    c = storm.clients[0]
    for want in expected:
        before = time.monotonic()
        storm._refused(c)
        when, who = storm.waiting.pop()
        assert who is c
        assert 0.5 * want <= when - before <= 1.5 * want + 0.01      # ±50% jitter
    storm.close()
