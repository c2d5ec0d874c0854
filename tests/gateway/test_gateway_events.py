"""The gateway is driven by events, not timers (no broker needed: the node and its links are stand-ins).

A ``direction: both`` address switches between storing and feeding when the node reports a change of its
consumers, and a consumer link taken back while its drain was still being answered gets its credit
again on the node's FLOW, not on a later look.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from router.gateway.config import BridgeConfig, BrokerConfig
from router.gateway.gateway import BrokerGateway

WINDOW = 16


class FakeLink:
    """A NodeLink as the bridges use it: credit, drain, flow."""

    def __init__(self, address: str, handler: object, is_sender: bool) -> None:
        self.address, self.handler, self.is_sender = address, handler, is_sender
        self.credit = 0
        self.drain_mode = False
        self.flows: list[int] = []
        self.drains = 0

    def flow(self, n: int) -> None:
        self.credit += n
        self.drain_mode = False
        self.flows.append(n)

    def drain(self, n: int) -> None:
        self.credit += n
        self.drain_mode = True
        self.drains += 1

    def drained(self) -> None:
        self.credit = 0


class FakeLocal:
    """The gateway's in-process connection: records the links it opens and closes."""

    node_conn = "gateway-conn"

    def __init__(self) -> None:
        self.open: list[FakeLink] = []

    def receiver(self, address: str, handler: object) -> FakeLink:
        link = FakeLink(address, handler, False)
        self.open.append(link)
        return link

    def sender(self, address: str, handler: object) -> FakeLink:
        link = FakeLink(address, handler, True)
        self.open.append(link)
        return link

    def close_link(self, link: FakeLink) -> None:
        self.open.remove(link)

    def receivers(self) -> list[FakeLink]:
        return [lk for lk in self.open if not lk.is_sender]


class FakeNode:
    """The node API of router.gateway.node.GatewayNode, with consumers the test sets."""

    def __init__(self) -> None:
        self.consumers: dict[str, int] = {}
        self.watchers: dict[str, list[Callable[[], None]]] = {}
        self.asked: list[tuple[str, object]] = []

    def add_broker_connection(self, sock: object, peer: str) -> object:
        raise AssertionError("not used here")

    def watch_address(self, address: str, callback: Callable[[], None]) -> Callable[[], None]:
        self.watchers.setdefault(address, []).append(callback)
        return lambda: self.watchers[address].remove(callback)

    def consumers_of(self, address: str, exclude_conn: object = None) -> int:
        self.asked.append((address, exclude_conn))
        return self.consumers.get(address, 0)

    def change(self, address: str, consumers: int) -> None:
        """What the node does after a pass in which the consumers of ``address`` changed."""
        self.consumers[address] = consumers
        for callback in list(self.watchers.get(address, ())):
            callback()


class FakeChannel:
    """A pika consumer channel: enough for FromBroker to start, consume and cancel."""

    connection = None
    is_open = True

    def __init__(self) -> None:
        self.consuming = False

    def basic_qos(self, prefetch_count: int) -> None:
        pass

    def basic_consume(self, queue: str, callback: object, auto_ack: bool) -> str:
        self.consuming = True
        return "ctag"

    def basic_cancel(self, tag: str, callback: Callable[[object], None]) -> None:
        self.consuming = False
        callback(None)


class TimerSpy:
    """Records every timer the gateway sets on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timers: list[object] = []
        real = loop.call_later

        def call_later(delay: float, callback: Callable[..., object], *args: object) -> asyncio.TimerHandle:
            self.timers.append(callback)
            return real(delay, callback, *args)

        loop.call_later = call_later


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def up_gateway(loop: asyncio.AbstractEventLoop, address: str) -> tuple[BrokerGateway, FakeNode, FakeLocal]:
    """A gateway bridging ``address`` (direction both), broker up and lock taken, without a broker."""
    node, local = FakeNode(), FakeLocal()
    cfg = BrokerConfig("rabbit", confirm_window=WINDOW, addresses=(BridgeConfig(address, direction="both"),))
    gw = BrokerGateway(cfg, "A", loop, local, node)
    gw._connect = lambda: None                       # no broker: the test plays its events
    gw.start()
    gw.up = True
    gw.confirms = object()
    gw.consumer_channels = {address: FakeChannel()}
    gw.locks.owned.add(address)
    gw._apply_mode(address)                          # the lock was taken
    return gw, node, local


def test_both_switches_on_consumer_events_without_timers(loop):
    spy = TimerSpy(loop)
    gw, node, local = up_gateway(loop, "notify")
    assert node.asked == [("notify", "gateway-conn")]   # its own links do not count
    tb, fb = gw.to_broker["notify"], gw.from_broker["notify"]
    [rx] = local.receivers()
    assert rx.flows == [WINDOW] and not fb.allowed   # storing: consumer link with credit, queue kept

    node.change("notify", 1)                         # a consumer elsewhere in the mesh
    assert tb.retiring and rx.drains == 1 and fb.allowed
    rx.credit = 0                                    # the node answers the drain
    tb.on_flow()
    assert local.receivers() == [] and not tb.attached

    fb.link.credit = 5                               # the mesh consumer gives credit: feed
    fb.on_flow()
    assert gw.consumer_channels["notify"].consuming

    node.change("notify", 0)                         # it left: store again
    [rx2] = local.receivers()
    assert rx2.flows == [WINDOW] and not fb.allowed
    assert not gw.consumer_channels["notify"].consuming
    assert spy.timers == []                          # nothing polls

    gw.confirms = None                               # (a stand-in: nothing to release)
    gw.stop()
    assert node.watchers["notify"] == [] and local.open == []


def test_a_link_taken_back_during_its_drain_gets_credit_on_the_nodes_flow(loop):
    """Feed, then store again before the node answered the drain: the answer leaves the link at 0
    credit, and that FLOW must top it up (nothing else would: nothing is unconfirmed)."""
    gw, node, local = up_gateway(loop, "race")
    tb = gw.to_broker["race"]
    [rx] = local.receivers()
    node.change("race", 1)                           # retire: drain asked
    node.change("race", 0)                           # taken back before the answer: credit still there
    assert tb.attached and not tb.retiring and rx.flows == [WINDOW]
    rx.credit = 0                                    # the drain's answer arrives
    tb.on_flow()
    assert rx.flows == [WINDOW, WINDOW] and rx.credit == WINDOW
