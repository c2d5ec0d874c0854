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
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
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
from harness.sample import median as median_of  # noqa: E402

DEFAULT_PROTOTYPE = Path("/work/shared/design/prototype/fwd_cffi.py")
DEFAULT_WORKLOADS = "throughput,throughput-presettled,rpc,rpc-conc"
RPC_WARMUP = 100  # run_bench.py runs every rpc-client with --warmup 100; those calls are in the CPU window
RATE_UNIT = {"throughput": "msg/s", "throughput-presettled": "msg/s", "rpc": "calls/s",
             "rpc-conc": "calls/s", "multicast": "msg/s/rcv"}
RATE_KEY = {"throughput": "msgs_per_s", "throughput-presettled": "msgs_per_s", "rpc": "calls_per_s",
            "rpc-conc": "calls_per_s", "multicast": "per_receiver_msgs_per_s"}


@dataclass
class Router:
    """The router under test: how to reach it and (if we started it) how to stop it."""

    kind: str                       # node | prototype | url
    url: str                        # amqp://HOST:PORT
    pid: int | None = None
    command: list[str] | None = None
    config: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    stdout_log: Path | None = None
    stderr_log: Path | None = None
    exit_code: int | None = None

    def alive(self) -> bool:
        """True while the router process (if known) is running."""
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return True
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


@dataclass
class Row:
    """One line of the summary table: a workload on one target."""

    workload: str
    target: str
    rate: float | None = None
    unit: str = ""
    vs_direct_pct: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    cpu_us_per_msg: float | None = None
    cpu_pct: float | None = None
    rss_peak_mib: float | None = None
    ok_runs: int = 0
    runs: int = 0
    notes: list[str] = field(default_factory=list)


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


# ------------------------------------------------------------------------------------------- processes

# --------------------------------------------------------------------------------------------- routers

def start_node(a: argparse.Namespace, tmp: Path) -> Router:
    """Start our node with a generated (or the given) config and wait for its ready line."""
    if a.config is not None:
        cfg_path, cfg = a.config.resolve(), a.config.read_text()
    else:
        cfg = node_config_yaml(free_port(), a.link_capacity)
        cfg_path = tmp / "node.yaml"
        cfg_path.write_text(cfg)
    cmd = [python_exe(), "-m", "router", "run", str(cfg_path)]
    proc, out, err = spawn(cmd, tmp, "router")
    router = Router("node", "", proc.pid, cmd, cfg, proc, out, err)
    patterns = [r"listening: role=normal url=(\S+)", r"ready: node=(\S+) pid=(\d+)"]
    listening, ready = wait_for_lines("the node", proc, out, err, patterns, a.ready_timeout)
    router.url = listening.group(1)
    if int(ready.group(2)) != proc.pid:
        print(f"warning: node reports pid {ready.group(2)}, started pid {proc.pid}", flush=True)
        router.pid = int(ready.group(2))
    return router


def start_prototype(a: argparse.Namespace, tmp: Path) -> Router:
    """Start the throw-away cffi prototype router and wait for its READY line."""
    if not a.prototype.exists():
        raise BenchError(f"prototype not found: {a.prototype} (use --prototype PATH)")
    port = free_port()
    cmd = [python_exe(), str(a.prototype), str(port), HOST]
    proc, out, err = spawn(cmd, tmp, "router")
    router = Router("prototype", f"amqp://{HOST}:{port}", proc.pid, cmd, None, proc, out, err)
    patterns = [r"READY pid=(\d+) port=(\d+)"]
    (ready,) = wait_for_lines("the prototype", proc, out, err, patterns, a.ready_timeout)
    router.pid = int(ready.group(1))
    return router


def external_router(a: argparse.Namespace) -> Router:
    """A router somebody else started: check that it accepts TCP connections."""
    url = a.router[len("url:"):]
    m = re.fullmatch(r"(?:amqp://)?([^:/]+):(\d+)/?", url)
    if not m:
        raise BenchError(f"cannot parse router url {url!r} (want amqp://HOST:PORT)")
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=3).close()
    except OSError as e:
        raise BenchError(f"router at {url} does not accept connections: {e}") from e
    if a.router_pid is not None and not Path(f"/proc/{a.router_pid}").exists():
        raise BenchError(f"no process with pid {a.router_pid}")
    return Router("url", f"amqp://{m.group(1)}:{m.group(2)}", a.router_pid)


def stop_router(router: Router) -> None:
    """Stop the router if we started it and remember its exit code."""
    if router.proc is not None:
        router.exit_code = stop_process(router.proc)


# --------------------------------------------------------------------------------------------- harness

def harness_command(a: argparse.Namespace, send_url: str, recv_url: str, label: str, workloads: str,
                    repeat: int, pids: list[int], out: Path, extra: list[str]) -> list[str]:
    """The run_bench.py command line for one target."""
    cmd = [sys.executable, str(a.harness / "run_bench.py"), "--send-url", send_url, "--recv-url", recv_url,
           "--label", label, "--workloads", workloads, "--repeat", str(repeat), "--out", str(out)]
    if pids:
        cmd += ["--pids", ",".join(map(str, pids))]
    return cmd + shlex.split(a.bench_args) + extra


# --------------------------------------------------------------------------------------------- results

def messages_of(workload: str, run: dict) -> int:
    """Deliveries the router sent on during a run (the CPU µs/msg denominator)."""
    if workload.startswith("throughput"):
        return int(run["received"])
    if workload.startswith("rpc"):
        return 2 * (int(run["completed"]) + RPC_WARMUP)  # request + reply, warm-up calls included
    if workload == "multicast":
        return int(sum(run["received"]))
    return 0


def cpu_us_per_msg(workload: str, run: dict) -> float | None:
    """Router CPU seconds sampled during the run (all pids) per message, in µs."""
    procs = run.get("router", {}).get("procs") or {}
    cpu = [p["cpu_s"] for p in procs.values()]
    n = messages_of(workload, run)
    if not cpu or None in cpu or n <= 0:
        return None
    return 1e6 * sum(cpu) / n


def summarize(workload: str, target: str, results: dict) -> Row:
    """One table row from run_bench.py's runs and medians of a workload."""
    runs = results["runs"].get(workload, [])
    med = results["median"].get(workload, {})
    ok = [r for r in runs if "error" not in r]
    row = Row(workload, target, rate=med.get(RATE_KEY[workload]), unit=RATE_UNIT[workload],
              ok_runs=len(ok), runs=len(runs))
    if workload.startswith("rpc"):
        row.p50_us, row.p99_us = med.get("p50_us"), med.get("p99_us")
    row.cpu_us_per_msg = median_of([cpu_us_per_msg(workload, r) for r in ok])
    row.cpu_pct = med.get("router_cpu_pct_total")
    if med.get("router_rss_peak_kb_sum"):
        row.rss_peak_mib = med["router_rss_peak_kb_sum"] / 1024
    if med.get("missing_total"):
        row.notes.append(f"missing {med['missing_total']:,}")
    if workload == "multicast" and ok:
        sent = min(r["sent"] for r in ok)
        if med.get("received_min", sent) < sent:
            row.notes.append(f"a receiver got only {med['received_min']:,} of {sent:,}")
    released = sum(r.get("released", 0) for r in ok)
    if released:
        row.notes.append(f"released {released:,}")
    for r in runs:
        if "error" in r:
            row.notes.append("error: " + r["error"].splitlines()[0][:80])
    return row


def add_direct_ratio(rows: list[Row]) -> None:
    """Fill vs_direct_pct of router rows from the direct row of the same workload."""
    direct = {r.workload: r.rate for r in rows if r.target == "direct"}
    for r in rows:
        base = direct.get(r.workload)
        if r.target != "direct" and base and r.rate is not None:
            r.vs_direct_pct = 100 * r.rate / base


def markdown_table(rows: list[Row]) -> str:
    """The summary as a Markdown table."""
    head = ("| workload | target | rate | vs direct | RPC p50 µs | RPC p99 µs | router CPU µs/msg "
            "| router CPU % | router peak RSS MiB | runs ok | notes |")
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        rate = "–" if r.rate is None else f"{r.rate:,.0f} {r.unit}"
        vs = "" if r.target == "direct" else fmt(r.vs_direct_pct, ".0f") + ("%" if r.vs_direct_pct else "")
        lines.append(f"| {r.workload} | {r.target} | {rate} | {vs} | {fmt(r.p50_us, ',.0f')} "
                     f"| {fmt(r.p99_us, ',.0f')} | {fmt(r.cpu_us_per_msg, '.1f')} | {fmt(r.cpu_pct, '.0f')} "
                     f"| {fmt(r.rss_peak_mib, '.1f')} | {r.ok_runs}/{r.runs} | {'; '.join(r.notes)} |")
    return "\n".join(lines)


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

def start_router(a: argparse.Namespace, tmp: Path) -> Router:
    """Start (or locate) the router chosen with --router."""
    if a.router == "node":
        return start_node(a, tmp)
    if a.router == "prototype":
        return start_prototype(a, tmp)
    return external_router(a)


def router_pids(pid: int) -> list[int]:
    """The router's process and its children (a node's telemetry writer process): the CPU measured."""
    children = []
    for tid in os.listdir(f"/proc/{pid}/task") if Path(f"/proc/{pid}/task").exists() else ():
        try:
            children += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return [pid, *children]


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


def summary_rows(targets: dict[str, dict]) -> list[Row]:
    """Table rows, grouped by workload, router first, direct last."""
    rows = []
    names = list(targets)
    workloads = list(targets[names[0]]["results"]["runs"])
    for w in workloads:
        for t in names:
            if w in targets[t]["results"]["runs"]:
                rows.append(summarize(w, t, targets[t]["results"]))
    add_direct_ratio(rows)
    return rows


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
