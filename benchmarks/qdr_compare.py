#!/usr/bin/env python3
"""meshrouter against qdrouterd 1.19, rounds alternated in the same window (issue 21 point 3).

Each round runs, for each case, meshrouter and qdrouterd one after the other (the order swaps every
round), each freshly started, with the shared harness (../shared/bench/run_bench.py, --repeat 1, the C
load generator amqpbench). Cases (the issue's table):

* ``chain``: chain of 3, sender on C, receiver on A (two inter-router hops, through B): throughput
  unsettled and pre-settled;
* ``mesh4``: full mesh of four, sender on C, receiver on B (one inter-router hop): the same;
* ``single``: one node, 50 concurrent RPC calls (rpc-conc); qdrouterd with its default 4 worker threads
  (``--qdr-threads 1`` for one).

meshrouter runs as mesh_bench.py starts it (one process per node, topologies/ shapes, free ports);
qdrouterd from ../shared/bench/qdr (configs copied with their ports moved by ``--port-offset``, so another
session's routers on the shipped ports do not collide; started and stopped by start_mesh.sh /
stop_mesh.sh with their own run directory).

    .venv/bin/python benchmarks/qdr_compare.py --rounds 5 [--cases chain,mesh4,single] [--count 200000]

Prints every round and a table of medians and ratios (meshrouter / qdrouterd); writes
benchmarks/results/<timestamp>-qdr-compare.json. ``--base REV`` also runs meshrouter at git revision REV
(extracted as code_ab.py does) in every round, for a before/after in the same window.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for _path in (BENCH_DIR, BENCH_DIR.parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import mesh_bench as mb  # noqa: E402
import node_bench as nb  # noqa: E402
from harness.trees import extract  # noqa: E402

QDR_DIR = Path("/work/shared/bench/qdr")
RESULTS_DIR = BENCH_DIR / "results"

# case -> (meshrouter topology maker, qdr topology, sender node, receiver node, workloads)
CASES: dict[str, tuple[Any, str, str, str, str]] = {
    "chain": (mb.chain_topology, "chain3", "C", "A", "throughput,throughput-presettled"),
    "mesh4": (mb.four_node_topology, "mesh4", "C", "B", "throughput,throughput-presettled"),
    "single": (None, "single", "A", "A", "rpc-conc"),
}
KEYS = {"throughput": "msgs_per_s", "throughput-presettled": "msgs_per_s", "rpc-conc": "calls_per_s"}


def single_topology(a: argparse.Namespace) -> Any:
    """One meshrouter node with the four-node topology's settings."""
    return mb.make_topology("single", "A", [], mb.shipped_settings("four-node"), a)


def qdr_configs(topo: str, tmp: Path, offset: int, threads: int | None) -> tuple[Path, dict[str, int]]:
    """A copy of the qdrouterd configs of `topo` with every port moved by `offset`; returns the directory
    and each router's client port (the listener of role normal)."""
    src = [QDR_DIR / "qdr-single.conf"] if topo == "single" else sorted((QDR_DIR / topo).glob("*.conf"))
    out = tmp / f"qdr-{topo}"
    out.mkdir(parents=True, exist_ok=True)
    clients: dict[str, int] = {}
    for conf in src:
        text = re.sub(r"(\bport:\s*)(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + offset}",
                      conf.read_text())
        if threads is not None:
            text = re.sub(r"(router\s*\{)", rf"\1\n    workerThreads: {threads}", text, count=1)
        node = re.search(r"\bid:\s*(\S+)", text).group(1)
        name = "A" if topo == "single" else node
        (out / f"{name}.conf").write_text(text)
        for block in re.findall(r"listener\s*\{[^}]*\}", text):
            if re.search(r"role:\s*normal", block) or "role:" not in block:
                clients[name] = int(re.search(r"port:\s*(\d+)", block).group(1))
    return out, clients


def run_harness(a: argparse.Namespace, send_url: str, recv_url: str, pids: list[int], workloads: str,
                label: str, tmp: Path, alive) -> dict[str, Any]:
    out = tmp / f"{label}.json"
    cmd = [sys.executable, str(a.harness / "run_bench.py"), "--send-url", send_url, "--recv-url", recv_url,
           "--label", label, "--workloads", workloads, "--repeat", "1", "--pids", ",".join(map(str, pids)),
           "--out", str(out), "--count", str(a.count)]
    return nb.run_harness(cmd, a.client, alive)


def values(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per workload: the key figure, messages lost (pre-settled: missing), router CPU seconds."""
    out = {}
    for w, runs in res["runs"].items():
        r = runs[0]
        if "error" in r:
            out[w] = {"value": None, "error": r["error"].splitlines()[0][:160]}
            continue
        procs = (r.get("router") or {}).get("procs") or {}
        cpu = [v.get("cpu_s") for v in procs.values()]
        out[w] = {"value": r.get(KEYS.get(w, "msgs_per_s")), "missing": r.get("missing"),
                  "released": r.get("released"), "p50_us": r.get("p50_us"),
                  "cpu_s": round(sum(cpu), 3) if cpu and None not in cpu else None}
    return out


def run_meshrouter(a: argparse.Namespace, case: str, tmp: Path, keep: list[Path],
                   tree: Path | None = None) -> dict[str, Any]:
    """meshrouter from this tree, or from `tree` (the code of --base)."""
    make, _, send, recv, workloads = CASES[case]
    topo = (make or single_topology)(a)
    saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    if tree is not None:        # the nodes run `python -m router` (cwd first on sys.path) from that tree
        os.environ["PYTHONPATH"] = str(tree)
        os.chdir(tree)
    try:
        return _run_mesh(a, case, topo, send, recv, workloads, tmp, keep)
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _run_mesh(a: argparse.Namespace, case: str, topo: Any, send: str, recv: str, workloads: str, tmp: Path,
              keep: list[Path]) -> dict[str, Any]:
    with mb.running_mesh(topo, tmp, keep) as mesh:
        mesh.start()
        if case == "single":
            mesh.wait_ready()
        else:
            mesh.wait_converged()
        res = run_harness(a, mesh.url(send), mesh.url(recv), mesh.pids(), workloads, f"mr-{case}", tmp,
                          mesh.alive)
    return values(res)


def run_qdrouterd(a: argparse.Namespace, case: str, tmp: Path) -> dict[str, Any]:
    _, topo, send, recv, workloads = CASES[case]
    confs, clients = qdr_configs(topo, tmp, a.port_offset, a.qdr_threads)
    env = {**os.environ, "RUN_DIR": str(tmp / "qdr-run")}
    for attempt in (1, 2):          # a port of the range may be taken for a moment (ephemeral ports)
        start = subprocess.run([str(QDR_DIR / "start_mesh.sh"), str(confs)], capture_output=True, text=True,
                               env=env, timeout=120)
        if start.returncode == 0:
            break
        # the routers it did start would hold their ports: stop them (only those, by their pid files)
        subprocess.run([str(QDR_DIR / "stop_mesh.sh"), str(confs)], capture_output=True, env=env, timeout=60)
        if attempt == 2:
            raise mb.BenchError(f"start_mesh.sh {topo}: {start.stdout[-800:]} {start.stderr[-800:]}")
        time.sleep(2)
    pids = [int(p) for p in re.search(r"PIDS=([\d,]+)", start.stdout).group(1).split(",")]

    def alive() -> bool:
        return all(os.path.exists(f"/proc/{p}") for p in pids)
    try:
        if case == "single":
            time.sleep(0.5)
        res = run_harness(a, f"amqp://127.0.0.1:{clients[send]}", f"amqp://127.0.0.1:{clients[recv]}", pids,
                          workloads, f"qdr-{case}", tmp, alive)
    finally:
        subprocess.run([str(QDR_DIR / "stop_mesh.sh"), str(confs)], capture_output=True, env=env, timeout=60)
    return values(res)


def med(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--count", type=int, default=200000)
    ap.add_argument("--port-offset", type=int, default=1500, help="moves every qdrouterd port by this much")
    ap.add_argument("--qdr-threads", type=int, default=None, help="qdrouterd workerThreads (default: 4)")
    ap.add_argument("--harness", type=Path, default=nb.DEFAULT_HARNESS)
    for opt in ("--hello-interval", "--link-capacity", "--telemetry"):   # what mesh_bench's topologies read
        ap.add_argument(opt, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--base", default=None,
                    help="also run meshrouter at this git revision (system `base`) in every round")
    a = ap.parse_args()
    a.client = nb.ensure_client(a.harness)
    cases = [c for c in a.cases.split(",") if c]
    rounds: list[dict[str, Any]] = []
    keep: list[Path] = []
    systems = ["meshrouter", "qdrouterd"] + (["base"] if a.base else [])
    with tempfile.TemporaryDirectory(prefix="qdr-compare-") as tmpdir:
        base = None
        if a.base:
            (Path(tmpdir) / "base").mkdir()
            base = extract(a.base, Path(tmpdir) / "base")
        for i in range(a.rounds):
            row: dict[str, Any] = {"round": i + 1, "load": os.getloadavg()}
            for case in cases:
                order = systems if i % 2 == 0 else systems[::-1]
                for system in order:
                    tmp = Path(tempfile.mkdtemp(dir=tmpdir))
                    try:
                        got = (run_meshrouter(a, case, tmp, keep) if system == "meshrouter"
                               else run_meshrouter(a, case, tmp, keep, base) if system == "base"
                               else run_qdrouterd(a, case, tmp))
                    except (mb.BenchError, nb.BenchError, subprocess.TimeoutExpired) as exc:
                        got = {"error": str(exc)[:300]}
                    row[f"{case}/{system}"] = got
                    print(f"round {i + 1} {case} {system}: {json.dumps(got)}", flush=True)
            row["load_after"] = os.getloadavg()
            rounds.append(row)
    summary = summarize(rounds, cases, "base" in systems)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-qdr-compare.json"
    out.write_text(json.dumps({"count": a.count, "qdr_threads": a.qdr_threads or 4, "rounds": rounds,
                               "summary": summary}, indent=2))
    print(f"Results: {out.relative_to(BENCH_DIR.parent)}")
    return 0


def summarize(rounds: list[dict[str, Any]], cases: list[str], with_base: bool) -> list[dict[str, Any]]:
    """Medians per case and workload, their ratio, and messages lost; printed as a Markdown table."""
    rows = []
    print("| case | workload | meshrouter (each round) | qdrouterd (each round) | medians | ratio | "
          "pre-settled lost (mr / qdr) |" + (" base (each round) | base median, ratio |" * with_base))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if with_base else ""))
    f = lambda xs: ", ".join("-" if x is None else f"{x:,.0f}" for x in xs)  # noqa: E731
    for case in cases:
        for w in CASES[case][4].split(","):
            mr = [r.get(f"{case}/meshrouter", {}).get(w, {}).get("value") for r in rounds]
            qd = [r.get(f"{case}/qdrouterd", {}).get(w, {}).get("value") for r in rounds]
            bs = [r.get(f"{case}/base", {}).get(w, {}).get("value") for r in rounds]
            lost = None
            if w == "throughput-presettled":
                lost = ([r.get(f"{case}/meshrouter", {}).get(w, {}).get("missing") for r in rounds],
                        [r.get(f"{case}/qdrouterd", {}).get(w, {}).get("missing") for r in rounds])
            m1, m2, m3 = med(mr), med(qd), med(bs)
            ratio = m1 / m2 if m1 and m2 else None
            ratio_base = m3 / m2 if m3 and m2 else None
            rows.append({"case": case, "workload": w, "meshrouter": mr, "qdrouterd": qd, "median_mr": m1,
                         "median_qdr": m2, "ratio": ratio, "lost": lost, "base": bs, "median_base": m3,
                         "ratio_base": ratio_base})
            extra = (f" {f(bs)} | {m3 or 0:,.0f}, {'-' if ratio_base is None else f'{ratio_base:.2f}'} |"
                     if with_base else "")
            print(f"| {case} | {w} | {f(mr)} | {f(qd)} | {m1 or 0:,.0f} / {m2 or 0:,.0f} | "
                  f"{'-' if ratio is None else f'{ratio:.2f}'} | {lost if lost else ''} |{extra}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
