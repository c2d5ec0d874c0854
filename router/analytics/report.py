"""report.html: one self-contained page (inline CSS, plots as base64 PNG) from the job's tables."""

from __future__ import annotations

import html
import time
from collections import defaultdict
from collections.abc import Sequence

from router.analytics import plots
from router.analytics.questions import external
from router.analytics.result import Result

SHOW_ROWS = 25  # rows of a table shown in the page; the Parquet tables hold all of them

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #212121;
       line-height: 1.4; padding: 0 1em; }
h1 { border-bottom: 2px solid #1565c0; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 14px; }
th, td { border: 1px solid #ddd; padding: 3px 9px; text-align: right; }
th { background: #e3f2fd; } td.t, th.t { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
.note { color: #616161; font-size: 13px; } .warn { color: #b71c1c; } .empty { color: #9e9e9e; }
img { max-width: 100%; display: block; margin: .5em 0; }
"""


def _cell(value: object) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return html.escape(str(value))


def table(rows: Sequence[dict], columns: Sequence[str], name: str | None = None,
          limit: int = SHOW_ROWS) -> str:
    """An HTML table of ``rows`` (first ``limit``), text columns left-aligned."""
    if not rows:
        return '<p class="empty">No data.</p>'
    text = {c for c in columns if any(isinstance(r.get(c), str) for r in rows)}
    out = ["<table><tr>"]
    out += [f'<th class="{"t" if c in text else ""}">{html.escape(c)}</th>' for c in columns]
    out.append("</tr>")
    for r in rows[:limit]:
        out.append("<tr>" + "".join(f'<td class="{"t" if c in text else ""}">{_cell(r.get(c))}</td>'
                                     for c in columns) + "</tr>")
    out.append("</table>")
    if len(rows) > limit:
        where = f" (all of them in <code>tables/{html.escape(name)}/</code>)" if name else ""
        out.append(f'<p class="note">Showing {limit} of {len(rows):,} rows{where}.</p>')
    return "".join(out)


def image(png: str | None, alt: str) -> str:
    """An inline PNG, or a 'no data' note."""
    if png is None:
        return f'<p class="empty">{html.escape(alt)}: no data.</p>'
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'


def _utc(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d} UTC"


def _pivot(rows: list[dict], key: str, column: str, value: str,
           order: Sequence[str] = ()) -> tuple[list[dict], list[str]]:
    per: dict[object, dict] = defaultdict(dict)
    names: list[str] = []
    for r in rows:
        name = str(r[column])
        per[r[key]][name] = r[value]
        if name not in names:
            names.append(name)
    names.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    out = [{key: k, **v, "total": sum(v.values())} for k, v in per.items()]
    out.sort(key=lambda r: -r["total"])
    return out, [key, *names, "total"]


def _throughput_stats(rows: list[dict]) -> list[dict]:
    per: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        per[r["node"]].append(r["messages"])
    return [{"node": n, "messages": sum(v), "busy seconds": len(v), "mean msg/s": sum(v) / len(v),
             "peak msg/s": max(v)} for n, v in sorted(per.items())]


def _summary_rows(s: dict, outcome_totals: dict[str, int]) -> list[dict]:
    span = (s["last_time"] - s["first_time"]) if s.get("first_time") is not None else None
    rows = [
        ("records directory", s["records_dir"]),
        ("files read", f"{s['json_files']:,} JSON Lines, {s['parquet_files']:,} Parquet"),
        ("delivery records", s["deliveries"]),
        ("event records", s["events"]),
        *((f"skipped: {label}", n) for label, n in s["skipped"].items()),
        ("nodes", s["nodes"]),
        ("addresses", s["addresses"]),
        ("bytes delivered", s["bytes"]),
        ("first record", _utc(s.get("first_time"))),
        ("last record", _utc(s.get("last_time"))),
        ("time span (s)", span),
        ("outcomes", ", ".join(f"{k} {v:,}" for k, v in sorted(outcome_totals.items(), key=lambda kv: -kv[1]))
         or "-"),
    ]
    return [{"what": k, "value": v} for k, v in rows]


DEFINITIONS = """
<ul>
<li><b>What is counted</b>: every node a delivery crosses writes one record of it, so the per-node and
 per-link tables, <i>Outcomes</i>, <i>Settlement latency</i> and <i>Hops per node</i> count a message once per
 node on its path (200 messages across a chain of three nodes: 600 records). <i>Top addresses by
 volume</i> and <i>Producers</i> count each message once, at its ingress (the node where it entered the
 mesh); <i>Consumers</i>, per-address hops and ingress&nbsp;&rarr;&nbsp;egress traffic once per copy
 delivered, at the egress.</li>
<li><b>Internal addresses</b>: the mesh's management traffic (<code>$management</code>,
 <code>_topo/0/<i>node</i>/$management</code> and the replies to <code>_topo/0/<i>node</i>/temp.*</code>) is
 left out of the per-address tables and counted on one line under <i>Questions</i>; the Parquet tables
 keep it.</li>
<li><b>Throughput</b>: deliveries whose settlement fell in each whole second (UTC epoch).</li>
<li><b>Settlement latency</b>: <code>settled - arrival</code> at the node that wrote the record, over
 accepted, rejected, released and modified deliveries (pre-settled and dropped ones have none).
 Percentiles are exact (linear interpolation between the closest ranks).</li>
<li><b>Egress</b>: the node where a delivery left the mesh (its <code>out_link</code> is
 <code>client</code> or <code>broker</code>). Per-address and mesh-wide hop counts,
 ingress&nbsp;&rarr;&nbsp;egress traffic and latency come from egress records; per-node hop counts
 from every record at that node.</li>
<li><b>Ingress &rarr; egress latency (end to end)</b> comes from the records written at the ingress
 (hops 0): <code>settled - arrival</code> there spans arrival at the ingress until the consumer's
 outcome came back to it. Their <code>egress</code> field names the node the ingress sent the delivery
 to; multicast (several egresses) and records without the field are left out. The latency
 <i>at the egress</i> is <code>settled - arrival</code> at the egress node, the last leg only.</li>
<li><b>Producers / consumers</b>: records carry no link ids, so the finest keys are (node, link kind,
 address) for deliveries that entered the mesh (<code>in_link</code> client or broker) or left it.</li>
<li><b>Per-link utilisation</b>: delivery records that name a <code>next_hop</code> left their node on
 its inter-router link to that peer; counted per (node, next hop) and second of settlement, as the
 throughput. A multicast delivery whose copies went to several peers names none and is left out;
 files written before the field existed have none.</li>
<li><b>Credit starvation</b>: per link, from each <code>credit_starved_start</code> to the link's next
 <code>credit_starved_end</code> or <code>link_down</code>; a start with neither is counted as open
 and adds no time.</li>
</ul>
"""


def _questions(q: dict, start: float) -> list[str]:
    """The "Questions" section (router.analytics.questions)."""
    if not q:
        return []
    split = q.get("windows_split_at")
    util = q.get("link_utilisation", {"bucket_s": 1, "links": []})
    internal = q.get("internal", {"addresses": 0, "messages": 0})
    return [
        "<h2 id='questions'>Questions</h2>",
        f"<p class='note' id='internal'>Left out of the per-address tables: {internal['addresses']:,} "
        f"internal addresses (management and its replies), {internal['messages']:,} messages at their "
        "ingress.</p>",
        "<h3>Top addresses by volume (each message once, at its ingress)</h3>",
        table(q["top_addresses_by_volume"], ["address", "messages"], "top_producers"),
        "<h3>Top addresses by latency (p99)</h3>",
        table(q["top_addresses_by_latency"], ["address", "deliveries", "p50_ms", "p99_ms", "max_ms"],
              "latency_address"),
        "<h3>Undeliverable (released or modified) by address</h3>",
        table(q["undeliverable_by_address"], ["address", "undeliverable", "released", "modified", "messages"],
              "outcomes_address"),
        "<h3>Undeliverable (released or modified) by node</h3>",
        table(q["undeliverable_by_node"], ["node", "undeliverable", "released", "modified", "messages"],
              "outcomes_node"),
        "<h3>Slowest paths, ingress &rarr; egress (end-to-end p99)</h3>",
        table(q["slowest_paths"], ["ingress", "egress", "deliveries", "p50_ms", "p99_ms"], "pair_latency"),
        f"<h3>Two time windows: settled before {_utc(split)} (first) and from it (second)</h3>",
        table(q["windows"], ["address", "window", "messages", "bytes", "undeliverable", "p50_ms", "p99_ms"],
              "windows"),
        "<h3 id='links'>Per-link utilisation over time (inter-router links, node &rarr; next hop)</h3>",
        image(plots.links(util, start), "Inter-router link utilisation"),
        table(util["links"], ["node", "next_hop", "messages", "bytes", "busy_seconds", "peak_msg_s",
                              "peak_bytes_s", "avg_msg_s", "avg_bytes_s"], "link_summary"),
        "<p class='note'>Peak: the second with the most messages; averages per second over the link's "
        "span (its first to last second with traffic). Per link and second: "
        "<code>tables/link_utilisation/</code>.</p>",
    ]


def render(result: Result) -> str:
    """The whole page."""
    data, s = result.data, result.summary
    outcome_totals: dict[str, int] = defaultdict(int)
    for r in data["outcomes_node"]:
        outcome_totals[r["outcome"]] += r["messages"]
    start = int(s["first_time"]) if s.get("first_time") is not None else 0
    lat_cols = ["deliveries", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "max_ms"]
    outcome_order = tuple(plots.OUTCOME_COLOURS)
    outcome_pivot, outcome_cols = _pivot(data["outcomes_node"], "node", "outcome", "messages", outcome_order)
    address_pivot, address_cols = _pivot(external(data["outcomes_address"]), "address", "outcome",
                                         "messages", outcome_order)
    hop_order = tuple(str(h) for h in sorted({r["hops"] for r in data["hops_node"]}))
    hop_pivot, hop_cols = _pivot(data["hops_node"], "node", "hops", "messages", hop_order)
    problems = [{"file": b["file"], "problem": b["problem"], "count": None} for b in s["bad_files"]]
    problems += data["input_problems"]
    busiest_addresses = sorted(external(data["latency_address"]), key=lambda r: -r["deliveries"])
    warn = ""
    if any(s["skipped"].values()):
        what = ", ".join(f"{n:,} {label}" for label, n in s["skipped"].items() if n)
        warn = f'<p class="warn" id="skipped">Skipped: {what} (see <a href="#input">Input problems</a>).</p>'

    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>meshrouter telemetry report"
        f"</title><style>{CSS}</style></head><body>",
        "<h1>meshrouter telemetry report</h1>",
        f'<p class="note">Generated {_utc(time.time())} by <code>meshrouter analyze</code>.</p>',
        "<h2 id='summary'>Summary</h2>", warn, table(_summary_rows(s, outcome_totals), ["what", "value"]),
        *_questions(s.get("questions", {}), start),
        "<h2 id='throughput'>Throughput</h2>",
        image(plots.throughput(data["throughput_node"], start), "Throughput per node"),
        table(_throughput_stats(data["throughput_node"]),
              ["node", "messages", "busy seconds", "mean msg/s", "peak msg/s"]),
        "<p class='note'>Per address and second: <code>tables/throughput_address/</code>.</p>",
        "<h2 id='outcomes'>Outcomes</h2>", image(plots.outcomes(data["outcomes_node"], "node"), "Outcomes"),
        table(outcome_pivot, outcome_cols),
        "<h3>Per address</h3>",
        table(address_pivot, address_cols, "outcomes_address"),
        "<h2 id='latency'>Settlement latency</h2>",
        image(plots.latency(busiest_addresses, "address"), "Latency per address"),
        "<h3>Per node</h3>", table(data["latency_node"], ["node", *lat_cols]),
        "<h3>Per address (busiest first)</h3>",
        table(busiest_addresses, ["address", *lat_cols], "latency_address"),
        "<h2 id='hops'>Hops</h2>", image(plots.hops(data["hops_mesh"]), "Hop histogram"),
        "<h3>Per node (hops so far, every record at the node)</h3>", table(hop_pivot, hop_cols),
        "<h2 id='producers'>Top producers and consumers</h2>",
        "<h3>Producers (deliveries entering the mesh)</h3>",
        table(external(data["top_producers"]), ["node", "in_link", "address", "messages", "bytes"],
              "top_producers", 15),
        "<h3>Consumers (deliveries leaving the mesh)</h3>",
        table(external(data["top_consumers"]),
              ["node", "out_link", "address", "messages", "accepted", "bytes"],
              "top_consumers", 15),
        "<h2 id='starvation'>Credit starvation</h2>",
        "<h3>Per address</h3>",
        table(external(data["starvation_address"]),
              ["address", "links", "intervals", "open_intervals", "starved_s"],
              "starvation_address"),
        "<h3>Per link</h3>",
        table(external(data["starvation_link"]),
              ["node", "link", "address", "intervals", "open_intervals", "starved_s"], "starvation_link"),
        "<h2 id='mesh'>Mesh: ingress &rarr; egress</h2>",
        image(plots.pairs(data["pair_traffic"]), "Ingress to egress traffic"),
        table(data["pair_traffic"], ["ingress", "egress", "messages", "bytes"], "pair_traffic"),
        "<h3>End-to-end latency, by ingress &rarr; egress (from the ingress records)</h3>",
        table(data["pair_latency"], ["ingress", "egress", *lat_cols], "pair_latency"),
        "<h3>Latency at the egress (last leg), by ingress &rarr; egress</h3>",
        table(data["pair_latency_egress"], ["ingress", "egress", *lat_cols], "pair_latency_egress"),
        "<h2 id='input'>Input problems</h2>",
        table(problems, ["file", "problem", "count"], "input_problems"),
        "<h2 id='definitions'>How to read this</h2>", DEFINITIONS,
        "<h2 id='tables'>Tables</h2><p class='note'>Parquet, one directory per table, under "
        f"<code>{html.escape(str(result.out_dir / 'tables'))}</code>: "
        + ", ".join(f"<code>{html.escape(n)}</code>" for n in result.tables) + ".</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


def write_report(result: Result) -> None:
    """Render and write ``result.report``."""
    result.report.parent.mkdir(parents=True, exist_ok=True)
    result.report.write_text(render(result), encoding="utf-8")
