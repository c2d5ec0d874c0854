"""One broker connection on the node's asyncio loop (pika's AsyncioConnection) and its bridges.

Life cycle: connect -> open the confirm-mode publishing channel -> declare the broker objects ->
open one consumer channel per broker -> mesh address bridged -> attach the node links. Anything that
closes a channel or the connection tears the broker side down: every unconfirmed publish is RELEASED,
every link is detached (producers lose their credit, the broker requeues what was unacknowledged), and
the gateway reconnects with backoff.

Direction ``both`` on one address: the gateway's own consumer link would otherwise receive what its
own producer link feeds from the broker (a loop). So the gateway looks at the node's address table
(read only) and runs the address in one of two modes: while the mesh has no other consumer for the
address, the consumer link is attached and messages are stored in the broker; once another consumer
exists, the consumer link is drained and detached (producers then reach that consumer directly) and
the queue is fed to the mesh. Bridge a ``both`` address on one node only: two such nodes would see
each other's consumer link.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pika
from pika.adapters.asyncio_connection import AsyncioConnection

from router.addressing import address_key
from router.gateway.backoff import Backoff
from router.gateway.config import BrokerConfig
from router.gateway.consumer import FromBroker
from router.gateway.local import LocalConnection
from router.gateway.pika_io import install as install_write_coalescing
from router.gateway.publisher import Confirms, ToBroker
from router.gateway.topology import Topology, topology

log = logging.getLogger("router.gateway")
install_write_coalescing()

MODE_INTERVAL = 0.1     # seconds between looks at the address table (direction both)
STAT_NAMES = ("published", "confirmed", "returned", "nacked", "consumed", "acked", "requeued",
              "dead_lettered", "connects", "failures")


class BrokerGateway:
    """The bridge between one AMQP 0-9-1 broker and the node it runs in."""

    def __init__(self, config: BrokerConfig, node_id: str, loop: asyncio.AbstractEventLoop,
                 local: LocalConnection, core: Any = None) -> None:
        self.config = config
        self.name = config.name
        self.node_id = node_id
        self.loop = loop
        self.local = local
        self.core = core
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        self.connection: AsyncioConnection | None = None
        self.confirms: Confirms | None = None
        self.up = False
        self.stopping = False
        self.backoff = Backoff(f"gateway {self.name}: broker {_safe_url(config.url)}", log)
        self._retry: asyncio.TimerHandle | None = None
        self._mode_handle: asyncio.TimerHandle | None = None
        self.to_broker: dict[str, ToBroker] = {}
        self.from_broker: dict[str, FromBroker] = {}
        self.topologies: list[Topology] = []
        for b in config.addresses:
            topo = topology(b, node_id)
            self.topologies.append(topo)
            if b.to_broker:
                self.to_broker[b.address] = ToBroker(self, b.address, topo, b.durable, config.confirm_window)
            if b.from_broker:
                self.from_broker[b.address] = FromBroker(self, b.address, topo)
        self.both = [a for a in self.to_broker if a in self.from_broker]
        self.declare = [b.declare for b in config.addresses]

    # ---- start / stop -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._connect()
        if self.both:
            self._mode_handle = self.loop.call_later(MODE_INTERVAL, self._mode_tick)

    def stop(self) -> None:
        self.stopping = True
        for h in (self._retry, self._mode_handle):
            if h is not None:
                h.cancel()
        self._broker_down()
        conn, self.connection = self.connection, None
        if conn is not None and not (conn.is_closed or conn.is_closing):
            try:
                conn.close()
            except Exception:            # already closing underneath
                pass

    # ---- connecting -------------------------------------------------------------------------------------
    def _connect(self) -> None:
        self._retry = None
        if self.stopping:
            return
        params = pika.URLParameters(self.config.url)
        params.heartbeat = self.config.heartbeat
        params.connection_attempts = 1
        params.socket_timeout = 5
        params.stack_timeout = 10
        params.client_properties = {"connection_name": f"meshrouter {self.node_id} gateway {self.name}"}
        self.connection = AsyncioConnection(params, on_open_callback=self._on_open,
                                            on_open_error_callback=self._on_open_error,
                                            on_close_callback=self._on_closed, custom_ioloop=self.loop)

    def _retry_later(self, why: str) -> None:
        self.stats["failures"] += 1
        delay = self.backoff.failed(why)
        if not self.stopping:
            self._retry = self.loop.call_later(delay, self._connect)

    def _on_open_error(self, _conn: Any, exc: BaseException) -> None:
        self.connection = None
        self._retry_later(f"cannot connect ({exc!r})")

    def _on_closed(self, conn: Any, exc: BaseException) -> None:
        if conn is not self.connection and self.connection is not None:
            return
        was_up = self.up
        self._broker_down()
        self.connection = None
        if self.stopping:
            return
        if was_up:
            self.backoff.failures = 0     # a new failure streak: logged once by the backoff
        self._retry_later(f"connection closed during set-up ({exc!r})" if not was_up else f"lost ({exc!r})")

    def _on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_pub_channel)

    def _on_pub_channel(self, ch: Any) -> None:
        ch.add_on_close_callback(self._on_channel_closed)
        self.confirms = Confirms(ch, self.stats)
        ch.add_on_return_callback(self.confirms.on_return)
        ch.confirm_delivery(self.confirms.on_confirm, callback=lambda _f: self._declare(ch))

    def _declare(self, ch: Any) -> None:
        steps: list[Callable[[Callable[[Any], None]], None]] = []
        for topo, declare in zip(self.topologies, self.declare, strict=True):
            if not declare:
                continue
            if topo.exchange_type is not None:
                steps.append(lambda cb, t=topo: ch.exchange_declare(t.exchange, t.exchange_type,
                                                                    durable=t.durable, callback=cb))
            if topo.queue is not None:
                steps.append(lambda cb, t=topo: ch.queue_declare(t.queue, durable=t.durable,
                                                                 arguments=t.arguments or None, callback=cb))
            if topo.queue is not None and topo.bind_key is not None:
                steps.append(lambda cb, t=topo: ch.queue_bind(t.queue, t.exchange, routing_key=t.bind_key,
                                                              callback=cb))
        consumers = list(self.from_broker.values())
        opened: dict[FromBroker, Any] = {}

        def open_consumer_channels(_frame: Any = None) -> None:
            for bridge in consumers:
                if bridge not in opened:
                    self.connection.channel(on_open_callback=lambda c, b=bridge: got_channel(b, c))
                    return
            self._broker_up(opened)

        def got_channel(bridge: FromBroker, c: Any) -> None:
            c.add_on_close_callback(self._on_channel_closed)
            opened[bridge] = c
            open_consumer_channels()

        _chain(steps, open_consumer_channels)

    def _on_channel_closed(self, _ch: Any, reason: BaseException) -> None:
        """Any channel closing (a refused declare, a publish to a missing exchange...) resets the
        whole connection: simpler and safe (everything unconfirmed is released, the rest requeued)."""
        if self.stopping:
            return
        conn = self.connection
        if conn is not None and conn.is_open:
            log.warning("gateway %s: channel closed by the broker: %r", self.name, reason)
            conn.close()

    # ---- broker up / down -------------------------------------------------------------------------------
    def _broker_up(self, channels: dict[FromBroker, Any]) -> None:
        self.up = True
        self.stats["connects"] += 1
        self.backoff.succeeded()
        log.info("gateway %s: connected to %s, %d addresses bridged", self.name, _safe_url(self.config.url),
                 len(self.config.addresses))
        for bridge, ch in channels.items():
            bridge.start(ch)
        self._apply_modes()

    def _broker_down(self) -> None:
        self.up = False
        confirms, self.confirms = self.confirms, None
        if confirms is not None:
            confirms.fail_all()
        for bridge in self.to_broker.values():
            bridge.detach()
        for fb in self.from_broker.values():
            fb.stop()

    # ---- mode switch for direction both ---------------------------------------------------------------
    def other_consumers(self, address: str) -> int:
        """Consumers of ``address`` in the mesh other than this gateway's own link (read only)."""
        core = self.core
        if core is None:
            return 0
        a = core.addresses.get(address_key(address, self.node_id))
        if a is None:
            return 0
        mine = self.local.node_conn
        return sum(1 for c in a.consumers if c.conn is not mine) + len(a.remote)

    def _apply_modes(self) -> None:
        for address, tb in self.to_broker.items():
            fb = self.from_broker.get(address)
            if not self.up:
                continue
            if fb is None:
                tb.attach()
                continue
            feeding = self.other_consumers(address) > 0
            if feeding:
                tb.retire()
            elif not tb.attached or tb.retiring:
                tb.attach()
            fb.allow(feeding)

    def _mode_tick(self) -> None:
        try:
            self._apply_modes()
        except Exception:
            log.exception("gateway %s: internal error", self.name)
        self._mode_handle = self.loop.call_later(MODE_INTERVAL, self._mode_tick)

    # ---- state ------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {
            "connected": self.up,
            "unconfirmed": len(self.confirms.unconfirmed) if self.confirms is not None else 0,
            "inflight_to_mesh": sum(len(fb.inflight) for fb in self.from_broker.values()),
            "links": sum(1 for b in self.to_broker.values() if b.attached)
            + sum(1 for b in self.from_broker.values() if b.attached),
            **self.stats,
        }


def _chain(steps: list[Callable[[Callable[[Any], None]], None]], done: Callable[[Any], None]) -> None:
    """Run pika operations one after the other, each started from the previous one's callback."""
    def run(i: int, _frame: Any = None) -> None:
        if i == len(steps):
            done(None)
        else:
            steps[i](lambda f: run(i + 1, f))

    run(0)


def _safe_url(url: str) -> str:
    """The URL without its password."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at:
        return url
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}@{host}"
