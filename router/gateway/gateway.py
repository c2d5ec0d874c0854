"""One broker connection on the node's asyncio loop (pika's AsyncioConnection) and its bridges.

Life cycle: connect -> open the confirm-mode publishing channel -> declare the broker objects ->
open one consumer channel per broker -> mesh address bridged -> attach the node links. Anything that
closes a channel or the connection tears the broker side down: every unconfirmed publish is RELEASED,
every link is detached (producers lose their credit, the broker requeues what was unacknowledged), and
the gateway reconnects with backoff. A broker that goes silent without closing TCP is noticed by
:class:`~router.gateway.liveness.Watchdog` within 1.5–1.75 heartbeats and treated the same way.

Direction ``both`` on one address: the gateway's own consumer link would otherwise receive what its
own producer link feeds from the broker (a loop). So the gateway runs the address in one of two
modes: while the mesh has no other consumer for the address, the consumer link is attached and
messages are stored in the broker; once another consumer exists, the consumer link is drained and
detached (producers then reach that consumer directly) and the queue is fed to the mesh. Only one node
may do this for a given address: a lock queue in the broker decides which
(:mod:`router.gateway.ownership`); the others stand by.

The mode is decided again on events only, never on a timer: the node reports a change of the
address's consumers (:meth:`~router.gateway.node.GatewayNode.watch_address`, after the node's pass
that made it) and the gateway counts them without its own links
(:meth:`~router.gateway.node.GatewayNode.consumers_of`); the broker coming up and the lock being taken
decide it too. Credit and drains on the bridge links are handled by the bridges as they arrive. The
gateway's timers are real timeouts only: the reconnect backoff, the heartbeat watchdog and the lock
retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import pika

from router.adapter.inprocess import NodeConnection
from router.gateway.backoff import Backoff
from router.gateway.config import BrokerConfig
from router.gateway.consumer import FromBroker
from router.gateway.context import BridgeContext
from router.gateway.delivery091 import GatewayConnection
from router.gateway.liveness import Watchdog, abort
from router.gateway.node import GatewayNode
from router.gateway.ownership import BridgeLocks
from router.gateway.publisher import Confirms, ToBroker
from router.gateway.topology import Topology, topology

log = logging.getLogger("router.gateway")


class BrokerGateway:
    """The bridge between one AMQP 0-9-1 broker and the node it runs in."""

    def __init__(self, config: BrokerConfig, node_id: str, loop: asyncio.AbstractEventLoop,
                 local: NodeConnection, node: GatewayNode) -> None:
        self.config = config
        self.name = config.name
        self.node_id = node_id
        self.loop = loop
        self.local = local
        self.node = node
        self.url = safe_url(config.url)
        ctx = BridgeContext(config.name, loop, local)
        self.stats = ctx.stats
        self.connection: GatewayConnection | None = None
        self.confirms: Confirms | None = None
        self.peak_unconfirmed = 0       # most unconfirmed publishes at once, over every connection
        self.publish_writes = 0         # publish buffers written, over every connection
        self.up = False
        self.stopping = False
        self.backoff = Backoff(f"gateway {self.name}: broker {self.url}", log)
        self._retry: asyncio.TimerHandle | None = None
        self._unwatch: list[Callable[[], None]] = []
        self._watchdog: Watchdog | None = None
        self.to_broker: dict[str, ToBroker] = {}
        self.from_broker: dict[str, FromBroker] = {}
        self.topologies: list[Topology] = []
        for b in config.addresses:
            topo = topology(b, node_id)
            self.topologies.append(topo)
            if b.to_broker:
                self.to_broker[b.address] = ToBroker(ctx, b.address, topo, b.durable, config.confirm_window)
            if b.from_broker:
                self.from_broker[b.address] = FromBroker(ctx, b.address, topo)
        self.both = [a for a in self.to_broker if a in self.from_broker]
        self.locks = BridgeLocks(self.name, self.both, loop, self._apply_mode)
        self.consumer_channels: dict[str, Any] = {}
        self.declare = [b.declare for b in config.addresses]

    # ---- start / stop -----------------------------------------------------------------------------------
    def start(self) -> None:
        for address in self.both:
            self._unwatch.append(self.node.watch_address(address, partial(self._consumers_changed, address)))
        self._connect()

    def stop(self) -> None:
        self.stopping = True
        if self._retry is not None:
            self._retry.cancel()
        unwatch, self._unwatch = self._unwatch, []
        for stop_watching in unwatch:
            stop_watching()
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
        self.connection = GatewayConnection(params, on_open_callback=self._on_open,
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
        if self.config.heartbeat > 0:
            self._watchdog = Watchdog(self.loop, conn, self.config.heartbeat,
                                      lambda silent: self._on_silent(conn, silent))
        conn.channel(on_open_callback=self._on_pub_channel)

    def _on_silent(self, conn: Any, silent: float) -> None:
        if conn is not self.connection:
            return
        self.stats["silent"] += 1
        log.warning("gateway %s: broker %s silent for %.1f s (heartbeat %d s): dropping the connection",
                    self.name, self.url, silent, self.config.heartbeat)
        abort(conn, f"no data or heartbeat from the broker for {silent:.1f} s")

    def _on_pub_channel(self, ch: Any) -> None:
        ch.add_on_close_callback(self._on_channel_closed)
        confirms = self.confirms = Confirms(ch, self.stats, self.config.confirm_window, self.loop)
        ch.add_on_return_callback(confirms.on_return)

        def selected(_frame: Any) -> None:
            self.connection.fast_confirms(ch, confirms.confirm)
            self._declare(ch)

        ch.confirm_delivery(confirms.on_confirm, callback=selected)

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
        consumers = list(self.from_broker)
        opened: dict[str, Any] = {}

        def open_consumer_channels(_frame: Any = None) -> None:
            for address in consumers:
                if address not in opened:
                    self.connection.channel(on_open_callback=lambda c, a=address: got_channel(a, c))
                    return
            self._broker_up(opened)

        def got_channel(address: str, c: Any) -> None:
            c.add_on_close_callback(self._on_channel_closed)
            opened[address] = c
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
    def _broker_up(self, channels: dict[str, Any]) -> None:
        self.up = True
        self.stats["connects"] += 1
        self.backoff.succeeded()
        log.info("gateway %s: connected to %s, %d addresses bridged", self.name, self.url,
                 len(self.config.addresses))
        self.consumer_channels = channels
        for address, ch in channels.items():
            if address not in self.both:         # a `both` address starts once its lock is taken
                self.from_broker[address].start(ch)
        self.locks.start(self.connection)
        self._apply_modes()

    def _broker_down(self) -> None:
        self.up = False
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        self.locks.stop()
        self.consumer_channels = {}
        confirms, self.confirms = self.confirms, None
        if confirms is not None:
            self.peak_unconfirmed = max(self.peak_unconfirmed, confirms.peak)
            self.publish_writes += confirms.publisher.writes
            confirms.fail_all()
        for bridge in self.to_broker.values():
            bridge.detach()
        for fb in self.from_broker.values():
            fb.stop()

    # ---- mode switch for direction both ---------------------------------------------------------------
    def other_consumers(self, address: str) -> int:
        """Consumers of ``address`` in the mesh other than this gateway's own link."""
        return self.node.consumers_of(address, exclude_conn=self.local.node_conn)

    def _apply_modes(self) -> None:
        """The broker is up: attach what is to be attached, for every address."""
        for address in self.to_broker:
            self._apply_mode(address)

    def _apply_mode(self, address: str) -> None:
        """Attach ``address``'s consumer link; for a ``both`` address bridged here, store (consumer link
        attached) or feed (queue to the mesh) depending on the other consumers it has now."""
        if not self.up:
            return
        tb = self.to_broker[address]
        fb = self.from_broker.get(address)
        if fb is None:
            tb.attach(self.confirms)
            return
        if address not in self.locks.owned:
            return                                # another node bridges it: stand by
        if fb.channel is None:
            fb.start(self.consumer_channels[address])
        feeding = self.other_consumers(address) > 0
        if feeding:
            tb.retire()
        elif not tb.attached or tb.retiring:
            tb.attach(self.confirms)
        fb.allow(feeding)

    def _consumers_changed(self, address: str) -> None:
        """The node's watch: the consumers of a ``both`` address changed."""
        try:
            self._apply_mode(address)
        except Exception:
            log.exception("gateway %s: internal error", self.name)

    # ---- state ------------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """``connected``, ``connecting`` (an attempt in progress) or ``down`` (waiting to retry)."""
        if self.up:
            return "connected"
        if self.connection is not None and not self.stopping:
            return "connecting"
        return "down"

    def counters(self) -> dict[str, int]:
        """Totals since the node started, and what is in flight now."""
        conf = self.confirms
        peak = max(self.peak_unconfirmed, conf.peak if conf is not None else 0)
        return {
            **self.stats,
            "unconfirmed": len(conf.unconfirmed) if conf is not None else 0,
            "waiting": len(conf.waiting) if conf is not None else 0,
            "peak_unconfirmed": peak,
            "publish_writes": self.publish_writes + (conf.publisher.writes if conf is not None else 0),
            "inflight_to_mesh": sum(len(fb.inflight) for fb in self.from_broker.values()),
            "reconnects": max(0, self.stats["connects"] - 1),
        }

    def snapshot(self) -> dict[str, Any]:
        return {
            "connected": self.up,
            "state": self.state,
            "url": self.url,
            "links": sum(1 for b in self.to_broker.values() if b.attached)
            + sum(1 for b in self.from_broker.values() if b.attached),
            "standby": self.locks.standby if self.up else [],
            **self.counters(),
        }

    def entity(self) -> dict[str, Any]:
        """The management ``broker`` entity (docs/MANAGEMENT.md)."""
        c = self.counters()
        return {
            "identity": self.name,
            "url": self.url,
            "state": self.state,
            "addresses": [b.address for b in self.config.addresses],
            "published": c["published"],
            "confirmed": c["confirmed"],
            "returned": c["returned"],
            "nacked": c["nacked"],
            "unconfirmed": c["unconfirmed"],
            "consumed": c["consumed"],
            "acked": c["acked"],
            "requeued": c["requeued"],
            "deadLettered": c["dead_lettered"],
            "reconnects": c["reconnects"],
        }


def _chain(steps: list[Callable[[Callable[[Any], None]], None]], done: Callable[[Any], None]) -> None:
    """Run pika operations one after the other, each started from the previous one's callback."""
    def run(i: int, _frame: Any = None) -> None:
        if i == len(steps):
            done(None)
        else:
            steps[i](lambda f: run(i + 1, f))

    run(0)


def safe_url(url: str) -> str:
    """The URL without its password."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at:
        return url
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}@{host}"
