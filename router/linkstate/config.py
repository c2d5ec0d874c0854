"""Timers of the link-state control plane (defaults are qdrouterd's).

The five the node's config sets (its ``router:`` keys, router.config.RouterTimers) take their defaults
from router.defaults; ``node_grace`` and ``request_retry`` are this package's own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from router.defaults import HELLO_INTERVAL, HELLO_MAX_AGE, LS_MAX_AGE, RA_INTERVAL, RA_INTERVAL_FLUX

_TOLERANCE = 1e-9  # clocks are floats: 4.1 - 0.1 < 4.0


def due(now: float, since: float, interval: float) -> bool:
    """True once ``interval`` seconds have passed since ``since`` (with float tolerance)."""
    return now - since >= interval - _TOLERANCE


def within(now: float, since: float, window: float) -> bool:
    """True while no more than ``window`` seconds have passed since ``since`` (with float tolerance)."""
    return now - since <= window + _TOLERANCE


@dataclass(frozen=True)
class LinkStateConfig:
    """Control-plane timers, in seconds.

    ``hello_interval``/``hello_max_age``: HELLO period and how long a neighbour stays without one.
    ``ra_interval``/``ra_interval_flux``: router-advertisement period when stable / while the topology
    changes (flux = within ``2 * ra_interval_flux`` of the last change).
    ``ls_max_age``: a remote link state not refreshed by an RA or LSU for this long is cleared.
    ``node_grace``: a node without link state that no one names is forgotten after this long.
    ``request_retry``: an unanswered LSR or MAR may be repeated after this long.
    ``mobile_interval``: local address changes go out as at most one diff MAU per interval (coalesced:
    a storm of attaches costs a few MAUs and RAs, not one per batch of events).
    """

    hello_interval: float = HELLO_INTERVAL
    hello_max_age: float = HELLO_MAX_AGE
    ra_interval: float = RA_INTERVAL
    ra_interval_flux: float = RA_INTERVAL_FLUX
    ls_max_age: float = LS_MAX_AGE
    node_grace: float = 3.0
    request_retry: float = 1.0
    mobile_interval: float = 0.1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{f.name} must be a positive number of seconds, not {value!r}")
        if self.hello_max_age <= self.hello_interval:
            raise ValueError(
                f"hello_max_age ({self.hello_max_age}) must exceed hello_interval ({self.hello_interval})")
        if self.ra_interval_flux > self.ra_interval:
            raise ValueError(f"ra_interval_flux ({self.ra_interval_flux}) must not exceed "
                             f"ra_interval ({self.ra_interval})")

    @property
    def flux_window(self) -> float:
        """How long after a topology change the node stays in flux mode."""
        return 2 * self.ra_interval_flux

    @property
    def ra_dedup_window(self) -> float:
        """Copies of one RA arriving within this window are flooded and processed once."""
        return self.ra_interval_flux / 2
