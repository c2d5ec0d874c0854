"""Questions operators ask, answered from the job's tables (report.html's "Questions" section and the
summary's ``questions``, hence ``--json``).

- top addresses by volume (messages settled) and by latency (p99 at the nodes that wrote the records);
- undeliverable deliveries (outcome released or modified) by address and by node;
- slowest paths, ingress -> egress, by end-to-end p99;
- two time windows compared: the first and second half of the records' time span (per address:
  messages, bytes, undeliverable, p50/p99 latency), from the ``windows`` table (router.analytics.tables).

Not answered: per-link utilisation over time (delivery records name the link kind, not the link).
"""

from __future__ import annotations

from collections import defaultdict

TOP = 10
UNDELIVERABLE = ("released", "modified")


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


def answers(data: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Every answer as a list of rows (JSON-ready)."""
    volume: dict[object, int] = defaultdict(int)
    for r in data["outcomes_address"]:
        volume[r["address"]] += r["messages"]
    by_volume = [{"address": a, "messages": n} for a, n in volume.items()]
    return {
        "top_addresses_by_volume": _top(by_volume, "messages"),
        "top_addresses_by_latency": [
            {k: r[k] for k in ("address", "deliveries", "p50_ms", "p99_ms", "max_ms")}
            for r in _top(data["latency_address"], "p99_ms")],
        "undeliverable_by_address": undeliverable(data["outcomes_address"], "address")[:TOP],
        "undeliverable_by_node": undeliverable(data["outcomes_node"], "node"),
        "slowest_paths": [{k: r[k] for k in ("ingress", "egress", "deliveries", "p50_ms", "p99_ms")}
                          for r in sorted(data["pair_latency"], key=lambda r: -(r["p99_ms"] or 0))[:TOP]],
        "windows": data.get("windows", []),
    }
