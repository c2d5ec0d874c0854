"""Prometheus `/metrics` for one node (prometheus-client), read from the management entities.

prometheus-client's HTTP server runs in its own thread; a scrape asks the node's event loop for one
consistent reading of the entities (the loop owns every table, so nothing is read from another thread)
and turns it into metric families. The forwarding path pays nothing for metrics beyond the counters
management keeps anyway.

Per-address series leave out node-scoped addresses (`_topo/…`: dynamic reply addresses and the node's
own services), whose number grows with every RPC client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from router.config import MetricsConfig
from router.management.entities import NodeEntities
from router.management.policymetrics import policy_families
from router.node.histogram import Histogram

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT = 5.0   # seconds a scrape waits for the node's loop
OUTCOMES = ("accepted", "rejected", "released", "modified")


class NodeCollector:
    """A prometheus-client collector reading one node's state on the node's event loop."""

    def __init__(self, server: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop
        self.entities = NodeEntities(server)

    def _reading(self) -> dict[str, Any]:
        """Everything a scrape reports (runs on the node's loop)."""
        return {
            "node": self.entities.node(),
            "connections": self.entities.connections(),
            "links": self.entities.links(),
            "addresses": [a for a in self.entities.addresses() if not a["identity"].startswith("_topo/")],
            "brokers": self.entities.brokers(),
            "forwarding": _copy(self.server.pump_latency),
            "policy": self.entities.policy(),
        }

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
             "Connections closed for not completing header, TLS, SASL and Open within handshake_timeout")):
        m = counter(name, doc)
        m.add_metric([nid], node[attr])
        yield m
    for name, attr, doc in (
            ("meshrouter_unsettled_deliveries", "unsettledDeliveries", "Deliveries in flight at this node"),
            ("meshrouter_stuck_deliveries", "deliveriesStuck", "Deliveries in flight for more than 10 s"),
            ("meshrouter_addresses", "addrCount", "Addresses in the table"),
            ("meshrouter_reachable_nodes", "nodeCount", "Other nodes reachable in the mesh"),
            ("meshrouter_uptime_seconds", "uptimeSeconds", "Seconds since the node started")):
        m = gauge(name, doc)
        m.add_metric([nid], node[attr])
        yield m

    m = gauge("meshrouter_connections", "Open connections by role", ("role",))
    roles: dict[str, int] = {}
    for c in r["connections"]:
        roles[c["role"]] = roles.get(c["role"], 0) + 1
    for role in ("normal", "inter-router", "internal"):
        m.add_metric([nid, role], roles.pop(role, 0))
    for role, n in sorted(roles.items()):
        m.add_metric([nid, role], n)
    yield m

    links = r["links"]
    m = gauge("meshrouter_links", "Attached links by type and direction", ("type", "dir"))
    kinds: dict[tuple[str, str], int] = {}
    for link in links:
        k = (link["linkType"], link["linkDir"])
        kinds[k] = kinds.get(k, 0) + 1
    for (kind, d), n in sorted(kinds.items()):
        m.add_metric([nid, kind, d], n)
    yield m
    m = gauge("meshrouter_link_unsettled", "Unsettled deliveries on links, by type and direction",
              ("type", "dir"))
    unsettled: dict[tuple[str, str], int] = {}
    for link in links:
        if link["unsettledCount"] is not None:
            k = (link["linkType"], link["linkDir"])
            unsettled[k] = unsettled.get(k, 0) + link["unsettledCount"]
    for (kind, d), n in sorted(unsettled.items()):
        m.add_metric([nid, kind, d], n)
    yield m
    m = counter("meshrouter_peer_deliveries", "Deliveries on the data links to and from each peer node",
                ("peer", "dir"))
    for link in links:
        if link["linkType"] == "inter-router":
            m.add_metric([nid, link["peerNode"] or "", link["linkDir"]], link["deliveryCount"])
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
        self.registry.register(NodeCollector(server, loop))
        # raises OSError when the port is taken, like the AMQP listeners
        self.httpd, self.thread = start_http_server(config.port, config.host, registry=self.registry)
        self.url = f"http://{config.host}:{self.httpd.server_port}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
