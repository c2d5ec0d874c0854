"""Reconnect delays: 0.1 s doubling to 5 s, and one log line per failure streak."""

from __future__ import annotations

import logging

FIRST_DELAY = 0.1
MAX_DELAY = 5.0


class Backoff:
    """Delays between connection attempts; logs the first failure of a streak and the recovery."""

    def __init__(self, what: str, log: logging.Logger, first: float = FIRST_DELAY,
                 maximum: float = MAX_DELAY) -> None:
        self.what = what
        self.log = log
        self.first = first
        self.maximum = maximum
        self.delay = first
        self.failures = 0

    def failed(self, why: str) -> float:
        """One more failed attempt; returns the delay before the next one."""
        if self.failures == 0:
            self.log.warning("%s: %s; retrying (%.1f s doubling to %.0f s)", self.what, why, self.first,
                             self.maximum)
        else:
            self.log.debug("%s: attempt %d failed: %s", self.what, self.failures + 1, why)
        self.failures += 1
        delay, self.delay = self.delay, min(self.delay * 2, self.maximum)
        return delay

    def succeeded(self) -> None:
        if self.failures:
            self.log.info("%s: connected after %d failed attempts", self.what, self.failures)
        self.failures = 0
        self.delay = self.first
