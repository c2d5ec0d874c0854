"""Broker -> mesh: a sender link on the node per bridged address, fed by a manual-ack consumer.

The node gives the sender link credit only while the mesh has a consumer for the address (end-to-end
credit). The bridge consumes its queue only while it has credit, with prefetch = the credit the node
granted (plus what is already in flight), and cancels the consumer when the node drains the link (the
last mesh consumer left). Each message goes on as an unsettled transfer and is acknowledged only
when the mesh settles it:

=================================  =====================================
mesh outcome                       broker
=================================  =====================================
ACCEPTED                           basic.ack
RELEASED                           basic.nack(requeue=true)
MODIFIED(delivery-failed)          basic.nack(requeue=true)
MODIFIED(undeliverable-here)       basic.reject(requeue=false): dead-letter
REJECTED                           basic.reject(requeue=false): dead-letter
=================================  =====================================

Acks are batched: the outcomes handled in one pass of the event loop become one
``basic.ack(multiple=true)`` for the oldest run of accepted messages (the broker's delivery tags are
in arrival order on the bridge's own channel), and single acks for accepted messages behind one that
is still in the mesh. Requeues and dead-letters go out at once, one by one.

When the channel is lost, the broker requeues every unacknowledged message itself; outcomes that
arrive later are dropped, so a message the mesh accepted may be delivered again (at-least-once).

A bridge sees its gateway only through :class:`~router.gateway.context.BridgeContext` (name, loop, the
connection to the node, counters); the gateway starts and stops it and says whether it may feed.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from router.adapter.inprocess import ACCEPTED, MODIFIED, REJECTED, NodeLink
from router.gateway.context import BridgeContext
from router.gateway.delivery091 import GatewayConnection
from router.gateway.mapping import from_091
from router.gateway.topology import Topology

log = logging.getLogger(__name__)

ACK, DONE = 1, 2     # an accepted message's ack is due / a message the broker no longer holds for us


class FromBroker:
    """One bridged address, broker -> mesh."""

    def __init__(self, ctx: BridgeContext, address: str, topo: Topology) -> None:
        self.ctx = ctx
        self.address = address
        self.topo = topo
        self.link: NodeLink | None = None
        self.channel: Any = None         # this bridge's own consumer channel
        self.allowed = True              # the gateway's mode switch (direction both)
        self.consumer_tag: str | None = None
        self.cancelling = False
        self.inflight: dict[object, int] = {}   # delivery to the node -> broker delivery tag
        self.pending: deque[tuple[int, Any, bytes]] = deque()   # arrived without credit
        self.order: deque[int] = deque()        # broker delivery tags not yet resolved, in order
        self.state: dict[int, int] = {}         # tag -> ACK or DONE, for tags in `order`
        self.fresh: list[int] = []              # accepted since the last ack flush
        self._ack_scheduled = False

    @property
    def attached(self) -> bool:
        return self.link is not None

    def start(self, channel: Any) -> None:
        """The broker side is ready: attach the sender link (credit decides the rest)."""
        self._reset(channel)
        conn = channel.connection
        if isinstance(conn, GatewayConnection):
            conn.fast_deliveries(channel, self._on_fast_delivery)
        if self.link is None:
            self.link = self.ctx.local.sender(self.address, self)

    def stop(self) -> None:
        """The broker is gone: detach (the broker requeues what was unacknowledged)."""
        self._reset(None)
        if self.link is not None:
            link, self.link = self.link, None
            self.ctx.local.close_link(link)

    def _reset(self, channel: Any) -> None:
        old = self.channel
        if old is not None and isinstance(old.connection, GatewayConnection):
            old.connection.forget_channel(old.channel_number)
        self.channel = channel
        self.consumer_tag = None
        self.cancelling = False
        self.pending.clear()
        self.inflight.clear()
        self.order.clear()
        self.state.clear()
        self.fresh.clear()

    def allow(self, allowed: bool) -> None:
        if allowed != self.allowed:
            self.allowed = allowed
            self._update()

    # ---- consuming follows credit
    def _update(self) -> None:
        link, ch = self.link, self.channel
        if link is None or ch is None or not ch.is_open:
            return
        credit = link.credit
        while credit > 0 and self.pending:
            self._send(*self.pending.popleft())
            credit = link.credit
        want = self.allowed and credit > 0
        drain = link.drain_mode
        stop = not self.allowed or (credit == 0 and drain)
        if want and self.consumer_tag is None:
            prefetch = credit + len(self.inflight)
            ch.basic_qos(prefetch_count=min(prefetch, 65535))
            self.consumer_tag = ch.basic_consume(self.topo.queue, self._on_message, auto_ack=False)
        elif stop and self.consumer_tag is not None and not self.cancelling:
            self.cancelling = True
            ch.basic_cancel(self.consumer_tag, callback=self._cancelled)
        if stop and self.pending:
            self._requeue_pending()
        if drain and credit == 0 and not self.inflight and self.consumer_tag is None and not self.pending:
            self._recycle()

    def _recycle(self) -> None:
        """Replace a drained link by a fresh one.

        Works around the node's credit ledger: after a producer answered a drain, the node's next grant
        only tops up to ``link_capacity`` minus the credit the drain consumed, and is not replenished
        (see the gateway report), so a drained link would stall once the mesh consumer comes back."""
        old, self.link = self.link, None
        self.ctx.local.close_link(old)
        self.link = self.ctx.local.sender(self.address, self)

    def _cancelled(self, _frame: Any) -> None:
        self.consumer_tag = None
        self.cancelling = False
        self._requeue_pending()
        self._update()

    def _requeue_pending(self) -> None:
        ch = self.channel
        while self.pending:
            tag, _props, _body = self.pending.popleft()
            if ch is not None and ch.is_open:
                ch.basic_nack(tag, requeue=True)
                self._resolved(tag)

    def _on_message(self, channel: Any, method: Any, props: Any, body: bytes) -> None:
        """pika's consumer callback (when the connection does not parse deliveries itself)."""
        if channel is self.channel:
            self._deliver(method.delivery_tag, props, body)

    def _on_fast_delivery(self, consumer_tag: str, tag: int, props: Any, body: bytes) -> None:
        """A delivery parsed by :class:`GatewayConnection` (pika's checks done here)."""
        ch = self.channel
        if ch is None:
            return
        if consumer_tag != self.consumer_tag or self.cancelling:
            if ch.is_open:                        # what pika does for a cancelled consumer
                ch.basic_reject(tag, requeue=True)
            return
        try:
            self._deliver(tag, props, body)
        except Exception:
            log.exception("gateway %s: internal error handling a delivery for %s", self.ctx.name,
                          self.address)

    def _deliver(self, tag: int, props: Any, body: bytes) -> None:
        self.ctx.stats["consumed"] += 1
        self.order.append(tag)
        link = self.link
        if link is not None and not self.pending and link.credit > 0:
            self._send(tag, props, body)
        else:
            self.pending.append((tag, props, body))
            self._update()

    def _send(self, tag: int, props: Any, body: bytes) -> None:
        dlv = self.ctx.local.send(self.link, from_091(props, body, self.address))
        self.inflight[dlv] = tag

    # ---- acknowledgements
    def _resolved(self, tag: int) -> None:
        """The broker no longer holds ``tag`` for us (nacked or rejected)."""
        self.state[tag] = DONE
        if self.order and self.order[0] == tag:
            self._schedule_acks()        # the run of accepted messages behind it can go now

    def _schedule_acks(self) -> None:
        if not self._ack_scheduled:
            self._ack_scheduled = True
            self.ctx.loop.call_soon(self._flush_acks)

    def _flush_acks(self) -> None:
        """One multiple ack for the oldest run of resolved messages, single acks behind a gap."""
        self._ack_scheduled = False
        ch = self.channel
        if ch is None or not ch.is_open:
            return
        order, state = self.order, self.state
        last = None
        acked = 0
        while order:
            s = state.get(order[0])
            if s is None:
                break
            tag = order.popleft()
            del state[tag]
            if s == ACK:
                last = tag
                acked += 1
        if last is not None:
            ch.basic_ack(last, multiple=True)
        for tag in self.fresh:
            if state.get(tag) == ACK:        # behind a message still in the mesh: ack it alone
                ch.basic_ack(tag)
                state[tag] = DONE
                acked += 1
        self.fresh.clear()
        self.ctx.stats["acked"] += acked

    # ---- node events
    def on_flow(self) -> None:
        link = self.link
        if link is None:
            return
        if link.drain_mode and link.credit > 0 and not self.pending:
            link.drained()
        self._update()

    def on_outcome(self, dlv: object, outcome: int, undeliverable: bool) -> None:
        tag = self.inflight.pop(dlv, None)
        self.ctx.local.forget(dlv)
        if tag is None:
            return                        # sent on a channel that is gone: the broker requeued it
        ch = self.channel
        if ch is None or not ch.is_open:
            return
        if outcome == ACCEPTED:
            self.state[tag] = ACK
            self.fresh.append(tag)
            self._schedule_acks()
        else:
            stats = self.ctx.stats
            if outcome == REJECTED or (outcome == MODIFIED and undeliverable):
                ch.basic_reject(tag, requeue=False)
                stats["dead_lettered"] += 1
            else:                         # RELEASED, MODIFIED(delivery-failed), or settled with no state
                ch.basic_nack(tag, requeue=True)
                stats["requeued"] += 1
            self._resolved(tag)
        if self.pending or not self.inflight:
            self._update()

    def on_link_closed(self) -> None:
        if self.link is not None:
            self.link = None
            log.warning("gateway %s: the node closed the link for %s", self.ctx.name, self.address)
