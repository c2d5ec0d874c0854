"""Giving freed memory back to the system after many connections closed.

Each connection holds ~20 KiB of Proton and Python state spread over the heap; when thousands close, glibc
keeps the freed chunks (the heap's top cannot shrink past live chunks above them), so RSS stays at its peak
and the next wave of connections grows it further. ``malloc_trim(0)`` returns the free pages in the middle
of the heap too. It costs a few milliseconds, so :class:`Trimmer` calls it only once ``THRESHOLD``
connections were freed since the last call, from the node's 1-second timer, and once more when such a wave
ends (no connection freed for a whole tick), for the connections freed after its last trim. Without glibc
(another libc) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

THRESHOLD = 500       # connections freed before a trim is worth its milliseconds


def physical_memory() -> int | None:
    """Bytes of physical memory (for the default memory budget), None if the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


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
        self._seen = 0              # `freed` at the previous tick
        self._in_wave = False       # trimmed for a wave that may not be over: trim its tail too
        self._trim = _malloc_trim()

    def freed_connection(self) -> None:
        self.freed += 1

    def trim(self) -> None:
        """Trim now (after a full garbage collection freed what a wave of connections left in cycles)."""
        if self._trim is not None:
            self.trims += 1
            self._trim(0)

    def maybe_trim(self) -> bool:
        """Trim if ``threshold`` connections were freed since the last trim, or if a wave that was trimmed
        for has ended with some freed since; True if it did."""
        freed, previous = self.freed, self._seen
        self._seen = freed
        if self._trim is None or not freed:
            return False
        if freed >= self.threshold:
            self._in_wave = True
        elif self._in_wave and freed == previous:      # nothing freed for a tick: the wave's tail
            self._in_wave = False
        else:
            return False
        self.freed = self._seen = 0
        self.trims += 1
        self._trim(0)
        return True
