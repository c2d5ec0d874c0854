"""Counters shared by a benchmark's client threads: what each flow did and which errors it met."""

from __future__ import annotations

import threading
from collections import Counter


class Tally:
    """Counts and errors by key, under one lock (the subclass may take the lock for its own tables)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.errors: Counter = Counter()

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def error(self, key: str, exc: BaseException) -> None:
        with self.lock:
            self.errors[f"{key}: {type(exc).__name__}"] += 1

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)
