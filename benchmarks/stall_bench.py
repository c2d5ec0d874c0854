#!/usr/bin/env python3
"""The largest inter-arrival gap of a rate-limited stream (issue 21 point 1: no stall at a stream's start).

The C load generator (../shared/bench, built into benchmarks/build/ as node_bench.py does) sends
``--count`` 100-byte unsettled messages at ``--rate`` msg/s (``amqpbench send --rate``); its receiver
reports the largest gap between two arrivals (``max_gap_s``) and when it happened. Each round runs both
orders (receiver attached first, then the sender; sender first, then the receiver) on every path:

* ``node``: one node, sender and receiver on it;
* ``chain``: A - B - C, sender on C, receiver on A (ingress, transit, egress);
* ``mesh``: topologies/four-node.yaml's full mesh (every link cost 1), sender on C, receiver on B;
* ``direct``: no router, the receiver listens and the sender connects to it (the clients' own gaps;
  receiver first only);
* ``external``: a router already running at ``--external-url`` (qdrouterd, for a same-window reference);
  ``--external-url SEND_URL,RECV_URL`` puts the sender and the receiver on different routers of a running
  mesh (e.g. ../shared/bench/qdr's chain3: C's client port, then A's).

    .venv/bin/python benchmarks/stall_bench.py [--rounds 5] [--paths node,chain,mesh,direct] [--base main]
        [--rate 20000] [--count 20000] [--presettled] [--external-url amqp://127.0.0.1:45672 --paths external]

``--base REV`` runs the nodes from git revision REV instead of the working tree (before / after).

Prints every run, then per (path, order) the median and the largest of the max gaps, with the load
average; writes benchmarks/results/<timestamp>-stall.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from harness.loadgen import ensure_client  # noqa: E402
from harness.paths import RESULTS_DIR, BenchError  # noqa: E402
from harness.paths import SHARED_HARNESS as DEFAULT_HARNESS  # noqa: E402
from harness.procs import free_port, start_node  # noqa: E402
from harness.trees import extract  # noqa: E402

REPO = BENCH_DIR.parent
PATHS = ("node", "chain", "mesh", "direct")
ORDERS = ("receiver-first", "sender-first")
ADDRESS = "closest/stall"
# (from, to): `from` dials `to`'s inter-router listener; `to` is started first
EDGES = {"node": [], "chain": [("B", "A"), ("C", "B")],
         "mesh": [("B", "A"), ("C", "A"), ("D", "A"), ("C", "B"), ("D", "B"), ("D", "C")]}
ENDS = {"node": ("A", "A"), "chain": ("C", "A"), "mesh": ("C", "B")}     # (sender's node, receiver's node)


class Nodes:
    """The nodes of one path, started in order (`python -m router run`) and stopped together."""

    def __init__(self, path: str, tmp: Path, tree: Path) -> None:
        edges = EDGES[path]
        names = sorted({n for e in edges for n in e}) or ["A"]
        self.client = {n: free_port() for n in names}
        inter = {to: free_port() for _, to in edges}
        self.procs: list[subprocess.Popen] = []
        for n in names:
            listeners = [{"host": "127.0.0.1", "port": self.client[n], "role": "normal"}]
            if n in inter:
                listeners.append({"host": "127.0.0.1", "port": inter[n], "role": "inter-router"})
            cfg = {"node": {"id": n}, "listeners": listeners,
                   "connectors": [{"host": "127.0.0.1", "port": inter[to]} for frm, to in edges if frm == n],
                   "addresses": {"rules": [{"prefix": "closest", "distribution": "closest"}]}}
            path_cfg = tmp / f"{n}.yaml"
            path_cfg.write_text(yaml.safe_dump(cfg))
            try:
                node = start_node(path_cfg, tmp, n, 30, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
            except BenchError as exc:
                self.stop()
                raise SystemExit(str(exc)) from None
            self.procs.append(node.proc)
        if edges:
            time.sleep(2.0)             # converged (HELLO every second by default): not part of the measure

    def url(self, node: str) -> str:
        return f"amqp://127.0.0.1:{self.client[node]}"

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(30)


def stream(exe: Path, send_url: str, recv_url: str, order: str, count: int, rate: float,
           presettled: bool = False) -> dict:
    """One paced stream; the receiver's result (max_gap_s, t_max_gap_at, t_first...)."""
    common = ["--addr", ADDRESS, "--count", str(count)]
    send = [str(exe), "send", "--url", send_url, *common, "--rate", str(rate)]
    if presettled:
        send += ["--presettled", "--linger-ms", "500"]
    recv = [str(exe), "recv", "--url", recv_url, *common, "--idle-s", "5", "--start-timeout-s", "30"]
    if order == "receiver-first":
        r = subprocess.Popen(recv, stdout=subprocess.PIPE, text=True)
        r.stdout.readline()                                 # READY: attached
        s = subprocess.Popen(send, stdout=subprocess.PIPE, text=True)
    else:
        s = subprocess.Popen(send, stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        r = subprocess.Popen(recv, stdout=subprocess.PIPE, text=True)
    s_out, _ = s.communicate(120)
    r_out, _ = r.communicate(120)
    res = json.loads([ln for ln in r_out.splitlines() if ln.startswith("{")][-1])
    sent = json.loads([ln for ln in s_out.splitlines() if ln.startswith("{")][-1])
    if res["received"] != count or sent["sent" if presettled else "accepted"] != count:
        raise SystemExit(f"incomplete stream: sender {sent}, receiver {res}")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=20000)
    ap.add_argument("--presettled", action="store_true", help="send pre-settled")
    ap.add_argument("--external-url", default=None,
                    help="the router of the `external` path, or SEND_URL,RECV_URL")
    ap.add_argument("--orders", default=",".join(ORDERS),
                    help="attach orders to run (qdrouterd releases what a sender sends before a receiver "
                         "attaches on another router: receiver-first only there)")
    ap.add_argument("--harness", type=Path, default=DEFAULT_HARNESS)
    ap.add_argument("--base", default=None,
                    help="run the nodes from this git revision (default: the working tree)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))     # stop the nodes (finally) when killed
    exe = ensure_client(a.harness)
    with tempfile.TemporaryDirectory(prefix="stall-tree-") as tree_dir:
        tree = extract(a.base, Path(tree_dir)) if a.base else REPO
        return measure(a, exe, tree)


def measure(a: argparse.Namespace, exe: Path, tree: Path) -> int:
    rows = []
    loads = []
    for path in [p for p in a.paths.split(",") if p]:
        with tempfile.TemporaryDirectory(prefix="stall-") as tmpdir:
            tmp = Path(tmpdir)
            nodes = None if path in ("direct", "external") else Nodes(path, tmp, tree)
            try:
                # with no router the receiver listens: the sender cannot come first
                orders = [o for o in ORDERS if o in a.orders.split(",")]
                orders = ORDERS[:1] if path == "direct" else orders
                gaps: dict[str, list[float]] = {o: [] for o in orders}
                for i in range(a.rounds):
                    for order in orders:
                        if path == "external":
                            send_url, _, recv_url = a.external_url.partition(",")
                            recv_url = recv_url or send_url
                        elif nodes is None:
                            port = free_port()
                            send_url, recv_url = f"127.0.0.1:{port}", f"listen://127.0.0.1:{port}"
                        else:
                            snd, rcv = ENDS[path]
                            send_url, recv_url = nodes.url(snd), nodes.url(rcv)
                        res = stream(exe, send_url, recv_url, order, a.count, a.rate, a.presettled)
                        gap = res["max_gap_s"] * 1e3
                        at = (res["t_max_gap_at"] - res["t_first"]) * 1e3
                        gaps[order].append(gap)
                        loads.append(os.getloadavg()[0])
                        print(f"{path:6} {order:14} round {i + 1}: max gap {gap:7.2f} ms at +{at:7.1f} ms "
                              f"(load {loads[-1]:.2f})", flush=True)
            finally:
                if nodes is not None:
                    nodes.stop()
            for order in orders:
                rows.append({"path": path, "order": order, "max_gap_ms": gaps[order],
                             "median_ms": statistics.median(gaps[order]), "largest_ms": max(gaps[order])})
    print(f"\nnodes from {a.base or 'the working tree'}; {a.count} messages at {a.rate:g} msg/s"
          f"{', pre-settled' if a.presettled else ''}")
    print("| path | order | median of max gap (ms) | largest (ms) | runs |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['path']} | {r['order']} | {r['median_ms']:.2f} | {r['largest_ms']:.2f} | "
              f"{', '.join(f'{g:.1f}' for g in r['max_gap_ms'])} |")
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-stall.json"
    out.write_text(json.dumps({"base": a.base, "count": a.count, "rate": a.rate, "presettled": a.presettled,
                               "rows": rows, "load": loads}, indent=2))
    print(f"Results: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
