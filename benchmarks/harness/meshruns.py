"""run_bench.py against a mesh, for the mesh scenarios (mesh_bench.py, mesh_convergence.py,
mesh_reroute.py) and qdr_compare.py: topologies with the command line's overrides, waiting for a port,
each node's CPU, and the medians per workload."""

from __future__ import annotations

import argparse
import shlex
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import mesh as hm
from harness.loadgen import run_harness
from harness.mesh import Mesh
from harness.paths import HOST, BenchError
from harness.sample import median as med
from router.meshctl.topology import Topology

POLL = 0.002           # s between connection attempts while waiting for a port (convergence resolution)
Edge = hm.Edge


def overrides(a: argparse.Namespace) -> dict[str, Any]:
    """The topology settings the command line overrides."""
    return {"hello_interval": a.hello_interval, "link_capacity": a.link_capacity, "telemetry": a.telemetry}


def make_topology(name: str, nodes: Sequence[str], edges: Sequence[Edge], settings: dict[str, Any],
                  a: argparse.Namespace) -> Topology:
    """:func:`harness.mesh.make_topology` with --hello-interval, --link-capacity and --telemetry."""
    return hm.make_topology(name, nodes, edges, settings, **overrides(a))


def chain_topology(a: argparse.Namespace) -> Topology:
    return hm.chain_topology(**overrides(a))


def four_node_topology(a: argparse.Namespace) -> Topology:
    return hm.four_node_topology(**overrides(a))


def diamond_topology(a: argparse.Namespace) -> Topology:
    return hm.diamond_topology(**overrides(a))


def wait_port(port: int, deadline: float, mesh: Mesh) -> float:
    """Poll until HOST:port accepts a TCP connection; return the time.time() it did."""
    while True:
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return time.time()
        except OSError:
            pass
        mesh.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"port {port} does not accept connections")
        time.sleep(POLL)


def spread(values: Sequence[float | None], spec: str) -> str:
    """'min–max' of the values that are not None."""
    vals = [v for v in values if v is not None]
    return f"{format(min(vals), spec)}–{format(max(vals), spec)}" if vals else "–"


def node_cpu(run: dict[str, Any], names: dict[str, str], messages: int) -> dict[str, dict[str, float | None]]:
    """Per node: CPU % of one core over the active interval and CPU µs per message, from run_bench's
    sampler (names: pid -> node id)."""
    out: dict[str, dict[str, float | None]] = {}
    for pid, p in (run.get("router", {}).get("procs") or {}).items():
        cpu = p.get("cpu_s")
        per_msg = None if cpu is None or messages <= 0 else 1e6 * cpu / messages
        out[names.get(pid, pid)] = {"cpu_pct": p.get("cpu_pct"), "us_per_msg": per_msg}
    return out


def run_on_mesh(a: argparse.Namespace, client: Path, mesh: Mesh, send: str, recv: str, label: str,
                workloads: str, tmp: Path) -> dict[str, Any]:
    """run_bench.py against the mesh: senders / RPC callers on node `send`, receivers / servers on `recv`,
    CPU sampled for every node."""
    out = tmp / f"{label}.json"
    cmd = [sys.executable, str(a.harness / "run_bench.py"), "--send-url", mesh.url(send),
           "--recv-url", mesh.url(recv), "--label", label, "--workloads", workloads,
           "--repeat", str(a.repeat), "--pids", ",".join(map(str, mesh.pids())), "--out", str(out),
           "--count", str(a.count), "--rpc-count", str(a.rpc_count), *shlex.split(a.bench_args)]
    res = run_harness(cmd, client, mesh.alive)
    res["command"] = shlex.join(cmd)
    return res


def summarize_harness(res: dict[str, Any], mesh: Mesh) -> dict[str, Any]:
    """Medians per workload plus per-node CPU (median over runs) and the runs' spread."""
    names = {str(p.pid): n for n, p in mesh.children.items()}
    summary: dict[str, Any] = {}
    for w, runs in res["runs"].items():
        ok = [r for r in runs if "error" not in r]
        key = {"throughput": "msgs_per_s", "throughput-presettled": "msgs_per_s", "rpc": "p50_us",
               "rpc-conc": "calls_per_s"}.get(w, "msgs_per_s")
        row: dict[str, Any] = {"ok_runs": len(ok), "runs": len(runs), "key": key,
                               "values": [r.get(key) for r in ok], "median": med([r.get(key) for r in ok])}
        if w.startswith("rpc"):
            row["p50_us"] = med([r["p50_us"] for r in ok])
            row["p99_us"] = med([r["p99_us"] for r in ok])
            row["calls_per_s"] = med([r["calls_per_s"] for r in ok])
            row["p50_values"] = [r["p50_us"] for r in ok]
        if w.startswith("throughput"):
            row["missing"] = sum(r["missing"] for r in ok)
            row["released"] = sum(r.get("released", 0) for r in ok)
            row["msgs_per_s"] = med([r["msgs_per_s"] for r in ok])
        per_node: dict[str, dict[str, list[float | None]]] = {}
        for r in ok:
            msgs = int(r["received"]) if w.startswith("throughput") else 2 * (int(r["completed"]) + 100)
            for node, v in node_cpu(r, names, msgs).items():
                d = per_node.setdefault(node, {"cpu_pct": [], "us_per_msg": []})
                d["cpu_pct"].append(v["cpu_pct"])
                d["us_per_msg"].append(v["us_per_msg"])
        row["nodes"] = {n: {"cpu_pct": med(d["cpu_pct"]), "us_per_msg": med(d["us_per_msg"])}
                        for n, d in sorted(per_node.items())}
        row["errors"] = [r["error"].splitlines()[0][:120] for r in runs if "error" in r]
        summary[w] = row
    return summary
