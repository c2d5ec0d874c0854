"""The report's small tables, built on the driver with pyarrow from two aggregates Spark computed.

Spark reduces the records to ``routes`` (deliveries and bytes per route and outcome: a few thousand
rows) and ``throughput`` (per node, address and second). Every table here is a regrouping of one of
them: no Spark job each (a job costs about half a second even on tiny data), same columns, types,
order and definitions as router.analytics.tables states them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

Order = Sequence[tuple[str, str]]


def regroup(table: pa.Table, keys: Sequence[str], sums: Sequence[tuple[str, str]], order: Order,
            where: pc.Expression | None = None, rename: dict[str, str] | None = None) -> pa.Table:
    """``table`` (rows matching ``where``) grouped by ``keys``: columns keys (renamed by ``rename``) then
    ``out`` = sum of ``col`` for each (out, col) of ``sums``, sorted by ``order``."""
    if where is not None:
        table = table.filter(where)
    grouped = table.group_by(list(keys), use_threads=False).aggregate([(col, "sum") for _, col in sums])
    names = {k: (rename or {}).get(k, k) for k in keys}
    cols = [grouped[k] for k in keys] + [pc.fill_null(grouped[f"{col}_sum"], 0) for _, col in sums]
    out = pa.table(cols, names=[names[k] for k in keys] + [name for name, _ in sums])
    return _sorted(out, [(names.get(k, k), how) for k, how in order])


def _sorted(table: pa.Table, order: Order) -> pa.Table:
    """Sorted as Spark sorts: nulls first ascending, last descending."""
    return table.sort_by([(k, how, "at_start" if how == "ascending" else "at_end") for k, how in order])


def throughput(t: pa.Table, key: str) -> pa.Table:
    """(key, second, messages, bytes) from the (node, address, second) aggregate."""
    return regroup(t, [key, "second"], [("messages", "messages"), ("bytes", "bytes")],
                   [(key, "ascending"), ("second", "ascending")])


def outcomes(routes: pa.Table, key: str) -> pa.Table:
    """(key, outcome, messages)."""
    return regroup(routes, [key, "outcome"], [("messages", "messages")],
                   [(key, "ascending"), ("outcome", "ascending")])


def hops_by(routes: pa.Table, key: str | None) -> pa.Table:
    """Hop histogram: per node over all its records; per address / mesh-wide (key None) at the egress."""
    where = pc.field("hops").is_valid()
    if key != "node":
        where = where & pc.field("left_mesh")
    keys = [key, "hops"] if key else ["hops"]
    return regroup(routes, keys, [("messages", "messages")], [(k, "ascending") for k in keys], where)


def top_producers(routes: pa.Table) -> pa.Table:
    """(node, in_link, address, messages, bytes) for records that entered the mesh, busiest first."""
    return regroup(routes, ["node", "in_link", "address"], [("messages", "messages"), ("bytes", "bytes")],
                   [("messages", "descending"), ("node", "ascending"), ("address", "ascending")],
                   pc.field("entered_mesh"))


def top_consumers(routes: pa.Table) -> pa.Table:
    """(node, out_link, address, messages, bytes, accepted) for records that left the mesh, busiest first."""
    accepted = pc.if_else(pc.equal(routes["outcome"], "accepted"), routes["messages"], 0)
    routes = routes.append_column("accepted_messages", pc.fill_null(accepted, 0))
    return regroup(routes, ["node", "out_link", "address"],
                   [("messages", "messages"), ("bytes", "bytes"), ("accepted", "accepted_messages")],
                   [("messages", "descending"), ("node", "ascending"), ("address", "ascending")],
                   pc.field("left_mesh"))


def pair_traffic(routes: pa.Table) -> pa.Table:
    """(ingress, egress, messages, bytes) for deliveries that left the mesh, from their egress records."""
    return regroup(routes.drop_columns(["egress"]), ["ingress", "node"],
                   [("messages", "messages"), ("bytes", "bytes")],
                   [("ingress", "ascending"), ("node", "ascending")],
                   pc.field("left_mesh") & pc.field("ingress").is_valid(), rename={"node": "egress"})


def starvation_addresses(links: pa.Table) -> pa.Table:
    """(address, links, intervals, open_intervals, starved_s): per-link starvation summed per address."""
    us = pc.cast(pc.round(pc.multiply(links["starved_s"], 1_000_000)), pa.int64())
    links = links.append_column("one", pa.array([1] * links.num_rows, pa.int64())).append_column("us", us)
    out = regroup(links, ["address"], [("links", "one"), ("intervals", "intervals"),
                                       ("open_intervals", "open_intervals"), ("starved_us", "us")],
                  [("address", "ascending")])
    out = out.append_column("starved_s", pc.divide(pc.cast(out["starved_us"], pa.float64()), 1_000_000))
    out = out.drop_columns(["starved_us"])
    return _sorted(out, [("starved_s", "descending"), ("address", "ascending")])


LINK_KEYS = ["node", "next_hop"]


def link_utilisation(t: pa.Table) -> pa.Table:
    """(node, next_hop, second, messages, bytes): deliveries that left ``node`` on its inter-router link
    to ``next_hop``, per 1 s bucket of ``settled`` (from the (node, address, next_hop, second)
    aggregate; records without a next hop are left out)."""
    return regroup(t, [*LINK_KEYS, "second"], [("messages", "messages"), ("bytes", "bytes")],
                   [("node", "ascending"), ("next_hop", "ascending"), ("second", "ascending")],
                   pc.field("next_hop").is_valid())


LINK_SUMMARY_SCHEMA = pa.schema([
    ("node", pa.string()), ("next_hop", pa.string()), ("messages", pa.int64()), ("bytes", pa.int64()),
    ("first_second", pa.int64()), ("last_second", pa.int64()), ("busy_seconds", pa.int64()),
    ("peak_msg_s", pa.int64()), ("peak_bytes_s", pa.int64()), ("peak_second", pa.int64()),
    ("avg_msg_s", pa.float64()), ("avg_bytes_s", pa.float64())])


def link_summary(t: pa.Table) -> pa.Table:
    """Per link (node, next_hop): messages, bytes, first/last second with traffic, busy seconds, the
    peak second (most messages; its messages and bytes; the earliest of equals) and the averages per
    second over the link's span (first to last busy second, both included; idle seconds count as 0).
    Busiest link first."""
    per: dict[tuple, list[tuple[int, int, int]]] = {}
    for r in link_utilisation(t).to_pylist():
        per.setdefault((r["node"], r["next_hop"]), []).append((r["second"], r["messages"], r["bytes"]))
    rows = []
    for (node, hop), cells in per.items():
        cells.sort()
        messages, size = sum(c[1] for c in cells), sum(c[2] for c in cells)
        first, last = cells[0][0], cells[-1][0]
        peak = max(cells, key=lambda c: (c[1], -c[0]))
        span = last - first + 1
        rows.append({"node": node, "next_hop": hop, "messages": messages, "bytes": size,
                     "first_second": first, "last_second": last, "busy_seconds": len(cells),
                     "peak_msg_s": peak[1], "peak_bytes_s": peak[2], "peak_second": peak[0],
                     "avg_msg_s": messages / span, "avg_bytes_s": size / span})
    rows.sort(key=lambda r: (-r["messages"], r["node"], r["next_hop"]))
    return pa.Table.from_pylist(rows, LINK_SUMMARY_SCHEMA)
