"""File descriptors of the test process: a module that leaves some open fails its last test.

The clients of :mod:`tests.support.waiting` wait with ``select()``, which cannot take a descriptor
above 1023: a suite that leaks a few sockets per module ends, an hour later, with every test failing
``filedescriptor out of range in select()`` far from the module that leaked. :class:`FdWatch` counts
``/proc/self/fd`` when a module's first test starts and again after its last teardown (the module's
fixtures are gone by then) and names what a module left open beyond :data:`ALLOWED`.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

# what a module may keep open past its teardown: the descriptors of session-scoped fixtures (the
# Spark session of tests/analytics: its gateway sockets and the JVM's pipes) and of lazily opened
# library state (/dev/urandom, a logging file, inotify of a cache)
ALLOWED = 24


def open_fds() -> dict[int, str]:
    """Every open descriptor of this process and what it points at (``socket:[...]``, a path)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return found


def kind(target: str) -> str:
    """``socket``, ``pipe``, ``anon_inode:...`` or the path of what a descriptor points at."""
    for prefix in ("socket:", "pipe:"):
        if target.startswith(prefix):
            return prefix[:-1]
    return target


@dataclass
class FdWatch:
    """The count at a module's start; :meth:`leaked` says what is open beyond it at its end."""

    allowed: int = ALLOWED
    module: str | None = None
    before: dict[int, str] = field(default_factory=dict)

    def start(self, module: str) -> None:
        if module != self.module:
            self.module = module
            self.before = open_fds()

    def leaked(self) -> str | None:
        """None, or the text of a failure naming the module and what it left open."""
        now = open_fds()
        new = {fd: t for fd, t in now.items() if fd not in self.before or self.before[fd] != t}
        if len(now) - len(self.before) <= self.allowed:
            return None
        kinds = Counter(kind(t) for t in new.values())
        listed = ", ".join(f"{n} x {k}" for k, n in kinds.most_common(8))
        return (f"{self.module} left {len(now) - len(self.before)} file descriptors open after its "
                f"teardown ({len(now)} open now, {self.allowed} allowed): {listed}")
