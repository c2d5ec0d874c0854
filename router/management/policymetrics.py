"""Prometheus families of the policy (router.policy): connections and denials per listener, vhost, group.

Read from the management `policy` entity (router.management.entities.NodeEntities.policy), so `/metrics`
and `$management` count the same things.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

LABELS = ("node", "listener", "vhost", "group")
DENIALS = (("connection", "connectionsDenied"), ("session", "sessionsDenied"), ("link", "linksDenied"),
           ("message", "messagesDenied"))


def policy_families(nid: str, rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """`meshrouter_policy_connections` (open now) and `meshrouter_policy_denials_total` by kind."""
    if not rows:
        return
    m = GaugeMetricFamily("meshrouter_policy_connections", "Client connections open, by listener, vhost "
                          "and policy group", labels=LABELS)
    for r in rows:
        m.add_metric([nid, r["listener"], r["vhost"], r["group"]], r["connectionCount"])
    yield m
    m = CounterMetricFamily("meshrouter_policy_denials", "Refused by policy: connections (Open), sessions "
                            "(Begin), links (attach), messages (anonymous relay)", labels=(*LABELS, "kind"))
    for r in rows:
        for kind, attr in DENIALS:
            m.add_metric([nid, r["listener"], r["vhost"], r["group"], kind], r[attr])
    yield m
