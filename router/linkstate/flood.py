"""Duplicate suppression for flooded control messages (RA and differential MAU).

A flooded message reaches a node once per path; only the first copy is processed and flooded on.
Copies are recognised by a key read from the raw body (before validation, so duplicates cost little):
an RA by ``(id, instance, ls_seq, mobile_seq)`` - periodic RAs repeat that key, so a copy is "new" again
once ``window`` has passed - and a diff MAU by ``(id, instance, mobile_seq)``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from router.linkstate.config import due
from router.linkstate.messages import MAU, RA


def flood_key(opcode: str, body: Any) -> tuple[Hashable, ...] | None:
    """The duplicate-detection key of a flooded message, or None when it has none."""
    try:
        if opcode == RA:
            key = (RA, body["id"], body["instance"], body["ls_seq"], body["mobile_seq"])
        elif opcode == MAU and body.get("exist") is None:
            key = (MAU, body["id"], body["instance"], body["mobile_seq"])
        else:
            return None
        hash(key)
    except (TypeError, KeyError, AttributeError, ValueError):  # ValueError: a writable memoryview
        return None  # malformed: let validation report it
    return key


class FloodFilter:
    """Remembers when each flooded key was first seen."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, float] = {}

    def first(self, key: Hashable, now: float, window: float) -> bool:
        """True if ``key`` was not seen within the last ``window`` seconds (and remember it now)."""
        seen = self._seen.get(key)
        if seen is not None and not due(now, seen, window):
            return False
        self._seen[key] = now
        return True

    def seen(self, key: Hashable, now: float, window: float) -> bool:
        """True if ``key`` was seen within the last ``window`` seconds (nothing is remembered)."""
        seen = self._seen.get(key)
        return seen is not None and not due(now, seen, window)

    def prune(self, now: float, max_age: float) -> None:
        """Forget keys first seen more than ``max_age`` ago."""
        stale = [key for key, seen in self._seen.items() if now - seen > max_age]
        for key in stale:
            del self._seen[key]

    def __len__(self) -> int:
        return len(self._seen)
