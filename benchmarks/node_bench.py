#!/usr/bin/env python3
"""Benchmark a meshrouter node (or any AMQP 1.0 router) with the shared router-agnostic harness.

Builds the C load generator once (benchmarks/build/amqpbench), starts the router under test on a free
port, runs the harness's run_bench.py against it (sampling the router's CPU and RSS) and against a direct
client-to-client baseline, then writes benchmarks/results/<timestamp>-<label>.json and prints a Markdown
table for BENCHMARKS.md. --profile additionally records the throughput workload with py-spy.

Examples:
  .venv/bin/python benchmarks/node_bench.py                       # our node, default workloads, 3 repeats
  .venv/bin/python benchmarks/node_bench.py --router prototype --repeat 1
  .venv/bin/python benchmarks/node_bench.py --router url:amqp://127.0.0.1:5672 --router-pid 4242
  .venv/bin/python benchmarks/node_bench.py --profile --profile-only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the shared harness; names re-exported for the scenarios that import them from here
from harness.loadgen import ensure_client, run_harness  # noqa: E402,F401
from harness.paths import BENCH_DIR, BUILD_DIR, HOST, REPO, RESULTS_DIR, VENV_PY, BenchError, python_exe  # noqa: E402,F401
from harness.paths import SHARED_HARNESS as DEFAULT_HARNESS  # noqa: E402
from harness.procs import (  # noqa: E402,F401
    first_match,
    free_port,
    kill_group,
    node_config_yaml,
    spawn,
    stop_process,
    tail,
    wait_for_lines,
)
from harness.profile import ensure_py_spy, py_spy, short_path, split_frame, top_functions, top_table  # noqa: E402,F401
from harness.report import command_line, fmt, host_info  # noqa: E402,F401
from harness.routers import Router, router_pids, start_router, stop_router  # noqa: E402,F401
from harness.rows import RATE_KEY, Row, markdown_table, summary_rows  # noqa: E402,F401

DEFAULT_PROTOTYPE = Path("/work/shared/design/prototype/fwd_cffi.py")
DEFAULT_WORKLOADS = "throughput,throughput-presettled,rpc,rpc-conc"


# ----------------------------------------------------------------------------------------------- setup

def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--router", default="node",
                    help="node (default: python -m router run CFG), prototype, or url:amqp://HOST:PORT")
    ap.add_argument("--router-pid", type=int, default=None,
                    help="pid of the router given with --router url:... (enables CPU/RSS sampling)")
    ap.add_argument("--config", type=Path, default=None,
                    help="use this node config instead of the generated one (its first listener is used)")
    ap.add_argument("--link-capacity", type=int, default=250, help="link_capacity of the generated config")
    ap.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                    help=f"comma separated run_bench.py workloads (default {DEFAULT_WORKLOADS}; "
                         "also: multicast)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per workload; medians are reported")
    ap.add_argument("--no-direct", action="store_true", help="skip the direct client-to-client baseline")
    ap.add_argument("--label", default=None, help="name of the result file (default: the router kind)")
    ap.add_argument("--bench-args", default="",
                    help='extra run_bench.py options, e.g. "--count 50000 --settle-s 1"')
    ap.add_argument("--profile", action="store_true",
                    help="also record the throughput workload with py-spy (flamegraph + collapsed stacks)")
    ap.add_argument("--profile-only", action="store_true", help="with --profile: skip the measurements")
    ap.add_argument("--profile-count", type=int, default=400000, help="messages sent while profiling")
    ap.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="py-spy --native (show C frames too)")
    ap.add_argument("--harness", type=Path, default=DEFAULT_HARNESS,
                    help="directory holding run_bench.py, amqpbench.c and build.sh")
    ap.add_argument("--prototype", type=Path, default=DEFAULT_PROTOTYPE, help="path of fwd_cffi.py")
    ap.add_argument("--ready-timeout", type=float, default=30.0, help="seconds to wait for the router")
    a = ap.parse_args(argv)
    if a.profile_only and not a.profile:
        ap.error("--profile-only needs --profile")
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    if a.router not in ("node", "prototype") and not a.router.startswith("url:"):
        ap.error("--router must be node, prototype or url:amqp://HOST:PORT")
    return a


# --------------------------------------------------------------------------------------------- harness

def harness_command(a: argparse.Namespace, send_url: str, recv_url: str, label: str, workloads: str,
                    repeat: int, pids: list[int], out: Path, extra: list[str]) -> list[str]:
    """The run_bench.py command line for one target."""
    cmd = [sys.executable, str(a.harness / "run_bench.py"), "--send-url", send_url, "--recv-url", recv_url,
           "--label", label, "--workloads", workloads, "--repeat", str(repeat), "--out", str(out)]
    if pids:
        cmd += ["--pids", ",".join(map(str, pids))]
    return cmd + shlex.split(a.bench_args) + extra


# ------------------------------------------------------------------------------------------- profiling

def profile_throughput(a: argparse.Namespace, router: Router, client: Path, stem: str, tmp: Path) -> dict:
    """Run the throughput workload twice under py-spy: flamegraph SVG, then raw collapsed stacks."""
    if router.pid is None:
        raise BenchError("--profile needs the router pid (--router-pid with --router url:...)")
    files = {"flamegraph": RESULTS_DIR / f"{stem}-throughput.svg",
             "raw": RESULTS_DIR / f"{stem}-throughput.collapsed.txt"}
    rates = {}
    for fmt_name, out in files.items():
        cmd = harness_command(a, router.url, router.url, f"profile-{fmt_name}", "throughput", 1, [router.pid],
                              tmp / f"profile-{fmt_name}.json", ["--count", str(a.profile_count)])
        with py_spy(router.pid, out, fmt_name, a, tmp):
            res = run_harness(cmd, client, router.alive)
        rates[fmt_name] = res["median"].get("throughput", {}).get("msgs_per_s")
    total, top = top_functions(files["raw"])
    return {"flamegraph_svg": str(files["flamegraph"].relative_to(REPO)),
            "collapsed": str(files["raw"].relative_to(REPO)),
            "msgs_per_s_under_profiler": rates, "samples": total,
            "top_self": [{"function": f, "self_samples": s, "incl_samples": i} for f, s, i in top],
            "markdown": top_table(total, top) if total else "(no samples)"}


# ------------------------------------------------------------------------------------------------ main

def measure(a: argparse.Namespace, router: Router, client: Path, tmp: Path) -> dict[str, dict]:
    """Run the workloads against the router and (unless --no-direct) the direct baseline."""
    workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in RATE_KEY]
    if unknown:
        raise BenchError(f"unknown workloads: {', '.join(unknown)}")
    targets: dict[str, dict] = {}
    pids = router_pids(router.pid) if router.pid else []
    cmd = harness_command(a, router.url, router.url, router.kind, ",".join(workloads), a.repeat, pids,
                          tmp / "router.json", [])
    targets[router.kind] = {"command": shlex.join(cmd), "results": run_harness(cmd, client, router.alive)}
    direct = [w for w in workloads if w != "multicast"]  # one listening client cannot fan out
    if not a.no_direct and direct:
        port = free_port()
        cmd = harness_command(a, f"{HOST}:{port}", f"listen://{HOST}:{port}", "direct", ",".join(direct),
                              a.repeat, [], tmp / "direct.json", [])
        targets["direct"] = {"command": shlex.join(cmd), "results": run_harness(cmd, client, lambda: True)}
    return targets


def save_router_log(router: Router, stem: str) -> str | None:
    """Copy the router's stderr (its log) next to the results if it wrote anything."""
    if router.stderr_log is None or not router.stderr_log.exists() or router.stderr_log.stat().st_size == 0:
        return None
    dest = RESULTS_DIR / f"{stem}-router.log"
    shutil.copyfile(router.stderr_log, dest)
    return str(dest.relative_to(REPO))


def report(a: argparse.Namespace, record: dict, rows: list[Row]) -> None:
    """Print the Markdown for BENCHMARKS.md and the profile summary."""
    print()
    if rows:
        print(f"### {record['label']} ({record['timestamp']}, {record['host']['cpus']} CPUs, "
              f"{record['host']['cpu_model'] or 'unknown CPU'})\n")
        print(record["markdown"])
        print(f"\nCommand: `{record['command']}`  ")
        print(f"Router: {record['router']['kind']} at {record['router']['url']}, "
              f"repeat {a.repeat}, medians of the runs.")
    prof = record.get("profile")
    if prof and "markdown" in prof:
        print(f"\nProfile (py-spy, throughput, {prof['samples']} samples; msg/s under the profiler: "
              f"{prof['msgs_per_s_under_profiler']}):\n")
        print(prof["markdown"])
        print(f"\nFlamegraph: {prof['flamegraph_svg']}  collapsed stacks: {prof['collapsed']}")
    elif prof:
        print(f"\nProfile failed: {prof.get('error')}")
    print(f"\nResults: {record['results_file']}")


def run(a: argparse.Namespace) -> int:
    """Everything, with every process we start stopped on the way out."""
    client = ensure_client(a.harness)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", a.label or a.router.split(":")[0])
    stem = f"{stamp}-{label}"
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    record: dict = {"label": label, "timestamp": stamp, "command": command_line(), "host": host_info()}
    with tempfile.TemporaryDirectory(prefix="node_bench-") as tmpdir, contextlib.ExitStack() as stack:
        tmp = Path(tmpdir)
        router = start_router(a, tmp)
        stack.callback(stop_router, router)
        print(f"router: {router.kind} at {router.url} pid={router.pid}", flush=True)
        try:
            targets = {} if a.profile_only else measure(a, router, client, tmp)
        except BenchError as e:
            stop_router(router)
            log = tail(router.stderr_log)
            raise BenchError(f"{e}\n  router log (tail):\n{log}" if log else str(e)) from None
        rows = summary_rows(targets) if targets else []
        record["targets"] = targets
        record["summary"] = [r.__dict__ for r in rows]
        record["markdown"] = markdown_table(rows) if rows else ""
        if a.profile:
            try:
                record["profile"] = profile_throughput(a, router, client, stem, tmp)
            except (BenchError, subprocess.CalledProcessError) as e:
                record["profile"] = {"error": str(e)}
        stack.close()  # stop the router now, so its exit code goes into the record
        record["router"] = {"kind": router.kind, "url": router.url, "pid": router.pid,
                            "command": router.command, "config": router.config,
                            "exit_code": router.exit_code, "log": save_router_log(router, stem)}
    out = RESULTS_DIR / f"{stem}.json"
    record["results_file"] = str(out.relative_to(REPO))
    out.write_text(json.dumps(record, indent=1))
    report(a, record, rows)
    clean = (None, 0) if router.kind == "node" else (None, 0, -signal.SIGTERM)  # the prototype just dies
    if router.exit_code not in clean:
        print(f"warning: the router exited with code {router.exit_code} when stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: Ctrl-C and SIGTERM stop everything we started, then exit."""
    a = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run(a)
    except BenchError as e:
        print(f"node_bench: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("node_bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
