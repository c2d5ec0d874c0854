#!/usr/bin/env python3
"""Benchmark meshes of meshrouter nodes: multi-hop throughput, RPC latency, convergence and reroute time.

Every scenario starts its own mesh the way `meshrouter mesh up` does (router.meshctl: one
`python -m router run` per node, own session, logs in a run directory), from a topology generated with
free ports (the shipped topologies' ports may be in use by someone else), and stops it afterwards.
Throughput and RPC use the shared C load generator (/work/shared/bench: amqpbench driven by
run_bench.py, built into benchmarks/build/ as node_bench.py does).

Scenarios (--scenarios, default all):
  chain        3-node chain A - B - C (topologies/chain.yaml's shape): sender on A, receiver on C
               (two inter-router hops, through B); run_bench.py throughput, unsettled and pre-settled.
  four-node    topologies/four-node.yaml's full mesh: sender / RPC caller on C, receiver / RPC server
               on B (one inter-router hop); run_bench.py throughput and rpc (sequential) [and rpc-conc].
  convergence  the four-node mesh started from nothing: spawn -> credit on C (mesh_convergence.py)
  reroute      a diamond, B killed mid-stream: kill -> first delivery through C (mesh_reroute.py)

Examples:
  .venv/bin/python benchmarks/mesh_bench.py                                   # everything, 5 runs each
  .venv/bin/python benchmarks/mesh_bench.py --scenarios chain --repeat 3 --count 100000
  .venv/bin/python benchmarks/mesh_bench.py --scenarios reroute --reroute-rate 5000
  .venv/bin/python benchmarks/mesh_bench.py --scenarios chain --profile       # + py-spy of every chain node

Results: benchmarks/results/<timestamp>-<label>.json and a Markdown summary on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for _path in (BENCH_DIR, BENCH_DIR.parent):  # the scenario files and the harness; router/ is the repo's
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import mesh_convergence  # noqa: E402
import mesh_reroute  # noqa: E402
from harness.loadgen import ensure_client, run_harness  # noqa: E402
from harness.mesh import Mesh, running_mesh, shipped_settings  # noqa: E402,F401 (qdr_compare.py's)
from harness.meshruns import (  # noqa: E402,F401 (make_topology, four_node_topology: qdr_compare.py's)
    chain_topology,
    four_node_topology,
    make_topology,
    run_on_mesh,
    spread,
    summarize_harness,
)
from harness.paths import REPO, RESULTS_DIR, SHARED_HARNESS, BenchError  # noqa: E402,F401
from harness.profile import py_spy, top_functions  # noqa: E402
from harness.report import command_line, fmt, host_info  # noqa: E402

SCENARIOS = ("chain", "four-node", "convergence", "reroute")
TARGETS = {"chain_msgs_per_s": 30000.0}
#: the scenarios in files of their own: name -> module (add_arguments, check, scenario, markdown, target)
MODULES = {m.NAME: m for m in (mesh_convergence, mesh_reroute)}


def scenario_chain(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Chain A - B - C: throughput A -> C, unsettled and pre-settled."""
    topo = chain_topology(a)
    with running_mesh(topo, tmp, keep) as mesh:
        mesh.start()
        conv = mesh.wait_converged()
        print(f"chain: up, converged (state poll) {conv:.2f} s after ready; "
              f"A={mesh.url('A')} C={mesh.url('C')}", flush=True)
        res = run_on_mesh(a, client, mesh, "A", "C", "chain", a.chain_workloads, tmp)
        out: dict[str, Any] = {"topology": "chain", "send": "A", "recv": "C", "harness": res,
                               "summary": summarize_harness(res, mesh)}
        if a.profile:
            out["profile"] = profile_chain(a, client, mesh, tmp)
    return out


def scenario_four_node(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Four-node full mesh: throughput and RPC from C to B."""
    topo = four_node_topology(a)
    with running_mesh(topo, tmp, keep) as mesh:
        mesh.start()
        mesh.wait_converged()
        print(f"four-node: up; C={mesh.url('C')} B={mesh.url('B')}", flush=True)
        res = run_on_mesh(a, client, mesh, "C", "B", "four-node", a.four_node_workloads, tmp)
        return {"topology": "four-node", "send": "C", "recv": "B", "harness": res,
                "summary": summarize_harness(res, mesh)}


def profile_chain(a: argparse.Namespace, client: Path, mesh: Mesh, tmp: Path) -> dict[str, Any]:
    """One extra unsettled throughput run with py-spy attached to every chain node (raw collapsed stacks
    in benchmarks/results/); returns each node's top functions by self time."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    opts = argparse.Namespace(profile_rate=a.profile_rate, native=a.native)
    outs = {n: RESULTS_DIR / f"{a.stem}-chain-{n}.collapsed.txt" for n in mesh.topology.node_ids}
    with contextlib.ExitStack() as stack:
        for n, path in outs.items():
            stack.enter_context(py_spy(mesh.pid(n), path, "raw", opts, tmp))
        cmd = [sys.executable, str(a.harness / "run_bench.py"), "--send-url", mesh.url("A"),
               "--recv-url", mesh.url("C"), "--label", "chain-profile", "--workloads", "throughput",
               "--repeat", "1", "--count", str(a.count), "--out", str(tmp / "chain-profile.json")]
        res = run_harness(cmd, client, mesh.alive)
    rate = res["median"].get("throughput", {}).get("msgs_per_s")
    prof: dict[str, Any] = {"msgs_per_s_under_profiler": rate}
    for n, path in outs.items():
        total, top = top_functions(path, 15)
        prof[n] = {"file": str(path.relative_to(REPO)), "samples": total,
                   "top_self": [{"function": f, "self_pct": round(100 * s / total, 1),
                                 "incl_pct": round(100 * i / total, 1)} for f, s, i in top] if total else []}
    return prof


def markdown(a: argparse.Namespace, res: dict[str, Any]) -> str:
    """The summary tables for BENCHMARKS.md."""
    lines: list[str] = []
    thr = [("chain", "A → C (2 hops, via B)", w) for w in ("throughput", "throughput-presettled")]
    thr += [("four-node", "C → B (1 hop)", w)
            for w in ("throughput", "throughput-presettled", "rpc", "rpc-conc")]
    rows = [(s, path, w, res[s]["summary"][w]) for s, path, w in thr
            if s in res and "summary" in res[s] and w in res[s]["summary"]]
    if rows:
        lines += ["| mesh | path | workload | median | runs (min–max) | RPC p50 / p99 µs | CPU % per node "
                  "| CPU µs/msg per node | runs ok | notes |",
                  "|---|---|---|---:|---|---|---|---|---:|---|"]
        for s, path, w, r in rows:
            if w.startswith("rpc"):
                rate = f"{r['calls_per_s']:,.0f} calls/s" if r.get("calls_per_s") else "–"
                vals = spread(r["p50_values"], ",.0f") + " µs p50"
                lat = f"{fmt(r.get('p50_us'), ',.0f')} / {fmt(r.get('p99_us'), ',.0f')}"
            else:
                rate = f"{r['median']:,.0f} msg/s" if r.get("median") else "–"
                vals = spread(r["values"], ",.0f")
                lat = "–"
            cpu = " ".join(f"{n} {fmt(v['cpu_pct'], '.0f')}" for n, v in r["nodes"].items())
            us = " ".join(f"{n} {fmt(v['us_per_msg'], '.1f')}" for n, v in r["nodes"].items())
            notes = []
            if r.get("missing"):
                notes.append(f"missing {r['missing']:,}")
            if r.get("released"):
                notes.append(f"released {r['released']:,}")
            notes += [f"error: {e}" for e in r["errors"]]
            lines.append(f"| {s} | {path} | {w} | {rate} | {vals} | {lat} | {cpu} | {us} "
                         f"| {r['ok_runs']}/{r['runs']} | {'; '.join(notes)} |")
        lines.append("")
    for m in MODULES.values():
        if m.NAME in res:
            lines += m.markdown(a, res)
    return "\n".join(lines)


def targets(res: dict[str, Any]) -> list[str]:
    """One line per target: measured median against it."""
    out = []
    if "chain" in res:
        v = res["chain"]["summary"].get("throughput", {}).get("median")
        out.append(f"chain unsettled >= {TARGETS['chain_msgs_per_s']:,.0f} msg/s: {fmt(v, ',.0f')} "
                   f"({'met' if v and v >= TARGETS['chain_msgs_per_s'] else 'missed'})")
    out += [m.target(res) for m in MODULES.values() if m.NAME in res]
    return out


def parse_args(argv: list[str], only: str | None = None) -> argparse.Namespace:
    """Command-line options; ``only``: the options of that scenario alone (its own script's command line)."""
    doc = MODULES[only].__doc__ if only else __doc__
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if only is None:
        ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma separated, from {', '.join(SCENARIOS)} (default: all)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per measurement; medians are reported")
    if only is None:
        throughput_arguments(ap)
    ap.add_argument("--hello-interval", type=float, default=None,
                    help="override router.hello_interval (and hello_max_age = 3x) of every node; default: "
                         "the shipped topologies' settings (node defaults)")
    ap.add_argument("--link-capacity", type=int, default=None,
                    help="override link_capacity of every node (default: the node default, 250)")
    ap.add_argument("--telemetry", type=Path, default=None,
                    help="every node writes telemetry into this directory (what it costs: compare runs)")
    for name, m in MODULES.items():
        if only in (None, name):
            m.add_arguments(ap)
    ap.add_argument("--label", default=only or "mesh", help="name of the result file")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep every mesh's run directory (node configs, stdout, stderr logs) under /tmp")
    ap.add_argument("--harness", type=Path, default=SHARED_HARNESS,
                    help="directory holding run_bench.py, amqpbench.c and build.sh")
    a = ap.parse_args(argv)
    a.scenario_list = [only] if only else [s.strip() for s in a.scenarios.split(",") if s.strip()]
    unknown = [s for s in a.scenario_list if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenarios: {', '.join(unknown)}")
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    for m in MODULES.values():
        if m.NAME in a.scenario_list:
            m.check(ap, a)
    return a


def throughput_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the chain and four-node scenarios."""
    ap.add_argument("--count", type=int, default=200000, help="messages per throughput run")
    ap.add_argument("--rpc-count", type=int, default=5000, help="sequential calls per rpc run")
    ap.add_argument("--chain-workloads", default="throughput,throughput-presettled",
                    help="run_bench.py workloads A -> C in the chain "
                         "(default throughput,throughput-presettled)")
    ap.add_argument("--four-node-workloads", default="throughput,rpc",
                    help="run_bench.py workloads C -> B in the four-node mesh (default throughput,rpc; "
                         "also throughput-presettled, rpc-conc)")
    ap.add_argument("--bench-args", default="", help='extra run_bench.py options, e.g. "--settle-s 1"')
    ap.add_argument("--profile", action="store_true",
                    help="chain: one extra throughput run with py-spy on every node (needs py-spy)")
    ap.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="py-spy --native")


def run(a: argparse.Namespace) -> int:
    """Every chosen scenario, each with its own mesh, everything stopped on the way out."""
    client = ensure_client(a.harness)
    a.stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', a.label)}"
    record: dict[str, Any] = {"label": a.label, "command": command_line(), "host": host_info(),
                              "load_before": os.getloadavg(), "results": {}}
    funcs = {"chain": scenario_chain, "four-node": scenario_four_node,
             **{name: m.scenario for name, m in MODULES.items()}}
    keep: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix="mesh_bench-"))
    try:
        for s in a.scenario_list:
            print(f"== {s}", flush=True)
            t = time.monotonic()
            load = os.getloadavg()[0]
            try:
                record["results"][s] = funcs[s](a, client, tmp, keep)
            except BenchError as e:
                print(f"mesh_bench: {s} failed: {e}", file=sys.stderr, flush=True)
                record["results"][s] = {"error": str(e)}
            record["results"][s]["load_1min"] = [load, os.getloadavg()[0]]
            print(f"== {s} done in {time.monotonic() - t:.0f} s (1-min load average {load:.2f} before, "
                  f"{os.getloadavg()[0]:.2f} after)", flush=True)
    finally:
        if a.keep_logs:
            print(f"run directories with the nodes' configs and logs kept in {tmp}", flush=True)
        elif keep:
            print(f"kept run directories with logs: {', '.join(map(str, keep))}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    record["load_after"] = os.getloadavg()
    good = {k: v for k, v in record["results"].items() if "error" not in v}
    record["markdown"] = markdown(a, good)
    record["targets"] = targets(good)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{a.stem}.json"
    out.write_text(json.dumps(record, indent=1, default=str))
    print()
    print(record["markdown"])
    for line in record["targets"]:
        print("target: " + line)
    for k, v in record["results"].items():
        print(f"{k}: 1-min load average {v['load_1min'][0]:.2f} before, {v['load_1min'][1]:.2f} after")
    prof = good.get("chain", {}).get("profile")
    if prof:
        print(f"\nprofile (py-spy, chain throughput, {prof['msgs_per_s_under_profiler']} msg/s under it):")
        for n in ("A", "B", "C"):
            top = ", ".join(f"{t['function']} {t['self_pct']}%" for t in prof[n]["top_self"][:8])
            print(f"  {n} ({prof[n]['samples']} samples, {prof[n]['file']}): {top}")
    print(f"\nCommand: {record['command']}\nLoad average before/after: "
          f"{' '.join(f'{x:.2f}' for x in record['load_before'])} / "
          f"{' '.join(f'{x:.2f}' for x in record['load_after'])}\nResults: {out.relative_to(REPO)}")
    failed = [k for k, v in record["results"].items() if "error" in v]
    return 1 if failed else 0


def main(argv: list[str] | None = None, only: str | None = None) -> int:
    """Entry point (``only``: one scenario's own script): Ctrl-C and SIGTERM stop everything we started,
    then exit."""
    a = parse_args(sys.argv[1:] if argv is None else argv, only)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run(a)
    except BenchError as e:
        print(f"mesh_bench: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mesh_bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
