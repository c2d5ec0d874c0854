#!/usr/bin/env python3
"""Convergence of the four-node mesh started from nothing (a mesh_bench.py scenario, also runnable alone).

Seconds from the first node spawn until an amqpbench sender on C gets credit for an address whose amqpbench
receiver attached to B as soon as B accepted connections; a fresh mesh per run, --repeat runs, medians.
Goal: <= 0.5 s. Results: benchmarks/results/<timestamp>-<label>.json (mesh_bench.py's record).

  .venv/bin/python benchmarks/mesh_convergence.py --repeat 5
  .venv/bin/python benchmarks/mesh_bench.py --scenarios convergence --repeat 5     # the same
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for _path in (BENCH_DIR, BENCH_DIR.parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from harness.loadgen import clients, start_client  # noqa: E402
from harness.mesh import Mesh, running_mesh  # noqa: E402
from harness.meshruns import four_node_topology, wait_port  # noqa: E402
from harness.paths import BenchError  # noqa: E402
from harness.report import fmt  # noqa: E402
from harness.sample import median as med  # noqa: E402

NAME = "convergence"
GOAL_S = 0.5


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This scenario's options."""
    ap.add_argument("--convergence-timeout", type=float, default=30.0,
                    help="give up a convergence run after S s")


def check(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Nothing to check beyond argparse's types."""


def convergence_run(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path],
                    i: int) -> dict[str, Any]:
    """One fresh four-node mesh: seconds from the first spawn until a sender on C has credit for an
    address served by a receiver on B (attached as soon as B accepts connections)."""
    addr = f"conv/{i}"
    topo = four_node_topology(a)
    with running_mesh(topo, tmp, keep) as mesh, clients() as cl:
        t0 = mesh.start()
        deadline = time.monotonic() + a.convergence_timeout
        t_b = wait_port(mesh.port("B"), deadline, mesh)
        rcv = start_client(client, "recv", mesh.url("B"), ["--addr", addr, "--count", "1", "--credit", "10",
                                                           "--idle-s", "1", "--start-timeout-s",
                                                           str(a.convergence_timeout)], "receiver on B")
        cl.append(rcv)
        t_c = wait_port(mesh.port("C"), deadline, mesh)
        snd = start_client(client, "send", mesh.url("C"), ["--addr", addr, "--count", "1"], "sender on C")
        cl.append(snd)
        rcv.wait_ready(a.convergence_timeout)
        t_rcv_ready = time.time()
        sr = snd.result(a.convergence_timeout)
        rr = rcv.result(5)
        ready = ready_times(mesh, t0)
    if sr["timed_out"] or not sr.get("t_start"):
        raise BenchError(f"convergence run {i + 1}: the sender on C got no credit in "
                         f"{a.convergence_timeout:.0f} s: {sr}")
    delivered = (rr["t_first"] - t0) if rr.get("received") else None
    return {"credit_s": sr["t_start"] - t0, "delivered_s": delivered,
            "b_accepts_s": t_b - t0, "c_accepts_s": t_c - t0, "receiver_attached_s": t_rcv_ready - t0,
            "ready_s": ready, "last_ready_s": max(ready.values()) if ready else None,
            "credit_after_ready_s": sr["t_start"] - t0 - max(ready.values()) if ready else None,
            "outcome": {k: sr[k] for k in ("accepted", "released", "modified", "rejected")},
            "received": rr.get("received")}


def ready_times(mesh: Mesh, t0: float) -> dict[str, float]:
    """Seconds from the first spawn until each node's stdout got its ready line (file mtime)."""
    out = {}
    for n in mesh.topology.node_ids:
        with contextlib.suppress(OSError):
            out[n] = mesh.stdout(n).stat().st_mtime - t0
    return out


def scenario(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Repeat convergence_run on fresh meshes."""
    runs = []
    for i in range(a.repeat):
        try:
            r = convergence_run(a, client, tmp, keep, i)
        except BenchError as e:
            r = {"error": str(e)}
        runs.append(r)
        print(f"[convergence] #{i + 1}: " + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                                        for k, v in r.items() if k != "ready_s"}), flush=True)
        time.sleep(0.5)
    ok = [r for r in runs if "error" not in r]
    summary = {k: med([r[k] for r in ok]) for k in ("credit_s", "delivered_s", "b_accepts_s", "c_accepts_s",
                                                    "receiver_attached_s", "last_ready_s",
                                                    "credit_after_ready_s")}
    summary.update(ok_runs=len(ok), runs=len(runs), credit_values=[r["credit_s"] for r in ok])
    return {"topology": "four-node", "sender": "C", "receiver": "B", "runs": runs, "summary": summary}


def markdown(a: argparse.Namespace, res: dict[str, Any]) -> list[str]:
    """The convergence table."""
    lines: list[str] = []
    if "convergence" in res:
        c = res["convergence"]["summary"]
        lines += ["| convergence (four-node, fresh mesh per run) | median s | runs |", "|---|---:|---|"]
        vals = " ".join(f"{v:.2f}" for v in c["credit_values"])
        lines.append(f"| spawn → sender on C has credit (receiver on B) | {fmt(c['credit_s'], '.2f')} "
                     f"| {vals} ({c['ok_runs']}/{c['runs']} ok) |")
        lines.append(f"| spawn → message delivered on B | {fmt(c['delivered_s'], '.2f')} | |")
        lines.append(f"| spawn → last node's ready line | {fmt(c['last_ready_s'], '.2f')} | |")
        lines.append(f"| last node's ready line → sender on C has credit | "
                     f"{fmt(c['credit_after_ready_s'], '.2f')} | |")
        lines.append(f"| spawn → B / C accept connections | {fmt(c['b_accepts_s'], '.2f')} / "
                     f"{fmt(c['c_accepts_s'], '.2f')} | |")
        lines.append("")
    return lines


def target(res: dict[str, Any]) -> str:
    """The goal line: converged within GOAL_S."""
    v = res[NAME]["summary"]["credit_s"]
    return (f"four-node converged <= {GOAL_S} s after start: {fmt(v, '.3f')} s "
            f"({'met' if v is not None and v <= GOAL_S else 'missed'})")


if __name__ == "__main__":
    import mesh_bench
    sys.exit(mesh_bench.main(only=NAME))
