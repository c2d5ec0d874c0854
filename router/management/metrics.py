"""Prometheus `/metrics` for one node (prometheus-client), read from the management entities.

prometheus-client's WSGI app runs in its own HTTP server thread and answers `/metrics` only (any other
path: 404); a scrape asks the node's event loop for one
consistent reading of the entities (the loop owns every table, so nothing is read from another thread)
and turns it into metric families. The forwarding path pays nothing for metrics beyond the counters
management keeps anyway.

A scrape's size and cost do not grow with the tables: per-address series exist only for the addresses
named in `metrics.addresses` and the `metrics.top_addresses` addresses with the most deliveries (never
node-scoped ones, `_topo/…`: dynamic reply addresses and the node's own services); links and
connections are summed by kind on the loop, not turned into rows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer

from router.config import MetricsConfig
from router.management.entities import NodeEntities
from router.management.policymetrics import policy_families
from router.node.histogram import Histogram

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT = 5.0   # seconds a scrape waits for the node's loop
OUTCOMES = ("accepted", "rejected", "released", "modified")


class NodeCollector:
    """A prometheus-client collector reading one node's state on the node's event loop."""

    def __init__(self, server: Any, loop: asyncio.AbstractEventLoop, named: tuple[str, ...] = (),
                 top: int = 0) -> None:
        self.server = server
        self.loop = loop
        self.entities = NodeEntities(server)
        self.named = {a.removeprefix("amqp:").lstrip("/") for a in named}
        self.top = top

    def _reading(self) -> dict[str, Any]:
        """Everything a scrape reports (runs on the node's loop)."""
        return {
            "node": self.entities.node(),
            "roles": self.entities.connection_roles(),
            "links": self.entities.link_totals(),
            "addresses": [self.entities.address_row(a) for a in self._exported()],
            "brokers": self.entities.brokers(),
            "forwarding": _copy(self.server.pump_latency),
            "policy": self.entities.policy(),
        }

    def _exported(self) -> list[Any]:
        """The addresses with per-address series: the named ones, then the busiest others (by deliveries)."""
        table = self.server.core.addresses
        chosen = [table[key] for key in sorted(self.named) if key in table]
        if self.top:
            busiest = heapq.nlargest(self.top + len(chosen),
                                     (a for a in table.values() if not a.key.startswith("_topo/")),
                                     key=lambda a: a.ingress + a.egress + a.transit)
            chosen += [a for a in busiest if a.key not in self.named][:self.top]
        return chosen

    def collect(self) -> Iterator[Metric]:
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def read() -> None:
            try:
                future.set_result(self._reading())
            except Exception as exc:           # reported to the scraper as a failed scrape
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(read)
        r = future.result(timeout=SCRAPE_TIMEOUT)
        yield from _families(r)


def _copy(h: Histogram) -> Histogram:
    out = Histogram(h.bounds)
    out.counts = list(h.counts)
    out.sum = h.sum
    return out


def _families(r: dict[str, Any]) -> Iterator[Metric]:
    node = r["node"]
    nid = node["id"]

    def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=("node", *labels))

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=("node", *labels))

    m = counter("meshrouter_deliveries", "Deliveries by direction: ingress (from clients), egress (to "
                "clients), transit (peer node to peer node)", ("direction",))
    for direction in ("Ingress", "Egress", "Transit"):
        m.add_metric([nid, direction.lower()], node[f"deliveries{direction}"])
    yield m
    m = counter("meshrouter_outcomes", "Outcomes settled back to producers", ("outcome",))
    for outcome in OUTCOMES:
        m.add_metric([nid, outcome], node[f"{outcome}Deliveries"])
    yield m
    for name, attr, doc in (
            ("meshrouter_presettled_deliveries", "presettledDeliveries", "Pre-settled deliveries"),
            ("meshrouter_dropped_presettled_deliveries", "droppedPresettledDeliveries",
             "Pre-settled deliveries dropped (no consumer)"),
            ("meshrouter_unroutable_deliveries", "unroutableDeliveries",
             "Unsettled deliveries with no destination (released to the producer)"),
            ("meshrouter_hop_limit_drops", "hopLimitDrops", "Deliveries stopped by the hop limit"),
            ("meshrouter_deliveries_delayed_1s", "deliveriesDelayed1Sec", "Deliveries settled after > 1 s"),
            ("meshrouter_deliveries_delayed_10s", "deliveriesDelayed10Sec",
             "Deliveries settled after > 10 s"),
            ("meshrouter_handshake_timeouts", "handshakeTimeouts",
             "Connections closed for not completing header, TLS, SASL and Open within handshake_timeout"),
            ("meshrouter_reads_deferred", "readsDeferred",
             "Reads of busy client connections put off so that other connections were served first"),
            ("meshrouter_control_queued", "controlQueued",
             "Large control messages (address floods) queued and applied in paced turns"),
            ("meshrouter_address_steps", "addressSteps",
             "Steps of at most 500 addresses indexing large absolute address updates (resyncs)"),
            ("meshrouter_credit_holds", "creditHolds",
             "Credit top-ups the memory budget refused (producers of slow consumers slowed)")):
        m = counter(name, doc)
        m.add_metric([nid], node[attr])
        yield m
    for name, attr, doc in (
            ("meshrouter_unsettled_deliveries", "unsettledDeliveries", "Deliveries in flight at this node"),
            ("meshrouter_stuck_deliveries", "deliveriesStuck", "Deliveries in flight for more than 10 s"),
            ("meshrouter_addresses", "addrCount", "Addresses in the table"),
            ("meshrouter_reachable_nodes", "nodeCount", "Other nodes reachable in the mesh"),
            ("meshrouter_uptime_seconds", "uptimeSeconds", "Seconds since the node started"),
            ("meshrouter_buffered_bytes", "bufferedBytes",
             "Bytes buffered for slow consumers and paused streams (node.memory_limit)"),
            ("meshrouter_held_producers", "heldProducers",
             "Producers waiting for credit on the memory budget")):
        m = gauge(name, doc)
        m.add_metric([nid], node[attr])
        yield m

    m = gauge("meshrouter_connections", "Open connections by role", ("role",))
    roles = dict(r["roles"])
    for role in ("normal", "inter-router", "internal"):
        m.add_metric([nid, role], roles.pop(role, 0))
    for role, n in sorted(roles.items()):
        m.add_metric([nid, role], n)
    yield m

    links = r["links"]
    m = gauge("meshrouter_links", "Attached links by type and direction", ("type", "dir"))
    for (kind, d), n in sorted(links.count.items()):
        m.add_metric([nid, kind, d], n)
    yield m
    m = gauge("meshrouter_link_unsettled", "Unsettled deliveries on links, by type and direction",
              ("type", "dir"))
    for (kind, d), n in sorted(links.unsettled.items()):
        m.add_metric([nid, kind, d], n)
    yield m
    m = counter("meshrouter_peer_deliveries", "Deliveries on the data links to and from each peer node",
                ("peer", "dir"))
    for (peer, d), n in sorted(links.peer_deliveries.items()):
        m.add_metric([nid, peer, d], n)
    yield m

    addresses = r["addresses"]
    m = counter("meshrouter_address_deliveries", "Deliveries per address and direction",
                ("address", "direction"))
    for a in addresses:
        for direction in ("Ingress", "Egress", "Transit"):
            m.add_metric([nid, a["identity"], direction.lower()], a[f"deliveries{direction}"])
    yield m
    m = gauge("meshrouter_address_consumers", "Consumers per address: local links, remote nodes",
              ("address", "where"))
    for a in addresses:
        m.add_metric([nid, a["identity"], "local"], a["subscriberCount"])
        m.add_metric([nid, a["identity"], "remote"], a["remoteCount"])
    yield m

    yield _histogram("meshrouter_forwarding_seconds", "Forwarding latency: input read -> every resulting "
                     "output written, per batch of events", nid, r["forwarding"])

    brokers = r["brokers"]
    if brokers:
        m = gauge("meshrouter_broker_up", "1 while the broker connection is up", ("broker",))
        for b in brokers:
            m.add_metric([nid, b["identity"]], 1 if b["state"] == "connected" else 0)
        yield m
        for attr in ("published", "confirmed", "returned", "nacked", "consumed", "acked", "requeued",
                     "deadLettered", "reconnects"):
            m = counter(f"meshrouter_broker_{_snake(attr)}", f"Broker gateway: {attr}", ("broker",))
            for b in brokers:
                m.add_metric([nid, b["identity"]], b.get(attr) or 0)
            yield m
        m = gauge("meshrouter_broker_unconfirmed", "Broker gateway: publishes awaiting confirmation",
                  ("broker",))
        for b in brokers:
            m.add_metric([nid, b["identity"]], b.get("unconfirmed") or 0)
        yield m
    yield from policy_families(nid, r.get("policy") or [])


def _histogram(name: str, doc: str, nid: str, h: Histogram) -> HistogramMetricFamily:
    buckets = [("+Inf" if bound == float("inf") else repr(bound), n) for bound, n in h.cumulative()]
    m = HistogramMetricFamily(name, doc, labels=("node",))
    m.add_metric([nid], buckets, h.sum)
    return m


def _snake(name: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name)


class MetricsListener:
    """The node's optional HTTP listener for Prometheus."""

    def __init__(self, config: MetricsConfig, server: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(server, loop, tuple(config.addresses), config.top_addresses))
        # raises OSError when the port is taken, like the AMQP listeners
        server_class = _IPv6Server if ":" in config.host else ThreadingWSGIServer
        try:
            self.httpd = make_server(config.host, config.port, only_metrics(make_wsgi_app(self.registry)),
                                     server_class, handler_class=_QuietHandler)
        except OSError as exc:
            raise OSError(exc.errno, f"metrics on {config.host}:{config.port}: {exc.strerror}") from None
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)
        self.thread.start()
        self.url = f"http://{config.host}:{self.httpd.server_port}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


METRICS_PATHS = ("/metrics", "/metrics/")
NOT_FOUND = b"not found: this server answers GET /metrics only\n"


def only_metrics(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """The WSGI `app` on /metrics; 404 on every other path."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") in METRICS_PATHS:
            return app(environ, start_response)
        headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(NOT_FOUND)))]
        start_response("404 Not Found", headers)
        return [NOT_FOUND]

    return serve


class _IPv6Server(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass
