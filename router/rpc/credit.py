"""Receiver credit as the seed describes it: a fixed window, topped up when half of it is used.

The seed (``004_``, "credit management") gives the reply subscription 200 credits and every server or
notification subscription 100, and restores a subscription's credit to its default once it falls below
half, checking when the client acknowledges a message. It also asks for a count of "credit blocked"
events (the unused credit reached zero before the driver could top it up), logged at debug level.

:class:`CreditWindow` implements that for one receiver link, with one refinement: messages handed to the
application but not yet settled count against the window, so credit outstanding + unsettled messages
never exceed it. A server with a window of 100 therefore never holds more than 100 requests, and it
gets a batch of at least 50 new credits whenever 50 have been settled.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class CreditLink(Protocol):
    """What :class:`CreditWindow` needs of a receiver link (a ``proton.Receiver`` has it)."""

    @property
    def credit(self) -> int: ...

    def flow(self, n: int) -> None: ...


class CreditWindow:
    """Keeps ``credit + unsettled <= window`` on one receiver and refills in batches of >= window/2.

    Call :meth:`open` once the link is attached, :meth:`on_delivery` for each message received and
    :meth:`on_settled` each time the application settles one.
    """

    def __init__(self, window: int, name: str = "receiver") -> None:
        if window < 1:
            raise ValueError(f"credit window must be >= 1, not {window}")
        self.window = window
        self.name = name
        self.unsettled = 0
        self.blocked = 0       # times the link's credit reached 0 (the sender may have had to wait)
        self.refills = 0       # FLOWs issued after the first one
        self.frozen = False    # no more refills (the consumer is stopping)

    @property
    def threshold(self) -> int:
        """Free room (settled, not yet re-granted) that triggers a refill: half the window."""
        return max(1, self.window // 2)

    def open(self, link: CreditLink) -> None:
        """Grant the whole window."""
        missing = self.window - link.credit - self.unsettled
        if missing > 0:
            link.flow(missing)

    def on_delivery(self, link: CreditLink, settled: bool = False) -> None:
        """A message arrived (``settled``: it came pre-settled, so it holds no room)."""
        if not settled:
            self.unsettled += 1
        if link.credit <= 0:
            self.blocked += 1
            log.debug("%s: credit blocked (%d times): %d unsettled, window %d", self.name, self.blocked,
                      self.unsettled, self.window)
        self._maybe_refill(link)

    def on_settled(self, link: CreditLink) -> None:
        """The application settled one message."""
        if self.unsettled > 0:
            self.unsettled -= 1
        self._maybe_refill(link)

    def freeze(self) -> None:
        """Grant nothing more (a stopping consumer)."""
        self.frozen = True

    def _maybe_refill(self, link: CreditLink) -> None:
        if self.frozen:
            return
        free = self.window - link.credit - self.unsettled
        if free >= self.threshold:
            link.flow(free)
            self.refills += 1
