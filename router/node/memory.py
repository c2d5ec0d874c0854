"""Giving freed memory back to the system after many connections closed.

Each connection holds ~20 KiB of Proton and Python state spread over the heap; when thousands close, glibc
keeps the freed chunks (the heap's top cannot shrink past live chunks above them), so RSS stays at its peak
and the next wave of connections grows it further. ``malloc_trim(0)`` returns the free pages in the middle
of the heap too. It costs a few milliseconds, so :class:`Trimmer` calls it only once ``THRESHOLD``
connections were freed since the last call, from the node's 1-second timer. Without glibc (another libc) it
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

THRESHOLD = 500       # connections freed before a trim is worth its milliseconds


def _malloc_trim() -> object | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class Trimmer:
    """Counts freed connections; ``maybe_trim()`` trims the heap once enough were freed."""

    def __init__(self, threshold: int = THRESHOLD) -> None:
        self.threshold = threshold
        self.freed = 0
        self.trims = 0
        self._trim = _malloc_trim()

    def freed_connection(self) -> None:
        self.freed += 1

    def maybe_trim(self) -> bool:
        """Trim if ``threshold`` connections were freed since the last trim; True if it did."""
        if self.freed < self.threshold or self._trim is None:
            return False
        self.freed = 0
        self.trims += 1
        self._trim(0)
        return True
