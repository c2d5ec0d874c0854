"""Which of an edge's uplinks carries its traffic.

An edge dials every configured uplink and keeps them all open: a standby uplink is already connected
when the active one fails, so failing over costs no new TCP, TLS or SASL handshake. The active uplink is
the cheapest open one (ties: the first configured). qdrouterd 1.19 takes the first open connection; here
a cheaper uplink that opens later takes over (`rebalance`, on by default) once it has been open for
`settle` seconds, so that an interior that flaps does not move its edges back and forth.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Uplink:
    """One open uplink: the connection's handle, its cost, its place in the config, the interior's id."""

    link: object
    cost: int
    index: int
    interior: str
    since: float


class UplinkChoice:
    """The open uplinks of one edge and the active one."""

    def __init__(self, rebalance: bool = True, settle: float = 2.0) -> None:
        self.rebalance = rebalance
        self.settle = settle
        self.open: dict[object, Uplink] = {}
        self.active: Uplink | None = None
        self.switches = 0           # times the active uplink changed (management, tests)

    def _rank(self, u: Uplink) -> tuple[int, int]:
        return (u.cost, u.index)

    def up(self, link: object, cost: int, index: int, interior: str, now: float) -> Uplink | None:
        """Uplink `link` opened. Returns the uplink to activate now, if the active one changes."""
        self.open[link] = Uplink(link, cost, index, interior, now)
        if self.active is None:
            return self._choose(now, force=True)
        return None

    def down(self, link: object, now: float) -> Uplink | None:
        """Uplink `link` closed. Returns the next one to activate (None: unchanged, or none open)."""
        gone = self.open.pop(link, None)
        if gone is not None and self.active is gone:
            self.active = None
            return self._choose(now, force=True)
        return None

    def tick(self, now: float) -> Uplink | None:
        """A cheaper uplink open for `settle` seconds replaces the active one (with `rebalance`)."""
        if not self.rebalance or self.active is None:
            return None
        return self._choose(now, force=False)

    def _choose(self, now: float, force: bool) -> Uplink | None:
        candidates = [u for u in self.open.values()
                      if force or now - u.since >= self.settle or u is self.active]
        if not candidates:
            return None
        best = min(candidates, key=self._rank)
        if best is self.active:
            return None
        if not force and self.active is not None and self._rank(best) >= self._rank(self.active):
            return None
        self.active = best
        self.switches += 1
        return best
