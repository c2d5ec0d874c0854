"""Which client reads wait for the next pass of the event loop: the node's read budget (sans-IO).

A read's bytes are all handled before the loop serves anyone else, so the node bounds the CPU that
client reads take per loop iteration (``node.read_budget``) once some of them are costly (issue 33: an
attach storm). The server asks :meth:`ReadTurns.defer` before each client read and tells
:meth:`ReadTurns.read` what it cost; deferred connections are read in the next *pass*, which the server
runs when asked (``schedule``) after the next iteration's fresh input:

* a read costing more than ``heavy_read`` makes its connection *heavy* and starts a turn of *pacing*
  (a pass is scheduled); it stays heavy until a read costs under half of that (reads cut down to about
  ``heavy_read`` each, router.forwarding.readpacing, would otherwise be light every other time);
* while pacing, every client read counts in the budget, and once it is spent, heavy connections and those
  whose last read was not *cheap* (``heavy_read / 4``, more than an RPC call's) wait for the pass;
  cheap ones and peers are always read at once, the cheap ones at most `PROBE_READ` bytes at a time;
* a pass reads the deferred connections in order while the budget lasts and asks for another pass if
  some are left; pacing ends with a pass that leaves none.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

PROBE_READ = 4 * 1024       # bytes a read of a not yet costly client takes once the budget is spent


class ReadTurns:
    """The read budget's state: CPU spent in this iteration, pacing, the deferred connections."""

    def __init__(self, heavy_read: float, budget: float, schedule: Callable[[], None]) -> None:
        self.heavy_read = heavy_read
        self.cheap = heavy_read / 4
        self.budget = budget
        self._schedule = schedule       # run `start_pass` ... `end_pass` soon (the server's next pass)
        self.spent = 0.0
        self.pacing = False
        self.scheduled = False
        self.deferred: deque[Any] = deque()

    def defer(self, conn: Any) -> bool:
        """Before a read of client connection `conn` (with ``heavy`` and ``read_cpu``): True if it waits
        for the next pass (it is queued for it)."""
        if self.spent >= self.budget and (conn.heavy or self.pacing and conn.read_cpu > self.cheap):
            self.deferred.append(conn)
            self._want_pass()
            return True
        return False

    def read_limit(self) -> int | None:
        """The most a client read that was not deferred may take now (None: its usual size). Once the budget
        is spent while pacing, `PROBE_READ`: a connection whose input turns out costly (an attach storm's
        first read, its cost unknown until read) costs little before it is known; an RPC call's message
        usually fits."""
        return PROBE_READ if self.pacing and self.spent >= self.budget else None

    def measure(self, took: float) -> bool:
        """Whether the read just handled, whose read and pump took `took` seconds of wall time, needs its CPU
        time measured (otherwise it is cheap: `read` it with 0)."""
        return took > self.cheap or self.pacing

    def read(self, conn: Any, cpu: float) -> bool:
        """A read of client connection `conn` and its pump took `cpu` seconds; True if it was heavy."""
        conn.read_cpu = cpu
        if cpu > self.heavy_read:
            conn.heavy = True
            self.spent += cpu
            self._want_pass()
            return True
        if self.pacing:
            self.spent += cpu
        if conn.heavy and cpu < self.heavy_read / 2:
            conn.heavy = False
        return False

    def start_pass(self) -> None:
        self.scheduled = False
        self.spent = 0.0
        self.pacing = True

    def next_deferred(self) -> Any | None:
        """The next connection the pass reads (None: the budget is spent, or none waits)."""
        if self.deferred and self.spent < self.budget:
            return self.deferred.popleft()
        return None

    def end_pass(self) -> None:
        if self.deferred:               # the budget was spent: the rest in the next pass
            self._want_pass()
        self.pacing = self.scheduled

    def _want_pass(self) -> None:
        self.pacing = True
        if not self.scheduled:
            self.scheduled = True
            self._schedule()
