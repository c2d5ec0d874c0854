"""Mesh -> broker: a receiver link on the node per bridged address, publishing with confirms.

:class:`Confirms` is the publishing channel's bookkeeping (one per broker connection): publish sequence
numbers, which AMQP 1.0 delivery each one carries, and the outcome each confirm means. It holds the
broker's ``confirm_window``: never more unconfirmed publishes on the channel than that, whatever the
number of bridged addresses; a message that arrives while the window is full waits in the gateway
(unsettled, in arrival order) until a confirm makes room.

A :class:`ToBroker` bridge owns one receiver link and its credit: credit + the link's messages in the
gateway (waiting or unconfirmed) never exceed the window, so one address alone can use the whole
window, and what waits in the gateway is bounded by the window per bridged address.

Outcomes sent back to the producer: ``basic.ack`` -> ACCEPTED; ``basic.return`` (mandatory, nothing
to route to) then ``basic.ack`` -> RELEASED; ``basic.nack`` -> REJECTED; channel or connection lost
-> RELEASED for every unconfirmed or waiting delivery (the broker may still hold some of the
unconfirmed ones: at-least-once).

A bridge sees its gateway only through :class:`~router.gateway.context.BridgeContext`; the gateway
attaches it with the connection's :class:`Confirms`, retires it (drain, then detach) and detaches it.
Credit is topped up on the link's own events: confirms, and the node's FLOW (a drain answered).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from router.adapter.inprocess import ACCEPTED, REJECTED, RELEASED, NodeLink
from router.gateway.context import BridgeContext
from router.gateway.mapping import TAG_HEADER, MappingError, Outgoing, to_091
from router.gateway.topology import Topology
from router.gateway.wire091 import FramePublisher

log = logging.getLogger(__name__)

NACKED = (b"amqp:internal-error", b"the broker refused the message (basic.nack)")


def return_key(exchange: str, routing_key: str, body: bytes) -> tuple:
    """What identifies a returned message among the unconfirmed publishes (long bodies by their
    length and ends: a collision only costs a tag header, never a wrong match)."""
    if len(body) > 256:
        return exchange, routing_key, len(body), body[:128], body[-128:]
    return exchange, routing_key, body


class Confirms:
    """Publisher-confirm tracking and the confirm window of one confirm-mode channel."""

    def __init__(self, channel: Any, stats: dict[str, int], window: int,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.channel = channel
        self.publisher = FramePublisher(channel, loop)
        self.stats = stats
        self.window = window
        self.seq = 0                                            # last publish sequence number
        self.unconfirmed: dict[int, tuple[ToBroker, object, tuple | None]] = {}
        self.waiting: deque[tuple[ToBroker, object, Outgoing]] = deque()
        self.untagged: dict[tuple, int] = {}      # return key -> seq of an unconfirmed untagged publish
        self.returned: set[int] = set()
        self.peak = 0                                           # most unconfirmed at once

    def submit(self, bridge: ToBroker, dlv: object, message: Outgoing) -> None:
        """Publish now, or when the window has room; the outcome goes to ``bridge.confirmed``."""
        if self.waiting or len(self.unconfirmed) >= self.window:
            self.waiting.append((bridge, dlv, message))
        else:
            self._publish(bridge, dlv, message)

    def _publish(self, bridge: ToBroker, dlv: object, message: Outgoing) -> None:
        """basic.publish (mandatory).

        A basic.return must be matched to its publish. The broker returns the message as published,
        so a return is matched by its exchange, routing key and body (:func:`return_key`) as long as
        no two unconfirmed publishes share that key; a publish that would share it carries its
        sequence number in the header :data:`TAG_HEADER` instead (headers cost broker CPU)."""
        seq = self.seq + 1
        topo = bridge.topo
        key = return_key(topo.exchange, topo.routing_key, message.body)
        tagged = key in self.untagged
        try:
            self.publisher.publish(topo.exchange, topo.routing_key, message, seq if tagged else None)
        except Exception as exc:     # the channel closed under us (nothing was sent)
            log.warning("gateway %s: publish to %s failed: %r", bridge.ctx.name, bridge.address, exc)
            bridge.confirmed(dlv, RELEASED)
            return
        self.seq = seq
        if tagged:
            key = None
        else:
            self.untagged[key] = seq
        unconfirmed = self.unconfirmed
        unconfirmed[seq] = (bridge, dlv, key)
        self.stats["published"] += 1
        if len(unconfirmed) > self.peak:
            self.peak = len(unconfirmed)

    def on_return(self, _channel: Any, method: Any, props: Any, body: bytes) -> None:
        """basic.return: the message reached no queue; its ack follows."""
        seq = (props.headers or {}).get(TAG_HEADER)
        if seq is None:
            seq = self.untagged.get(return_key(method.exchange, method.routing_key, body))
        if isinstance(seq, int) and seq in self.unconfirmed:
            self.returned.add(seq)
        self.stats["returned"] += 1

    def on_confirm(self, frame: Any) -> None:
        """basic.ack / basic.nack from pika (when the connection does not parse them itself)."""
        method = frame.method
        self.confirm(method.NAME == "Basic.Ack", method.delivery_tag, method.multiple)

    def confirm(self, ack: bool, tag: int, multiple: bool) -> None:
        """basic.ack / basic.nack (possibly `multiple`)."""
        unconfirmed = self.unconfirmed
        if multiple:
            done = []
            for seq in unconfirmed:
                if seq > tag:
                    break
                done.append(seq)
        else:
            done = [tag] if tag in unconfirmed else []
        touched = {self._settle(seq, ack) for seq in done}
        waiting = self.waiting
        while waiting and len(unconfirmed) < self.window:
            self._publish(*waiting.popleft())
        for bridge in touched:
            bridge.refill()

    def _settle(self, seq: int, ack: bool) -> ToBroker:
        bridge, dlv, key = self.unconfirmed.pop(seq)
        if key is not None:
            del self.untagged[key]
        stats = self.stats
        if not ack:
            stats["nacked"] += 1
            bridge.confirmed(dlv, REJECTED, NACKED, refill=False)
        elif self.returned and seq in self.returned:
            self.returned.discard(seq)
            bridge.confirmed(dlv, RELEASED, refill=False)
        else:
            stats["confirmed"] += 1
            bridge.confirmed(dlv, ACCEPTED, refill=False)
        return bridge

    def fail_all(self) -> None:
        """The channel is gone: every unconfirmed or waiting delivery comes back RELEASED."""
        pending, self.unconfirmed = self.unconfirmed, {}
        waiting, self.waiting = self.waiting, deque()
        self.returned.clear()
        self.untagged.clear()
        for bridge, dlv, _key in pending.values():
            bridge.confirmed(dlv, RELEASED)
        for bridge, dlv, _message in waiting:
            bridge.confirmed(dlv, RELEASED)


class ToBroker:
    """One bridged address, mesh -> broker: a consumer link on the node feeding basic.publish."""

    def __init__(self, ctx: BridgeContext, address: str, topo: Topology, persistent: bool,
                 window: int) -> None:
        self.ctx = ctx
        self.address = address
        self.topo = topo
        self.persistent = persistent
        self.window = window
        self.link: NodeLink | None = None
        self.confirms: Confirms | None = None   # the broker connection's publishing channel, while attached
        self.outstanding = 0            # this link's messages in the gateway: waiting or unconfirmed
        self.retiring = False           # draining before a detach: no new credit

    @property
    def attached(self) -> bool:
        return self.link is not None

    def attach(self, confirms: Confirms) -> None:
        """Attach the consumer link (or take back a retiring one), publishing through ``confirms``, and
        grant credit."""
        self.retiring = False
        self.confirms = confirms
        if self.link is None:
            self.link = self.ctx.local.receiver(self.address, self)
        self._top_up()

    def retire(self) -> None:
        """Stop taking messages: revoke credit, detach once nothing is unconfirmed."""
        if self.link is not None and not self.retiring:
            self.retiring = True
            self.link.drain(0)
            self._maybe_detach()

    def detach(self) -> None:
        self.confirms = None
        if self.link is not None:
            link, self.link = self.link, None
            self.ctx.local.close_link(link)

    def _maybe_detach(self) -> None:
        if self.retiring and self.outstanding == 0 and self.link is not None and self.link.credit == 0:
            self.detach()

    def _top_up(self) -> None:
        link = self.link
        if link is None or self.retiring:
            return
        credit = link.credit
        want = self.window - self.outstanding - credit
        if want > 0 and (want >= max(1, self.window // 8) or credit == 0):
            link.flow(want)

    # ---- node events
    def on_message(self, dlv: object, data: bytes, settled: bool) -> None:
        if self.link is None:
            return
        local = self.ctx.local
        conf = self.confirms
        if conf is None:
            if not settled:
                local.settle(dlv, RELEASED)
            else:
                local.settle(dlv)
            return
        try:
            message = to_091(data, self.persistent, self.address)
        except MappingError as exc:
            local.settle(dlv, REJECTED, (b"amqp:decode-error",
                                         f"gateway cannot read the message: {exc}".encode()))
            self._top_up()
            return
        if settled:
            local.settle(dlv)
            dlv = None
        self.outstanding += 1          # credit went down by one: what _top_up wants is unchanged
        conf.submit(self, dlv, message)

    def confirmed(self, dlv: object, outcome: int, condition: tuple[bytes, bytes] | None = None,
                  refill: bool = True) -> None:
        """The broker confirmed (or the channel lost) one publish of this bridge; ``refill=False``: the
        caller calls :meth:`refill` once for many."""
        self.outstanding -= 1
        if dlv is not None:
            self.ctx.local.settle(dlv, outcome, condition)
        if refill:
            self.refill()

    def refill(self) -> None:
        """Credit for what was confirmed (or detach a retiring link that has nothing left)."""
        self._top_up()
        self._maybe_detach()

    def on_flow(self) -> None:
        """The node answered a drain (or echoed credit): a retiring link may detach now; an attached
        one gets its credit back (a drain answered after the link was taken back left it at 0)."""
        self.refill()

    def on_link_closed(self) -> None:
        if self.link is not None:
            self.link = None
            log.warning("gateway %s: the node closed the link for %s", self.ctx.name, self.address)
