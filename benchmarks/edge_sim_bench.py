#!/usr/bin/env python3
"""Edge mode at scale in the sans-IO simulation (issue 31, point 7): 3 interiors, N edges x 10 addresses.

Real link-state engines for the interiors (tests.support.linkstate_sim) and real router.edge objects for
the edges and the interiors' hubs (tests.support.edge_sim). Each edge consumes 9 addresses of its own and
one all edges share, and produces to its neighbour's first address; its uplinks are two interiors
(cost 1, 2). Phases: attach every edge; one address added on one edge; one address added on each of 100
edges; the interior that a third of the edges use is killed. For each: edge control messages and the keys
they carry (up: EDGE_ADDR, down: EDGE_REACH), link-state messages delivered, and the interiors' tables.

    .venv/bin/python benchmarks/edge_sim_bench.py                   # 1,000 and 5,000 edges
    .venv/bin/python benchmarks/edge_sim_bench.py --edges 5000

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.edge_sim import EdgeSim  # noqa: E402

PER_EDGE = 10


def run(edges: int) -> list[dict]:
    gc.disable()
    rows = []
    sim = EdgeSim(3)
    t0 = time.perf_counter()

    def phase(name: str, before, started: float) -> None:
        now = sim.control()
        tables = sim.tables()
        rows.append({"edges": edges, "phase": name,
                     **{k: now[k] - before.get(k, 0) for k in ("edge_msgs", "edge_keys", "reach_msgs",
                                                               "reach_keys", "linkstate_msgs")},
                     "proxied": max(t["proxied"] for t in tables.values()),
                     "known": max(t["advertised"] + t["known"] for t in tables.values()),
                     "cpu_s": round(time.perf_counter() - started, 2)})

    before = sim.control()
    for k in range(edges):
        sim.add_edge(f"E{k}", k, consumers=[f"svc/E{k}/{i}" for i in range(PER_EDGE - 1)] + ["fanout/all"],
                     producers=[f"svc/E{(k + 1) % edges}/0"])
    sim.settle(3.0)
    phase("attach all", before, t0)
    before, t = sim.control(), time.perf_counter()
    sim.add_address("E5", "svc/E5/new")
    sim.settle(1.0)
    phase("1 address on 1 edge", before, t)
    before, t = sim.control(), time.perf_counter()
    for k in range(100):
        sim.add_address(f"E{k}", f"svc/E{k}/more")
    sim.settle(1.0)
    phase("1 address on 100 edges", before, t)
    before, t = sim.control(), time.perf_counter()
    sim.kill_interior("I0")
    sim.settle(3.0)
    phase("interior I0 killed", before, t)
    gc.enable()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, nargs="*", default=[1000, 5000])
    args = ap.parse_args()
    cols = ("edges", "phase", "edge_msgs", "edge_keys", "reach_msgs", "reach_keys", "linkstate_msgs",
            "proxied", "known", "cpu_s")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for n in args.edges:
        for row in run(n):
            print("| " + " | ".join(str(row[c]) for c in cols) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
