#!/usr/bin/env python3
"""Compare the node's asyncio loop (`python -m router run`) with a plain selectors loop.

Generates one node config (free port, node id `bench`, prefix `multicast` -> multicast, default balanced,
link_capacity 250), then for each round starts the asyncio node, runs node_bench.py against it
(`--router url:... --router-pid N --no-direct`), stops it, and does the same with
benchmarks/selectors_server.py on the same config: A B A B ..., so machine noise hits both alike.
Prints a Markdown table: medians over every run of every round (min–max in brackets), and the ratio
selectors/asyncio. Waits for the 1-minute load average to drop below --max-load before the first turn
(--load-tries times --load-wait at most) and notes the load before every turn.

  .venv/bin/python benchmarks/loop_compare.py                   # 3 rounds x --repeat 3
  .venv/bin/python benchmarks/loop_compare.py --rounds 1 --bench-args "--count 50000"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node_bench import (
    DEFAULT_WORKLOADS,
    RATE_KEY,
    RATE_UNIT,
    REPO,
    RESULTS_DIR,
    BenchError,
    command_line,
    cpu_us_per_msg,
    free_port,
    node_config_yaml,
    python_exe,
    spawn,
    stop_process,
    tail,
    wait_for_lines,
)

NODE_BENCH = REPO / "benchmarks" / "node_bench.py"
SELECTORS_SERVER = REPO / "benchmarks" / "selectors_server.py"
LOOPS = ("asyncio", "selectors")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="A B rounds (default 3: A B A B A B)")
    ap.add_argument("--repeat", type=int, default=3, help="node_bench.py --repeat per turn")
    ap.add_argument("--workloads", default=DEFAULT_WORKLOADS, help="node_bench.py --workloads")
    ap.add_argument("--link-capacity", type=int, default=250, help="link_capacity of the generated config")
    ap.add_argument("--bench-args", default="", help="passed on as node_bench.py --bench-args")
    ap.add_argument("--max-load", type=float, default=1.5, help="wait while the 1-min load is above this")
    ap.add_argument("--load-wait", type=float, default=60.0, help="seconds to wait before re-checking")
    ap.add_argument("--load-tries", type=int, default=3, help="re-checks before running anyway")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.repeat < 1:
        ap.error("--rounds and --repeat must be >= 1")
    return a


def wait_for_quiet(a: argparse.Namespace, what: str) -> float:
    """Wait (up to --load-tries times --load-wait) for the load average to fall; return the last value."""
    load = os.getloadavg()[0]
    for i in range(a.load_tries):
        if load <= a.max_load:
            break
        print(f"load {load:.2f} > {a.max_load} before {what}; waiting {a.load_wait:.0f} s "
              f"({i + 1}/{a.load_tries})", flush=True)
        time.sleep(a.load_wait)
        load = os.getloadavg()[0]
    if load > a.max_load:
        print(f"warning: running {what} at load {load:.2f}", flush=True)
    return load


def start_loop(name: str, cfg: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], str, int]:
    """Start one node runner on cfg; return (process, url, pid) once it printed its ready line."""
    cmd = ([python_exe(), "-m", "router", "run", str(cfg)] if name == "asyncio"
           else [python_exe(), str(SELECTORS_SERVER), str(cfg)])
    proc, out, err = spawn(cmd, tmp, name)
    try:
        listening, ready = wait_for_lines(name, proc, out, err, [r"listening: role=normal url=(\S+)",
                                                                 r"ready: node=(\S+) pid=(\d+)"], 30)
    except BaseException:
        stop_process(proc)
        raise
    return proc, listening.group(1), int(ready.group(2))


def run_node_bench(a: argparse.Namespace, label: str, url: str, pid: int) -> tuple[list[str], dict]:
    """Run node_bench.py against a running router; return its command and its result record."""
    cmd = [python_exe(), str(NODE_BENCH), "--router", f"url:{url}", "--router-pid", str(pid), "--no-direct",
           "--workloads", a.workloads, "--repeat", str(a.repeat), "--label", label]
    if a.bench_args:
        cmd += ["--bench-args", a.bench_args]
    print("$ " + shlex.join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    result = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print("  | " + line, end="", flush=True)
            if line.startswith("Results: "):
                result = REPO / line.split(" ", 1)[1].strip()
        proc.wait()
    finally:
        stop_process(proc, timeout=30)   # node_bench stops its harness on SIGTERM
    if proc.returncode != 0 or result is None:
        raise BenchError(f"node_bench.py failed (exit code {proc.returncode})")
    return cmd, json.loads(result.read_text())


def turn(a: argparse.Namespace, name: str, rnd: int, cfg: Path, tmp: Path) -> tuple[list[str], dict]:
    """One loop's turn: start it, benchmark it, stop it (also on errors)."""
    proc, url, pid = start_loop(name, cfg, tmp)
    print(f"{name}: {url} pid={pid}", flush=True)
    try:
        cmd, record = run_node_bench(a, f"loop-{name}-r{rnd}", url, pid)
    except BaseException:
        stop_process(proc)
        print(tail(tmp / f"{name}.err"), file=sys.stderr)
        raise
    code = stop_process(proc)
    if code != 0:
        print(f"warning: {name} exited with code {code} on SIGTERM:\n{tail(tmp / f'{name}.err')}", flush=True)
    return cmd, record


def metrics(workload: str, runs: list[dict]) -> dict[str, list[float]]:
    """Per-run values of the compared metrics (runs without a value are left out)."""
    out: dict[str, list[float]] = {"rate": [], "p50": [], "p99": [], "cpu": []}
    for r in runs:
        if "error" in r:
            continue
        out["rate"].append(r[RATE_KEY[workload]])
        if workload.startswith("rpc"):
            out["p50"].append(r["p50_us"])
            out["p99"].append(r["p99_us"])
        cpu = cpu_us_per_msg(workload, r)
        if cpu is not None:
            out["cpu"].append(cpu)
    return out


def cell(vals: list[float], spec: str) -> str:
    """'median (min–max)' of the values, '–' when there are none."""
    if not vals:
        return "–"
    med = format(statistics.median(vals), spec)
    return med if len(vals) == 1 else f"{med} ({format(min(vals), spec)}–{format(max(vals), spec)})"


def ratio(b: list[float], a: list[float]) -> str:
    """Median of b / median of a."""
    if not a or not b or statistics.median(a) == 0:
        return "–"
    return f"{statistics.median(b) / statistics.median(a):.2f}"


def table(runs: dict[str, dict[str, list[dict]]], workloads: list[str]) -> str:
    """The side-by-side Markdown table."""
    lines = ["| workload | metric | asyncio | selectors | selectors/asyncio | runs (a/s) |",
             "|---|---|---:|---:|---:|---:|"]
    for w in workloads:
        ma, ms = metrics(w, runs["asyncio"][w]), metrics(w, runs["selectors"][w])
        n = f"{len(ma['rate'])}/{len(ms['rate'])}"
        rows = [("rate", RATE_UNIT[w], ",.0f")]
        if w.startswith("rpc"):
            rows += [("p50", "RPC p50 µs", ",.0f"), ("p99", "RPC p99 µs", ",.0f")]
        rows.append(("cpu", "router CPU µs/msg", ".1f"))
        for key, label, spec in rows:
            lines.append(f"| {w} | {label} | {cell(ma[key], spec)} | {cell(ms[key], spec)} "
                         f"| {ratio(ms[key], ma[key])} | {n} |")
    return "\n".join(lines)


def run(a: argparse.Namespace) -> int:
    """All rounds, then the table."""
    workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    runs: dict[str, dict[str, list[dict]]] = {name: {w: [] for w in workloads} for name in LOOPS}
    loads: list[str] = []
    commands: list[str] = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="loop_compare-") as tmpdir:
        tmp = Path(tmpdir)
        cfg = tmp / "node.yaml"
        cfg.write_text(node_config_yaml(free_port(), a.link_capacity))
        for rnd in range(1, a.rounds + 1):
            for name in LOOPS:
                # Only the first turn waits: later ones would mostly wait for our own previous turn's load.
                load = wait_for_quiet(a, "the first turn") if not loads else os.getloadavg()[0]
                loads.append(f"{name} r{rnd} {load:.2f}")
                cmd, record = turn(a, name, rnd, cfg, tmp)
                commands.append(shlex.join(cmd))
                for w, rs in record["targets"]["url"]["results"]["runs"].items():
                    runs[name].setdefault(w, []).extend(rs)
    md = table(runs, workloads)
    host = record["host"]
    text = "\n".join([
        f"### asyncio vs selectors loop ({stamp}, {host['cpus']} CPUs, {host['cpu_model'] or 'unknown CPU'}, "
        f"git {host['git_rev']})",
        "",
        md,
        "",
        f"Medians over {a.rounds} round(s) × {a.repeat} runs per loop (min–max in brackets), turns "
        f"alternated A B A B. Ratio > 1 is better for rates, < 1 better for latency and CPU.  ",
        f"1-min load average before each turn: {', '.join(loads)}.  ",
        f"Command: `{command_line()}`  ",
        f"First node_bench command: `{commands[0]}`",
    ])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{stamp}-loop-compare.md"
    out.write_text(text + "\n")
    print("\n" + text + f"\n\nWritten to {out.relative_to(REPO)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: Ctrl-C and SIGTERM stop everything we started, then exit."""
    a = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run(a)
    except BenchError as e:
        print(f"loop_compare: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loop_compare: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
