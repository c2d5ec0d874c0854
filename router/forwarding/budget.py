"""The node-wide memory budget: bytes the node buffers, and which producers wait for credit because of it.

Sans-IO. The node forwards without queueing, but bytes still wait inside it: a delivery sent to a
consumer whose socket is slow sits in that connection's session and transport output until the peer reads
it, and a streamed message paused for a slow consumer sits in its producer's session. The adapter reports
those bytes per connection (`report(conn, nbytes)`, after it wrote the connection; a paused stream's
input counts there too); the credit ledger asks `holds(producer)` before it tops a producer up, and
`window(capacity, producer)` for how much credit a producer may hold at most. Nothing is ever dropped:
producers are slowed.

The rules, with ``limit`` the budget in bytes:

* a *slow* connection holds ``conn_high`` bytes or more (``limit // 256``, at least 64 KiB): a producer
  whose deliveries would go there (every local consumer of its address is on a slow connection, or any
  one is for a multicast address; for an anonymous producer, the address of its last delivery) gets no
  credit until that connection is down to half of it;
* over the whole ``limit``: every producer that may add to what is buffered waits: the data-in links of
  peer nodes (they carry every address; a peer's producers are held on that node in turn), and those
  whose address has a consumer holding more than ``busy`` bytes (two frames); producers whose consumers
  drain at once (their addresses keep their latency) do not; they get credit again once the total is
  down to three quarters of the limit;
* the node's own in-process clients (management's agent, the broker gateways) are never held (`exempt`).
* credit is sized in bytes too: a producer may hold at most its share of half the ``limit`` (divided by
  the number of producer links), in deliveries of its connection's mean size (the adapter's estimate,
  `size_of`; a frame, 16 KiB, while it is not known), and an eighth of that from half the ``limit`` on.
  Credit already given cannot be taken back, so this bounds what the producers can add before a hold
  takes effect: half the limit in all.

Streamed messages count as they wait: a paused one's bytes are in its producer's session (incoming, up
to the session's capacity) and its consumer's (outgoing); over the limit a stream pauses as soon as its
consumer holds more than ``busy`` bytes (`stream_high_water`), so that it moves on only to consumers that
drain; a consumer busy with a stream, or behind a full socket, counts as busy (`stalled`) even when the
kernel has just taken its output.

A held producer is remembered (by connection, or as held for the total) and handed back to the ledger
(`take_released`) when the reason is gone, so credit resumes without polling.
"""

from __future__ import annotations

from collections.abc import Callable

from router.defaults import MAX_FRAME_SIZE, MEMORY_LIMIT_MIN
from router.forwarding.records import Address, Consumer, Producer

MIN_LIMIT = MEMORY_LIMIT_MIN        # the smallest budget a node accepts (`node.memory_limit`)
DEFAULT_FRACTION = 4                # the default budget: a quarter of physical memory ...
DEFAULT_FLOOR = 256 * 1024 * 1024   # ... at least 256 MiB ...
DEFAULT_CAP = 2 * 1024 * 1024 * 1024   # ... and at most 2 GiB
MIN_CONN_HIGH = 64 * 1024
BUSY = 32 * 1024                    # a consumer connection holding more is not draining at once
# the size credit assumes per delivery while a connection has sent none: a frame (a new connection's
# producers would otherwise take the whole link capacity, 250 deliveries each, whatever their size)
UNKNOWN_SIZE = MAX_FRAME_SIZE


def default_limit(physical: int | None) -> int:
    """The budget for a machine with `physical` bytes of memory (None: unknown, the floor)."""
    if not physical:
        return DEFAULT_FLOOR
    return max(DEFAULT_FLOOR, min(DEFAULT_CAP, physical // DEFAULT_FRACTION))


class MemoryBudget:
    """Bytes buffered per connection (as the adapter reports them) and the credit decisions they lead to."""

    def __init__(self, limit: int, conn_high: int | None = None) -> None:
        self.limit = limit
        self.conn_high = conn_high if conn_high is not None else max(MIN_CONN_HIGH, limit // 256)
        self.conn_low = self.conn_high // 2
        self.total = 0                                  # bytes buffered over every connection
        self.peak = 0                                   # the highest total seen
        self.buffered: dict[object, int] = {}           # connection -> bytes it holds (> 0 only)
        self.waiting: dict[object, set[Producer]] = {}  # slow connection -> producers held for it
        self.held_total: set[Producer] = set()          # producers held while the total is over the limit
        self.released: list[Producer] = []              # producers to give credit again
        self.holds_count = 0                            # credit top-ups refused (a counter for stat)
        self._over = False
        # the adapter's estimate of the mean delivery size on a connection (bytes; 0: not known yet)
        self.size_of: Callable[[object], int] = lambda conn: 0
        self._sizes: dict[object, int] = {}             # size_of per connection, for one round
        self._producers = 1
        # producers never held (the adapter's: the node's own in-process clients, such as management's)
        self.exempt: Callable[[Producer], bool] = lambda p: False
        # whether a consumer takes nothing at once whatever its connection holds (the adapter's: a stream
        # in progress on its link, a full socket; the kernel may just have taken its output)
        self.stalled: Callable[[Consumer], bool] = lambda c: False

    # ---- what the adapter reports ---------------------------------------------------------------------
    def report(self, conn: object, nbytes: int) -> None:
        """`conn` now buffers `nbytes` (its session and transport output, plus a paused stream's input)."""
        old = self.buffered.get(conn, 0)
        if nbytes == old:
            return
        if nbytes > 0:
            self.buffered[conn] = nbytes
        else:
            del self.buffered[conn]
        total = self.total = self.total + nbytes - old
        if total > self.peak:
            self.peak = total
        if nbytes <= self.conn_low and conn in self.waiting:
            self.released.extend(self.waiting.pop(conn))
        if total >= self.limit:
            self._over = True
        elif self._over and total <= self.limit * 3 // 4:
            self._over = False
            if self.held_total:
                self.released.extend(self.held_total)
                self.held_total.clear()

    def forget(self, conn: object) -> None:
        """`conn` is gone: its bytes no longer count; producers held for it may go on."""
        self.report(conn, 0)
        held = self.waiting.pop(conn, None)
        if held:
            self.released.extend(held)

    # ---- what the credit ledger asks ------------------------------------------------------------------
    @property
    def over(self) -> bool:
        """The total reached the limit (and has not yet come back down to three quarters of it)."""
        return self._over

    def start_round(self, producers: int) -> None:
        """A round of credit decisions begins, with `producers` producer links on the node."""
        self._producers = max(1, producers)
        self._sizes.clear()

    def window(self, capacity: int, p: Producer) -> int:
        """The most credit `p` may hold now: its share of half the limit in bytes (an eighth of that
        while the node buffers half its limit or more), in deliveries of its connection's mean size;
        at least 1, at most `capacity`. A peer's data-in link keeps `capacity` (it carries every address,
        its connection's bytes count control traffic too; over the limit it is held instead)."""
        if p.router:
            return capacity
        share = self.limit // 2 // self._producers
        if self.total * 2 >= self.limit:
            share //= 8
        conn = p.conn
        size = self._sizes.get(conn)
        if size is None:
            size = self._sizes[conn] = self.size_of(conn)
        if size <= 0:           # nothing seen from its connection yet: a frame each, until it is known
            size = UNKNOWN_SIZE
        return max(1, min(capacity, share // size))

    def stream_high_water(self, default: int) -> int:
        """Bytes a streamed message's consumer may hold before the stream pauses: `default`, or only
        ``BUSY`` while the node is over its limit (a stream then moves on only to consumers that drain)."""
        return BUSY if self._over else default

    def holds(self, p: Producer) -> bool:
        """Whether `p` must wait for credit now (it is remembered and released when it may go on)."""
        if self.buffered and not self.exempt(p):
            a = p.address if p.address is not None else p.last
            if a is not None and a.consumers:
                slow = self._slow_conns(a)
                if slow:
                    for conn in slow:       # released by the first of them to drain (then asked again)
                        self.waiting.setdefault(conn, set()).add(p)
                    self.holds_count += 1
                    return True
            if self._over and (p.router or (a is not None and self._busy(a))):
                self.held_total.add(p)
                self.holds_count += 1
                return True
        return False

    def take_released(self) -> list[Producer]:
        """Producers whose reason to wait is gone, since the last call."""
        out, self.released = self.released, []
        return out

    def drop(self, p: Producer) -> None:
        """`p` is gone (detached): hold it no more."""
        self.held_total.discard(p)
        for held in self.waiting.values():
            held.discard(p)

    # ---- helpers --------------------------------------------------------------------------------------
    def _slow_conns(self, a: Address) -> list[object]:
        """The slow connections that hold `a`'s producers back: every consumer's when all are slow (an
        anycast address with a remote destination never), or (multicast) the first slow one."""
        high, buffered = self.conn_high, self.buffered
        slow = []
        for c in a.consumers:
            if buffered.get(c.conn, 0) >= high:
                if a.multicast:
                    return [c.conn]
                slow.append(c.conn)
            elif not a.multicast:
                return []
        return slow if not a.remote else []

    def _busy(self, a: Address) -> bool:
        buffered, stalled = self.buffered, self.stalled
        return any(buffered.get(c.conn, 0) > BUSY or stalled(c) for c in a.consumers)

    def snapshot(self) -> dict:
        """For management and logs."""
        return {"memory_limit": self.limit, "buffered_bytes": self.total, "buffered_peak": self.peak,
                "slow_connections": sum(1 for n in self.buffered.values() if n >= self.conn_high),
                "held_producers": len(self.held_total) + sum(len(s) for s in self.waiting.values()),
                "credit_holds": self.holds_count}
