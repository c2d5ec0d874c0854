"""Questions operators ask, answered from the job's tables (report.html's "Questions" section and the
summary's ``questions``, hence ``--json``).

- top addresses by volume and by latency (p99 at the nodes that wrote the records). Volume counts each
  message once, where it entered the mesh (its ingress record: ``in_link`` client or broker), not once per
  node on its path: 200 messages sent across a chain of three nodes are 200, not 600;
- undeliverable deliveries (outcome released or modified) by address and by node;
- slowest paths, ingress -> egress, by end-to-end p99;
- two time windows compared: the first and second half of the records' time span (per address:
  messages, bytes, undeliverable, p50/p99 latency), from the ``windows`` table (router.analytics.tables);
- per-link utilisation over time: per inter-router link (node -> next_hop) its totals, peak second and
  averages (the ``link_summary`` table) and its messages and bytes per time bucket (``link_utilisation``,
  1 s buckets, re-bucketed here to at most MAX_BUCKETS buckets over the records' time span).

The mesh's own traffic (management requests ``$management[/...]``, ``_topo/0/<node>/$management[/...]``,
and their replies to ``_topo/0/<node>/temp.*``) is kept out of every per-address answer and counted on
its own line (``internal``: addresses and messages at the ingress); the Parquet tables keep those rows.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

TOP = 10
UNDELIVERABLE = ("released", "modified")
MAX_BUCKETS = 300                       # time buckets per link in the summary's series, at most
BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)   # bucket widths (s) to choose from


INTERNAL_RE = re.compile(r"^(_topo/0/[^/]+/)?(\$management(/.*)?|temp\..*)$")


def is_internal(address: object) -> bool:
    """True for the mesh's own management traffic: ``$management[/...]``, ``_topo/0/N/$management[/...]``,
    and the dynamic reply addresses ``_topo/0/N/temp.*``."""
    return isinstance(address, str) and INTERNAL_RE.match(address) is not None


def external(rows: Iterable[dict], key: str = "address") -> list[dict]:
    """``rows`` without those of internal addresses."""
    return [r for r in rows if not is_internal(r.get(key))]


def ingress_volume(producers: list[dict]) -> dict[object, int]:
    """Messages per address, each counted once: at its ingress (the ``top_producers`` rows, records
    with ``in_link`` client or broker)."""
    volume: dict[object, int] = defaultdict(int)
    for r in producers:
        volume[r["address"]] += r["messages"]
    return volume


def _top(rows: list[dict], key: str, n: int = TOP) -> list[dict]:
    return sorted(rows, key=lambda r: (-(r[key] or 0), str(r.get("address") or r.get("node") or "")))[:n]


def undeliverable(outcomes: list[dict], key: str) -> list[dict]:
    """(key, released, modified, undeliverable, messages) per `key` that had any, most first."""
    per: dict[object, dict] = defaultdict(lambda: {"released": 0, "modified": 0, "messages": 0})
    for r in outcomes:
        p = per[r[key]]
        p["messages"] += r["messages"]
        if r["outcome"] in UNDELIVERABLE:
            p[r["outcome"]] += r["messages"]
    rows = [{key: k, **v, "undeliverable": v["released"] + v["modified"]} for k, v in per.items()]
    return sorted((r for r in rows if r["undeliverable"]), key=lambda r: (-r["undeliverable"], str(r[key])))


def bucket_seconds(first: int, last: int) -> int:
    """The narrowest of BUCKETS (then whole hours) that covers seconds ``first``..``last`` in at most
    MAX_BUCKETS buckets."""
    span = last - first + 1
    for width in BUCKETS:
        if span <= width * MAX_BUCKETS:
            return width
    return 3600 * -(-span // (3600 * MAX_BUCKETS))


def link_utilisation(summary: list[dict], cells: list[dict]) -> dict:
    """Per inter-router link (busiest first): its ``link_summary`` row and ``series``, its messages and
    bytes per bucket of ``bucket_s`` seconds (``start``: the bucket's first epoch second, a multiple of
    the width; buckets without traffic left out). One width for every link, from the span of all."""
    if not cells:
        return {"bucket_s": 1, "links": []}
    width = bucket_seconds(min(c["second"] for c in cells), max(c["second"] for c in cells))
    series: dict[tuple, dict[int, list[int]]] = defaultdict(dict)
    for c in cells:
        b = series[(c["node"], c["next_hop"])].setdefault(c["second"] // width * width, [0, 0])
        b[0] += c["messages"]
        b[1] += c["bytes"]
    links = [{**r, "series": [{"start": t, "messages": m, "bytes": n}
                              for t, (m, n) in sorted(series[(r["node"], r["next_hop"])].items())]}
             for r in summary]
    return {"bucket_s": width, "links": links}


def answers(data: dict[str, list[dict]]) -> dict[str, object]:
    """Every answer as a list of rows (JSON-ready)."""
    volume = ingress_volume(data["top_producers"])
    by_volume = [{"address": a, "messages": n} for a, n in volume.items() if not is_internal(a)]
    internal = {a: n for a, n in volume.items() if is_internal(a)}
    return {
        "top_addresses_by_volume": _top(by_volume, "messages"),
        "top_addresses_by_latency": [
            {k: r[k] for k in ("address", "deliveries", "p50_ms", "p99_ms", "max_ms")}
            for r in _top(external(data["latency_address"]), "p99_ms")],
        "undeliverable_by_address": undeliverable(external(data["outcomes_address"]), "address")[:TOP],
        "undeliverable_by_node": undeliverable(data["outcomes_node"], "node"),
        "slowest_paths": [{k: r[k] for k in ("ingress", "egress", "deliveries", "p50_ms", "p99_ms")}
                          for r in sorted(data["pair_latency"], key=lambda r: -(r["p99_ms"] or 0))[:TOP]],
        "windows": external(data.get("windows", [])),
        "internal": {"addresses": len(internal), "messages": sum(internal.values())},
        "link_utilisation": link_utilisation(data.get("link_summary", []), data.get("link_utilisation", [])),
    }
