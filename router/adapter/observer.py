"""The one hook point where the adapter reports what the core decided (telemetry implements it).

The adapter calls these methods, and only these, when an observer is attached (`Engine.observer`; None:
nothing is called, and the hot path pays one attribute test per message). Each call names a decision
that was carried out: a delivery forwarded or settled, one that went nowhere, a multicast group, the
growth of a streamed message, a link or connection event. Counters are not here: the core counts where
it decides (router.forwarding.core).

Arguments are the core's records (router.forwarding.records) and the router annotations of a delivery
from a peer (router.amqp.annotations.RouterAnnotations, None from a client); `key` is the address the
delivery was routed by. `Engine.observer` is typed with this Protocol; router.telemetry.observer provides
the implementation.
"""

from __future__ import annotations

from typing import Protocol

from router.amqp.annotations import RouterAnnotations
from router.forwarding.records import Consumer, Held, InFlight, McastGroup, Producer, RemoteDest


class Observer(Protocol):
    def tick(self, now: float) -> None:
        """The node's time (monotonic seconds) of the batch of events about to be handled."""

    def close(self) -> None:
        """The node stops: write what is pending."""

    def event(self, name: str, link: object, address: str | None, peer: str | None) -> None:
        """A connection or link came or went (conn_up, conn_down, link_up, link_down), or a producer's
        credit ran out or came back (credit_starved_start, credit_starved_end)."""

    def route_of(self, key: str, p: Producer, c: Consumer, ann: RouterAnnotations | None,
                 rd: RemoteDest | None) -> int:
        """The route id an unsettled delivery from `p` to `c` carries in its in-flight entry
        (-1: from a client to a client of this node, the common case)."""
        return -1

    def forwarded_settled(self, key: str, p: Producer, c: Consumer, ann: RouterAnnotations | None,
                          rd: RemoteDest | None, mode: int, size: int) -> None:
        """A delivery went out settled and so ended here: `mode` PRESETTLED, or HANDED_OVER to an
        at-most-once consumer (ACCEPTED upstream); router.forwarding.decisions."""

    def settled(self, entry: InFlight, outcome: int) -> None:
        """A tracked unicast delivery was settled upstream with the consumer's `outcome`."""

    def ended(self, key: str | None, p: Producer, presettled: bool, size: int) -> None:
        """A delivery from `p` went nowhere: RELEASED back to it, or dropped (`presettled`)."""

    def multicast(self, key: str, p: Producer, ann: RouterAnnotations | None, copies: list[Consumer],
                  group: McastGroup | None, size: int) -> None:
        """A multicast delivery went out as `copies` (group None: pre-settled, so it ended here)."""

    def group_settled(self, group: McastGroup, outcome: int) -> None:
        """Every copy of `group` is terminal: it was settled upstream with `outcome`."""

    def grew(self, key: object, size: int) -> None:
        """A streamed delivery (its inbound delivery, or its multicast group) has `size` bytes so far."""

    def forget(self, key: object) -> None:
        """A streamed delivery was aborted by its producer: nothing to record."""

    def held_sent_settled(self, item: Held, c: Consumer, mode: int) -> None:
        """A delivery that waited behind a stream went out settled (`mode` as for forwarded_settled)."""

    def held_released(self, item: Held, c: Consumer) -> None:
        """A delivery held for `c` never went out (`c` is gone): RELEASED, or dropped if pre-settled."""

    def stream_routed(self, stream: object, copies: list[Consumer], dest: RemoteDest | None) -> None:
        """A streamed message (router.adapter.streams.Stream: `key`, `ann`, `producer`, `group`,
        `presettled`, `in_dlv`) found `copies`; the observer may keep what it needs in `stream.tel`."""

    def stream_sunk(self, stream: object) -> None:
        """A streamed message could not be routed (its `key` and `ann` as far as known): it is read to
        its end and answered with `stream.final`."""

    def stream_ended(self, stream: object, aborted: bool) -> None:
        """The last frame of a streamed message arrived (or it was aborted): record what it became."""
