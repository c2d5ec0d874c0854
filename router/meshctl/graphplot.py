"""Draw a mesh graph (router/meshctl/graph.py) with matplotlib's Agg canvas to PNG and SVG.

Nodes are circles labelled with their id, edges are lines labelled with their cost, and the addresses a
node serves are listed next to it (the first few, then ``+N more``). Unreachable nodes and down edges
are grey and dashed. Every artist carries an SVG id: ``node-up-A`` / ``node-down-A``, ``edge-up-A-B`` /
``edge-down-A-B`` and ``served-A``; SVG text stays text, so the ids and addresses can be searched.

matplotlib (the ``analytics`` extra) is imported only here, when a graph is drawn.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import networkx as nx

MAX_ADDRESSES = 4        # addresses listed next to a node before "+N more"
MAX_ADDRESS_CHARS = 48   # longer addresses are cut with "…"
CIRCULAR_UP_TO = 12      # nodes on a circle up to this many, a spring layout beyond
LABEL_AT = 0.38          # where along an edge (from its first node in id order) its cost is written
UP_COLOR, DOWN_COLOR, EDGE_COLOR = "#4a90d9", "#d0d0d0", "#555555"


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def served_label(addresses: list[str], limit: int = MAX_ADDRESSES) -> str:
    """The text next to a node: one address a line, long ones cut, then ``+N more``."""
    lines = [a if len(a) <= MAX_ADDRESS_CHARS else a[:MAX_ADDRESS_CHARS - 1] + "…" for a in addresses[:limit]]
    if len(addresses) > limit:
        lines.append(f"+{len(addresses) - limit} more")
    return "\n".join(lines)


def layout(graph: nx.Graph) -> dict[Any, tuple[float, float]]:
    """Node positions around (0, 0) within radius ~1: a circle in id order, a spring layout for many."""
    nodes = sorted(graph.nodes)
    if len(nodes) == 1:
        return {nodes[0]: (0.0, 0.0)}
    if len(nodes) <= CIRCULAR_UP_TO:
        pos = nx.circular_layout(nodes)
    else:
        pos = nx.spring_layout(graph, seed=7, weight=None)
    return {n: (float(p[0]), float(p[1])) for n, p in pos.items()}


def _unit(x: float, y: float) -> tuple[float, float]:
    length = math.hypot(x, y)
    return (0.0, 1.0) if length < 1e-9 else (x / length, y / length)


def draw(graph: nx.Graph, prefix: Path) -> list[Path]:
    """Write ``PREFIX.png`` and ``PREFIX.svg``; return both paths."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Circle
    except ImportError:
        raise PlotUnavailable("mesh graph needs matplotlib: pip install 'meshrouter[analytics]'") from None

    count = graph.number_of_nodes()
    pos = layout(graph)
    radius = 0.12 if count <= CIRCULAR_UP_TO else max(0.03, 0.5 / math.sqrt(count))
    size = 8.0 + 2.0 * max(0.0, math.sqrt(count) - 2)
    fig = Figure(figsize=(size, size * 0.85))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(graph.graph.get("title", "mesh"))

    for a, b, data in sorted(graph.edges(data=True)):
        a, b = sorted((a, b))
        up = data.get("up", False)
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ax.plot([xa, xb], [ya, yb], color=EDGE_COLOR if up else DOWN_COLOR, linestyle="-" if up else "--",
                linewidth=1.6, zorder=1, gid=f"edge-{'up' if up else 'down'}-{a}-{b}")
        # not at the middle: the diagonals of a circle layout cross there, their labels would overlap
        lx, ly = xa + (xb - xa) * LABEL_AT, ya + (yb - ya) * LABEL_AT
        ax.text(lx, ly, str(data.get("cost", "?")), ha="center", va="center",
                fontsize=9, zorder=2, color="black" if up else "grey",
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"})

    for node_id in sorted(graph.nodes):
        data = graph.nodes[node_id]
        up = data.get("reachable", False)
        x, y = pos[node_id]
        ax.add_patch(Circle((x, y), radius, facecolor=UP_COLOR if up else DOWN_COLOR,
                            edgecolor="#1f4f7f" if up else "grey", linestyle="-" if up else "--",
                            linewidth=1.5, zorder=3, gid=f"node-{'up' if up else 'down'}-{node_id}"))
        ax.text(x, y, str(node_id), ha="center", va="center", fontsize=11, fontweight="bold",
                color="white" if up else "dimgrey", zorder=4)
        label = served_label(list(data.get("served") or [])) if up else "(unreachable)"
        if label:
            ux, uy = _unit(x, y)
            ax.text(x + ux * radius * 1.4, y + uy * radius * 1.4, label, fontsize=8, zorder=4,
                    ha="left" if ux >= 0 else "right", va="bottom" if uy >= 0 else "top",
                    color="black" if up else "grey", gid=f"served-{node_id}")

    if not all(up for _, up in graph.nodes(data="reachable")) or \
            not all(up for *_, up in graph.edges(data="up")):
        ax.text(0.5, -0.02, "grey, dashed: node not read / link down", transform=ax.transAxes,
                ha="center", va="top", fontsize=8, color="grey")
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.4, 1.4)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = [prefix.with_name(prefix.name + ".png"), prefix.with_name(prefix.name + ".svg")]
    with matplotlib.rc_context({"svg.fonttype": "none"}):     # SVG text stays searchable text
        for path in paths:
            fig.savefig(path, dpi=110, bbox_inches="tight")
    return paths
