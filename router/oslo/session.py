"""One connection's links (loop thread only): the reply receiver, the sender links (router.rpc's
:class:`~router.rpc.sending.Outbox`) and the receivers of the subscriptions.

A :class:`Session` lives as long as its connection. It is ready once the router has attached the dynamic
reply receiver (its address is every call's ``reply-to``); the addresser is chosen then, from the peer's
Open ``product``. Whatever happens to the connection is reported to the :class:`Controller
<router.oslo.controller.Controller>`, which fails over to the next host.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proton import Message

from router.rpc.credit import CreditWindow
from router.rpc.errors import RpcUndeliverable
from router.rpc.sending import Outbox
from router.rpc.wire import ACCEPTED, MODIFIED, Condition, Link, Outcome, describe

from .addressing import Addresser, Dest, choose
from .hosts import Host
from .wire import ConnectSettings, DriverWire

log = logging.getLogger(__name__)


class Subscription:
    """A listener's addresses (resolved per session), its credit per link and where messages go."""

    def __init__(self, dests: list[Dest], server: bool, credit: int,
                 deliver: Callable[[Message, Token], None]) -> None:
        self.dests = dests
        self.server = server             # RPC server: unicast + multicast + anycast of each dest
        self.credit = credit
        self.deliver = deliver
        self.refused: dict[str, str] = {}        # address -> why the router refused it
        self.attached: set[str] = set()
        self.changed = threading.Condition()
        self.active = True

    def addresses(self, addresser: Addresser | None) -> list[str]:
        assert addresser is not None
        out: list[str] = []
        for d in self.dests:
            out.extend(addresser.server_addresses(d) if self.server else [addresser.anycast(d)])
        return out


@dataclass(eq=False)
class Receiving:
    """One receiver link of a subscription on this session."""

    sub: Subscription
    address: str
    link: Link
    window: CreditWindow


@dataclass(eq=False)
class Token:
    """What settles one received message: the session, link and delivery it came on."""

    session: Session
    rx: Receiving
    delivery: Any
    settled: bool
    done: bool = False


class Session:
    """The links of one connection to ``host``; the :class:`~router.rpc.wire.WireHandler` of its wire."""

    def __init__(self, ctrl: Any, host: Host, settings: ConnectSettings, container_id: str) -> None:
        # ctrl: the router.oslo.controller.Controller (not imported: it imports this module)
        self.ctrl = ctrl
        self.loop = ctrl.loop
        self.host = host
        self.wire = DriverWire(ctrl.loop, self, host, settings, container_id)
        self.outbox = Outbox(ctrl.loop, self.wire, name=f"oslo {host}", max_links=ctrl.max_links)
        self.reply_link: Link | None = None
        self.reply_window = CreditWindow(ctrl.reply_credit, f"{host} replies")
        self.reply_to: str | None = None
        self.addresser: Addresser | None = None
        self.receivers: dict[str, Receiving] = {}     # link name -> receiving
        self.used: set[str | None] = set()            # sender targets used since the last idle purge
        self.ready = False
        self.dead = False

    def open(self) -> None:
        """Connect (blocking for the TCP connect) and ask for the reply receiver. Raises OSError or
        ValueError."""
        self.loop.before_sleep = self.wire.pump
        self.wire.open(self.wire.settings.connect_timeout)
        self.reply_link = self.wire.open_receiver(None, dynamic=True)

    def close(self) -> None:
        self.dead = True
        if not self.wire.close():
            self.wire.free()

    # ---- subscriptions
    def subscribe(self, sub: Subscription, only: str | None = None) -> None:
        """Open ``sub``'s receivers on this (ready) session (``only``: just the one for that address)."""
        for address in sub.addresses(self.addresser):
            if only is not None and address != only:
                continue
            link = self.wire.open_receiver(address)
            self.receivers[link.name] = Receiving(sub, address, link, CreditWindow(sub.credit, address))

    def unsubscribe(self, sub: Subscription) -> None:
        for name, rx in list(self.receivers.items()):
            if rx.sub is sub:
                rx.window.freeze()
                rx.link.close()
                self.receivers.pop(name, None)

    def freeze(self, sub: Subscription) -> None:
        """No more credit for ``sub`` (its listener stopped)."""
        for rx in self.receivers.values():
            if rx.sub is sub:
                rx.window.freeze()

    def settle(self, token: Token, state: int) -> None:
        if token.done or self.dead or token.rx.link.pn is None:
            return
        token.done = True
        if not token.settled:
            # written at once: an RPC server accepts before its endpoint runs, so a server that dies in the
            # endpoint leaves an accepted request and the caller a MessagingTimeout (not a lazy ack that
            # never left, which the mesh would answer MODIFIED)
            self.wire.settle(token.delivery, state)
            token.rx.window.on_settled(token.rx.link)

    # ---- WireHandler
    def on_link_opened(self, link: Link) -> None:
        if link is self.reply_link:
            self.reply_to = link.remote_source_address
            if not self.reply_to:
                self.lost("the router assigned no dynamic reply address")
                return
            self.reply_window.open(link)
            props = self.wire.remote_properties()
            o = self.ctrl.opts
            self.addresser = Addresser(choose(o.addressing_mode, props.get("product")), self.ctrl.exchange,
                                       self.ctrl.prefixes, self.ctrl.vhost if o.pseudo_vhost else None)
            self.ready = True
            self.ctrl.on_ready(self, props)
            return
        rx = self.receivers.get(link.name)
        if rx is not None:
            rx.window.open(link)
            # told once this turn's events are all handled: a refusal is an attach and a detach at once
            self.loop.defer(self._attached, rx)

    def _attached(self, rx: Receiving) -> None:
        if not self.dead and self.receivers.get(rx.link.name) is rx:
            self.ctrl.on_subscribed(rx.sub, rx.address, None)

    def on_link_flow(self, link: Link) -> None:
        self.outbox.on_flow(link)

    def on_outcome(self, link: Link, delivery: Any, outcome: Outcome) -> None:
        self.outbox.on_outcome(delivery, outcome)

    def on_message(self, link: Link, delivery: Any, data: bytes, settled: bool) -> None:
        msg = Message()
        if link is self.reply_link:
            self.reply_window.on_delivery(link, settled=True)
            try:
                msg.decode(data)
            except Exception as exc:      # noqa: BLE001 - a reply we cannot read matches no call
                log.warning("oslo amqp: undecodable reply from %s dropped: %s", self.host, exc)
                self.wire.settle(delivery, None if settled else MODIFIED, lazy=True)
                return
            known = self.ctrl.on_reply(msg)
            # a reply nobody waits for (late, or for a call that failed): 14.x answers MODIFIED too
            self.wire.settle(delivery, None if settled else (ACCEPTED if known else MODIFIED), lazy=True)
            return
        rx = self.receivers.get(link.name)
        if rx is None:
            self.wire.settle(delivery, None if settled else MODIFIED)
            return
        rx.window.on_delivery(link, settled=settled)
        try:
            msg.decode(data)
        except Exception as exc:          # noqa: BLE001
            log.warning("oslo amqp: undecodable message on %s rejected: %s", rx.address, exc)
            if not settled:
                self.wire.settle(delivery, 0x25)      # REJECTED
                rx.window.on_settled(link)
            return
        rx.sub.deliver(msg, Token(self, rx, delivery, settled))

    def on_link_closed(self, link: Link, condition: Condition | None) -> None:
        if link.is_sender:
            text = describe(condition) or "closed by the router"
            self.outbox.on_link_closed(link, RpcUndeliverable(
                f"sender link to {link.target}: {text}", "LINK-CLOSED",
                condition[0] if condition is not None else None))
            return
        if link is self.reply_link:
            self.lost(f"reply receiver closed by the router: {describe(condition) or 'no condition'}")
            self.close()
            return
        rx = self.receivers.pop(link.name, None)
        if rx is not None and not self.dead:
            self.ctrl.on_subscribed(rx.sub, rx.address, describe(condition) or "closed by the router")

    def lost(self, why: str) -> None:
        if self.dead:
            return
        self.dead = True
        self.ctrl.on_lost(self, why)
