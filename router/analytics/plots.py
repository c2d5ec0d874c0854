"""matplotlib figures for the report, returned as base64 PNG (no pyplot state, no files)."""

from __future__ import annotations

import base64
import io
from collections import defaultdict

from matplotlib.figure import Figure

OUTCOME_COLOURS = {"accepted": "#2e7d32", "rejected": "#c62828", "released": "#f9a825",
                   "modified": "#ef6c00", "presettled": "#1565c0", "dropped": "#6a1b9a"}
MAX_SERIES = 12  # lines / bars beyond this are left out of a plot (the tables have everything)


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def throughput(rows: list[dict], start: float) -> str | None:
    """Messages/s per node over time (one line per node)."""
    if not rows:
        return None
    series: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        series[r["node"]].append((r["second"], r["messages"]))
    busiest = sorted(series, key=lambda n: -sum(m for _, m in series[n]))[:MAX_SERIES]
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    for node in sorted(busiest):
        points = sorted(series[node])
        ax.plot([s - start for s, _ in points], [m for _, m in points], marker=".", linewidth=1.2,
                label=node)
    ax.set_xlabel("seconds since the first record")
    ax.set_ylabel("messages/s")
    ax.set_title("Throughput per node (settled deliveries, 1 s buckets)")
    ax.grid(alpha=0.3)
    ax.legend(title="node", fontsize="small", loc="best")
    return _png(fig)


def links(util: dict, start: float) -> str | None:
    """Messages/s per inter-router link (node -> next hop) over time, from the summary's
    ``link_utilisation`` answer (one line per link, the busiest MAX_SERIES)."""
    rows = util.get("links", [])[:MAX_SERIES]
    if not rows:
        return None
    width = util["bucket_s"]
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    for r in rows:
        per = {p["start"]: p["messages"] for p in r["series"]}       # idle buckets: 0
        starts = range(min(per), max(per) + width, width)
        ax.plot([t - start for t in starts], [per.get(t, 0) / width for t in starts], marker=".",
                linewidth=1.2, label=f"{r['node']} -> {r['next_hop']}")
    ax.set_xlabel("seconds since the first record")
    ax.set_ylabel("messages/s")
    ax.set_title(f"Inter-router link utilisation ({width} s buckets)")
    ax.grid(alpha=0.3)
    ax.legend(title="link", fontsize="small", loc="best")
    return _png(fig)


def latency(rows: list[dict], key: str) -> str | None:
    """p50/p90/p99 settlement latency per ``key`` (the busiest ones), horizontal bars."""
    rows = sorted(rows, key=lambda r: -r["deliveries"])[:MAX_SERIES]
    if not rows:
        return None
    rows.reverse()
    fig = Figure(figsize=(9, 0.5 * len(rows) + 1.4))
    ax = fig.subplots()
    labels = [str(r[key]) for r in rows]
    height = 0.26
    for i, (p, colour) in enumerate((("p50_ms", "#90caf9"), ("p90_ms", "#1e88e5"), ("p99_ms", "#0d47a1"))):
        ax.barh([y + (i - 1) * height for y in range(len(rows))], [r[p] for r in rows], height,
                color=colour, label=p.replace("_ms", ""))
    ax.set_yticks(range(len(rows)), labels)
    ax.set_xlabel("settlement latency (ms)")
    ax.set_title(f"Settlement latency per {key}")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return _png(fig)


def hops(rows: list[dict]) -> str | None:
    """Hop histogram (mesh-wide, at the egress)."""
    if not rows:
        return None
    fig = Figure(figsize=(6, 3.2))
    ax = fig.subplots()
    ax.bar([r["hops"] for r in rows], [r["messages"] for r in rows], color="#5e35b1")
    ax.set_xticks([r["hops"] for r in rows])
    ax.set_xlabel("inter-router hops")
    ax.set_ylabel("deliveries")
    ax.set_title("Hops per delivery (at its egress node)")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def outcomes(rows: list[dict], key: str) -> str | None:
    """Outcome counts per ``key``, stacked bars."""
    if not rows:
        return None
    per: dict[str, dict[str, int]] = defaultdict(dict)
    for r in rows:
        per[str(r[key])][r["outcome"]] = r["messages"]
    keys = sorted(per, key=lambda k: -sum(per[k].values()))[:MAX_SERIES]
    names = [o for o in OUTCOME_COLOURS if any(o in per[k] for k in keys)]
    names += sorted({o for k in keys for o in per[k]} - set(names))
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    bottom = [0] * len(keys)
    for name in names:
        values = [per[k].get(name, 0) for k in keys]
        ax.bar(keys, values, bottom=bottom, label=name, color=OUTCOME_COLOURS.get(name, "#9e9e9e"))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("deliveries")
    ax.set_title(f"Outcomes per {key}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    return _png(fig)


def pairs(rows: list[dict]) -> str | None:
    """Ingress -> egress traffic as a heat map."""
    if not rows:
        return None
    ingress = sorted({r["ingress"] for r in rows})[:MAX_SERIES * 2]
    egress = sorted({r["egress"] for r in rows})[:MAX_SERIES * 2]
    grid = [[0] * len(egress) for _ in ingress]
    for r in rows:
        if r["ingress"] in ingress and r["egress"] in egress:
            grid[ingress.index(r["ingress"])][egress.index(r["egress"])] = r["messages"]
    fig = Figure(figsize=(1.1 * len(egress) + 3, 0.6 * len(ingress) + 1.8))
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="Blues", aspect="auto")
    ax.set_xticks(range(len(egress)), egress)
    ax.set_yticks(range(len(ingress)), ingress)
    ax.set_xlabel("egress node")
    ax.set_ylabel("ingress node")
    ax.set_title("Deliveries per ingress -> egress")
    top = max(max(row) for row in grid) or 1
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:,}", ha="center", va="center",
                    color="white" if value > top / 2 else "black", fontsize="small")
    fig.colorbar(image, ax=ax, label="deliveries")
    return _png(fig)
