"""Mesh -> broker: a receiver link on the node per bridged address, publishing with confirms.

:class:`Confirms` is the publishing channel's bookkeeping (one per broker connection): publish sequence
numbers, which AMQP 1.0 delivery each one carries, and the outcome each confirm means. A
:class:`ToBroker` bridge owns one receiver link and its credit: credit = ``confirm_window`` minus the
link's unconfirmed publishes, so a link never has more than the window unconfirmed.

Outcomes sent back to the producer: ``basic.ack`` -> ACCEPTED; ``basic.return`` (mandatory, nothing
to route to) then ``basic.ack`` -> RELEASED; ``basic.nack`` -> REJECTED; channel or connection lost
-> RELEASED for every unconfirmed delivery (the broker may still hold some of them: at-least-once).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from proton import Condition, Delivery, Link

from router.gateway.mapping import TAG_HEADER, MappingError, to_091
from router.gateway.topology import Topology

if TYPE_CHECKING:
    from router.gateway.gateway import BrokerGateway

log = logging.getLogger(__name__)

ACCEPTED, REJECTED, RELEASED = Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED


class Confirms:
    """Publisher-confirm tracking for one confirm-mode channel."""

    def __init__(self, channel: Any, stats: dict[str, int]) -> None:
        self.channel = channel
        self.stats = stats
        self.seq = 0                                            # last publish sequence number
        self.unconfirmed: dict[int, tuple[ToBroker, Delivery | None]] = {}
        self.returned: set[int] = set()

    def publish(self, bridge: ToBroker, delivery: Delivery | None, props: Any, body: bytes) -> None:
        """basic.publish (mandatory); the outcome goes to ``bridge.confirmed`` later."""
        self.seq += 1
        seq = self.seq
        if props.headers is None:
            props.headers = {}
        props.headers[TAG_HEADER] = seq
        topo = bridge.topo
        self.unconfirmed[seq] = (bridge, delivery)
        try:
            self.channel.basic_publish(topo.exchange, topo.routing_key, body, props, mandatory=True)
        except Exception:
            del self.unconfirmed[seq]     # nothing was sent: the broker's numbering did not move
            self.seq -= 1
            raise
        self.stats["published"] += 1

    def on_return(self, _channel: Any, _method: Any, props: Any, _body: bytes) -> None:
        """basic.return: the message reached no queue; its ack follows."""
        seq = (props.headers or {}).get(TAG_HEADER)
        if isinstance(seq, int) and seq in self.unconfirmed:
            self.returned.add(seq)
        self.stats["returned"] += 1

    def on_confirm(self, frame: Any) -> None:
        """basic.ack / basic.nack (possibly `multiple`)."""
        method = frame.method
        ack = method.NAME == "Basic.Ack"
        tag = method.delivery_tag
        unconfirmed = self.unconfirmed
        if method.multiple:
            done = []
            for seq in unconfirmed:
                if seq > tag:
                    break
                done.append(seq)
            for seq in done:
                self._settle(seq, ack)
        elif tag in unconfirmed:
            self._settle(tag, ack)

    def _settle(self, seq: int, ack: bool) -> None:
        bridge, delivery = self.unconfirmed.pop(seq)
        if not ack:
            outcome = REJECTED
            self.stats["nacked"] += 1
        elif seq in self.returned:
            self.returned.discard(seq)
            outcome = RELEASED
        else:
            outcome = ACCEPTED
            self.stats["confirmed"] += 1
        bridge.confirmed(delivery, outcome)

    def fail_all(self) -> None:
        """The channel is gone: every unconfirmed delivery comes back RELEASED."""
        pending, self.unconfirmed = self.unconfirmed, {}
        self.returned.clear()
        for bridge, delivery in pending.values():
            bridge.confirmed(delivery, RELEASED)


class ToBroker:
    """One bridged address, mesh -> broker: a consumer link on the node feeding basic.publish."""

    def __init__(self, gateway: BrokerGateway, address: str, topo: Topology, persistent: bool,
                 window: int) -> None:
        self.gw = gateway
        self.address = address
        self.topo = topo
        self.persistent = persistent
        self.window = window
        self.link: Link | None = None
        self.unconfirmed = 0
        self.retiring = False           # draining before a detach: no new credit

    @property
    def attached(self) -> bool:
        return self.link is not None

    def attach(self) -> None:
        """Attach the consumer link (or take back a retiring one) and grant credit."""
        self.retiring = False
        if self.link is None:
            self.link = self.gw.local.receiver(self.address, self)
        self._top_up()

    def retire(self) -> None:
        """Stop taking messages: revoke credit, detach once nothing is unconfirmed."""
        if self.link is not None and not self.retiring:
            self.retiring = True
            self.link.drain(0)
            self.gw.local.kick()
            self._maybe_detach()

    def detach(self) -> None:
        if self.link is not None:
            link, self.link = self.link, None
            self.gw.local.close_link(link)

    def _maybe_detach(self) -> None:
        if self.retiring and self.unconfirmed == 0 and self.link is not None and self.link.credit == 0:
            self.detach()

    def _top_up(self) -> None:
        link = self.link
        if link is None or self.retiring:
            return
        want = self.window - self.unconfirmed - link.credit
        if want > 0 and (want >= max(1, self.window // 8) or link.credit == 0):
            link.flow(want)
            self.gw.local.kick()

    # ---- Proton events
    def on_delivery(self, _delivery: Delivery) -> None:
        link = self.link
        if link is None:
            return
        while True:
            d = link.current
            if d is None or not d.readable or d.partial:
                break
            if d.aborted:
                d.settle()
                link.advance()
                continue
            data = link.recv(d.pending)
            link.advance()
            self._publish(d, data or b"")
        self._top_up()
        self._maybe_detach()

    def _publish(self, d: Delivery, data: bytes) -> None:
        conf = self.gw.confirms
        presettled = d.settled
        if conf is None:
            self._settle(d, RELEASED)
            return
        try:
            props, body = to_091(data, self.persistent)
        except MappingError as exc:
            self._settle(d, REJECTED, ("amqp:decode-error", f"gateway cannot read the message: {exc}"))
            return
        try:
            conf.publish(self, None if presettled else d, props, body)
        except Exception as exc:       # channel closed under us, or a header pika cannot encode
            log.warning("gateway %s: publish to %s failed: %r", self.gw.name, self.address, exc)
            self._settle(d, REJECTED, ("amqp:internal-error", f"gateway cannot publish: {exc!r}"))
            return
        self.unconfirmed += 1
        if presettled:
            d.settle()

    def _settle(self, d: Delivery, outcome: int, condition: tuple[str, str] | None = None) -> None:
        if not d.settled:
            if condition is not None:
                d.local.condition = Condition(*condition)
            d.update(outcome)
        d.settle()
        self.gw.local.kick()

    def confirmed(self, delivery: Delivery | None, outcome: int) -> None:
        """The broker confirmed (or the channel lost) one publish of this bridge."""
        self.unconfirmed -= 1
        if delivery is not None:
            cond = ("amqp:internal-error", "the broker refused the message (basic.nack)") \
                if outcome == REJECTED else None
            self._settle(delivery, outcome, cond)
        self._top_up()
        self._maybe_detach()

    def on_flow(self, _link: Link) -> None:
        self._maybe_detach()

    def on_link_closed(self, link: Link) -> None:
        if link == self.link:
            self.link = None
            log.warning("gateway %s: the node closed the link for %s", self.gw.name, self.address)
