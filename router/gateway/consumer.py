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

When the channel is lost, the broker requeues every unacknowledged message itself; outcomes that
arrive later are dropped, so a message the mesh accepted may be delivered again (at-least-once).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from proton import Delivery, Link

from router.gateway.mapping import from_091
from router.gateway.topology import Topology

if TYPE_CHECKING:
    from router.gateway.gateway import BrokerGateway

log = logging.getLogger(__name__)

ACCEPTED, REJECTED, RELEASED, MODIFIED = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED,
                                          Delivery.MODIFIED)


class FromBroker:
    """One bridged address, broker -> mesh."""

    def __init__(self, gateway: BrokerGateway, address: str, topo: Topology) -> None:
        self.gw = gateway
        self.address = address
        self.topo = topo
        self.link: Link | None = None
        self.channel: Any = None         # this bridge's own consumer channel
        self.allowed = True              # the gateway's mode switch (direction both)
        self.consumer_tag: str | None = None
        self.cancelling = False
        self.inflight: dict[str, tuple[Any, int]] = {}   # transfer tag -> (channel, broker tag)
        self.pending: deque[tuple[Any, Any, bytes]] = deque()   # arrived without credit

    @property
    def attached(self) -> bool:
        return self.link is not None

    def start(self, channel: Any) -> None:
        """The broker side is ready: attach the sender link (credit decides the rest)."""
        self.channel = channel
        self.consumer_tag = None
        self.cancelling = False
        if self.link is None:
            self.link = self.gw.local.sender(self.address, self)

    def stop(self) -> None:
        """The broker is gone: detach (the broker requeues what was unacknowledged)."""
        self.channel = None
        self.consumer_tag = None
        self.cancelling = False
        self.pending.clear()
        self.inflight.clear()
        if self.link is not None:
            link, self.link = self.link, None
            self.gw.local.close_link(link)

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
        stop = not self.allowed or (credit == 0 and link.drain_mode)
        if want and self.consumer_tag is None:
            prefetch = credit + len(self.inflight)
            ch.basic_qos(prefetch_count=min(prefetch, 65535))
            self.consumer_tag = ch.basic_consume(self.topo.queue, self._on_message, auto_ack=False)
        elif stop and self.consumer_tag is not None and not self.cancelling:
            self.cancelling = True
            ch.basic_cancel(self.consumer_tag, callback=self._cancelled)
        if stop and self.pending:
            self._requeue_pending()
        if (link.drain_mode and link.credit == 0 and not self.inflight and self.consumer_tag is None
                and not self.pending):
            self._recycle()

    def _recycle(self) -> None:
        """Replace a drained link by a fresh one.

        Works around the node's credit ledger: after a producer answered a drain, the node's next grant
        only tops up to ``link_capacity`` minus the credit the drain consumed, and is not replenished
        (see the gateway report), so a drained link would stall once the mesh consumer comes back."""
        old, self.link = self.link, None
        self.gw.local.close_link(old)
        self.link = self.gw.local.sender(self.address, self)

    def _cancelled(self, _frame: Any) -> None:
        self.consumer_tag = None
        self.cancelling = False
        self._requeue_pending()
        self._update()

    def _requeue_pending(self) -> None:
        ch = self.channel
        while self.pending:
            method, _props, _body = self.pending.popleft()
            if ch is not None and ch.is_open:
                ch.basic_nack(method.delivery_tag, requeue=True)

    def _on_message(self, channel: Any, method: Any, props: Any, body: bytes) -> None:
        link = self.link
        if channel is not self.channel:
            return
        self.gw.stats["consumed"] += 1
        if link is not None and link.credit > 0 and not self.pending:
            self._send(method, props, body)
        else:
            self.pending.append((method, props, body))
            self._update()

    def _send(self, method: Any, props: Any, body: bytes) -> None:
        link = self.link
        tag = str(method.delivery_tag)
        link.delivery(tag)
        link.send(from_091(props, body))
        link.advance()
        self.inflight[tag] = (self.channel, method.delivery_tag)
        self.gw.local.kick()

    # ---- Proton events
    def on_flow(self, link: Link) -> None:
        if link.drain_mode and link.credit > 0 and not self.pending:
            link.drained()
            self.gw.local.kick()
        self._update()

    def on_delivery(self, d: Delivery) -> None:
        state = d.remote_state
        if not d.settled and state not in (ACCEPTED, REJECTED, RELEASED, MODIFIED):
            return
        tag = d.tag
        entry = self.inflight.pop(tag.decode() if isinstance(tag, bytes) else tag, None)
        d.settle()
        self.gw.local.kick()
        if entry is None:
            return
        ch, tag = entry
        if ch is not self.channel or ch is None or not ch.is_open:
            return                        # the broker requeued it when that channel closed
        stats = self.gw.stats
        if state == ACCEPTED:
            ch.basic_ack(tag)
            stats["acked"] += 1
        elif state == REJECTED or (state == MODIFIED and d.remote.undeliverable):
            ch.basic_reject(tag, requeue=False)
            stats["dead_lettered"] += 1
        else:                             # RELEASED, MODIFIED(delivery-failed), or settled with no state
            ch.basic_nack(tag, requeue=True)
            stats["requeued"] += 1
        self._update()

    def on_link_closed(self, link: Link) -> None:
        if link == self.link:
            self.link = None
            log.warning("gateway %s: the node closed the link for %s", self.gw.name, self.address)
