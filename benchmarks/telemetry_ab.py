#!/usr/bin/env python3
"""Telemetry overhead: node_bench.py's throughput workload with telemetry off and on, alternated.

Each pair runs the node without and then with ``telemetry: {dir: ...}`` (same config otherwise),
``node_bench.py --config X --workloads throughput --repeat 1 --no-direct`` each, so a noisy machine
hits both sides alike. Prints each pair, then medians and the ratios (msg/s on/off, node CPU per
message on/off), and writes benchmarks/results/<timestamp>-telemetry-ab.json.

    benchmarks/telemetry_ab.py --pairs 5 [--sample 1.0] [--bench-args '...']

The node's CPU is its own process; the telemetry writer runs in a child process
(router/telemetry/process.py), whose CPU is given beside it.

``--parts`` says where the cost goes instead: it starts the node itself in variants, alternated in
rounds, and samples the CPU of its main thread and of its other threads from /proc:

    off       no telemetry
    thread    no telemetry, one idle Python thread (what being multi-threaded costs: glibc's malloc
              takes locks once a process has a second thread; the node no longer has one)
    nohooks   telemetry configured (the writer process started, idle), the engine's hooks off
    nowrite   the hooks run, batches are dropped instead of going to the writer process
    on        telemetry as configured

    benchmarks/telemetry_ab.py --parts --pairs 5 [--bench-args '--count 600000']
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from node_bench import RESULTS_DIR, free_port, node_config_yaml  # noqa: E402

VARIANTS = ("off", "thread", "nohooks", "nowrite", "on")
# run by `python -c` before `router.cli.main(["run", CFG])`
PATCHES = {
    "thread": "import threading; threading.Thread(target=threading.Event().wait, daemon=True).start()",
    "nohooks": "import router.telemetry.observer as t; t.NodeTelemetry = lambda writer, node_id: None",
    "nowrite": "import router.telemetry.process as w; w.WriterProcess.deliveries = lambda self, batch: None",
}


def config(tmp: Path, on: bool, sample: float) -> Path:
    text = node_config_yaml(free_port(), 250)
    if on:
        text += f"telemetry:\n  dir: {tmp / 'telemetry'}\n  sample: {sample}\n"
    path = tmp / ("on.yaml" if on else "off.yaml")
    path.write_text(text)
    return path


def one_run(tmp: Path, on: bool, a: argparse.Namespace) -> tuple[float, float, float]:
    """(msg/s, node CPU µs per message, writer process CPU µs per message) of one node_bench run."""
    label = f"tel-ab-{'on' if on else 'off'}"
    cmd = [sys.executable, str(BENCH_DIR / "node_bench.py"), "--config", str(config(tmp, on, a.sample)),
           "--workloads", "throughput", "--repeat", "1", "--no-direct", "--label", label]
    if a.bench_args:
        cmd += ["--bench-args", a.bench_args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("Results: ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"node_bench failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    record = json.loads((BENCH_DIR.parent / line.split(" ", 1)[1].strip()).read_text())
    row = record["summary"][0]
    shutil.rmtree(tmp / "telemetry", ignore_errors=True)
    node, child = split_cpu(record)
    return row["rate"], node, child


def split_cpu(record: dict) -> tuple[float, float]:
    """Node process and child process (the telemetry writer) CPU µs per message of a node_bench run."""
    run = record["targets"][record["router"]["kind"]]["results"]["runs"]["throughput"][0]
    procs = run["router"]["procs"]
    node_pid = str(record["router"]["pid"])
    n = run["received"]
    node = procs[node_pid]["cpu_s"]
    child = sum(p["cpu_s"] for pid, p in procs.items() if pid != node_pid)
    return 1e6 * node / n, 1e6 * child / n


def thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of a process's main thread and of its other threads."""
    tick = os.sysconf("SC_CLK_TCK")
    main = other = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / tick
        if int(tid) == pid:
            main = cpu
        else:
            other += cpu
    return main, other


def part_run(tmp: Path, variant: str, a: argparse.Namespace) -> dict:
    """One node_bench throughput run against a node started as `variant`."""
    port = free_port()
    text = node_config_yaml(port, 250)
    if variant not in ("off", "thread"):
        text += f"telemetry:\n  dir: {tmp / 'telemetry'}\n  sample: {a.sample}\n"
    cfg = tmp / "node.yaml"
    cfg.write_text(text)
    code = "\n".join((PATCHES.get(variant, ""), "from router.cli import main",
                      f"raise SystemExit(main(['run', {str(cfg)!r}]))"))
    log = tmp / "node.log"
    with open(log, "wb") as out:
        node = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
                                cwd=BENCH_DIR.parent)
    try:
        deadline = time.monotonic() + 30
        while not re.search(r"ready: node=", log.read_text(errors="replace")):
            if node.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {variant} node did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        before = thread_cpu(node.pid)
        cmd = [sys.executable, str(BENCH_DIR / "node_bench.py"), "--router", f"url:amqp://127.0.0.1:{port}",
               "--router-pid", str(node.pid), "--workloads", "throughput", "--repeat", "1", "--no-direct",
               "--label", f"tel-parts-{variant}"] + (["--bench-args", a.bench_args] if a.bench_args else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        after = thread_cpu(node.pid)
    finally:
        node.terminate()
        node.wait(30)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("Results: ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"node_bench failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    result = BENCH_DIR.parent / line.split(" ", 1)[1].strip()
    record = json.loads(result.read_text())
    row = record["summary"][0]
    record["router"]["pid"] = node.pid
    node_us, child_us = split_cpu(record)
    result.unlink()
    shutil.rmtree(tmp / "telemetry", ignore_errors=True)
    return {"rate": row["rate"], "cpu_us_per_msg": node_us, "child_us_per_msg": child_us,
            "main_s": after[0] - before[0], "other_s": after[1] - before[1]}


def parts(a: argparse.Namespace) -> int:
    """Alternate the VARIANTS in rounds; print medians and their ratios to `off`."""
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="telemetry_parts-") as tmpdir:
        for i in range(a.pairs):
            for v in VARIANTS:
                runs[v].append(part_run(Path(tmpdir), v, a))
            print(f"round {i + 1}: " + " | ".join(f"{v} {runs[v][-1]['cpu_us_per_msg']:.2f} µs/msg"
                                                   for v in VARIANTS), flush=True)
    base = runs["off"]
    summary = {}
    for v in VARIANTS:
        ratio = statistics.median(r["cpu_us_per_msg"] / b["cpu_us_per_msg"] for r, b in zip(runs[v], base,
                                                                                             strict=True))
        main_s = statistics.median(r["main_s"] for r in runs[v])
        other_s = statistics.median(r["other_s"] for r in runs[v])
        child = statistics.median(r["child_us_per_msg"] for r in runs[v])
        summary[v] = {"median_pair_cpu_ratio": ratio, "main_s": main_s, "other_s": other_s,
                      "child_us_per_msg": child}
        print(f"{v:8s} node CPU per message {ratio - 1:+6.1%} vs off (median of rounds); CPU seconds: main "
              f"thread {main_s:.2f}, other threads {other_s:.2f}; writer process {child:.2f} µs/msg "
              "(medians)")
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-telemetry-parts.json"
    out.write_text(json.dumps({"command": sys.argv, "runs": runs, "summary": summary}, indent=1))
    print(f"Results: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--sample", type=float, default=1.0, help="telemetry sample of the 'on' config")
    ap.add_argument("--bench-args", default="", help="passed to node_bench.py --bench-args")
    ap.add_argument("--parts", action="store_true", help="where the cost goes: see the module docstring")
    a = ap.parse_args(argv)
    if a.parts:
        return parts(a)
    pairs = []
    with tempfile.TemporaryDirectory(prefix="telemetry_ab-") as tmpdir:
        tmp = Path(tmpdir)
        for i in range(a.pairs):
            off = one_run(tmp, False, a)
            on = one_run(tmp, True, a)
            pairs.append({"off": off, "on": on})
            print(f"pair {i + 1}: off {off[0]:,.0f} msg/s {off[1]:.2f} µs/msg | on {on[0]:,.0f} msg/s "
                  f"{on[1]:.2f} µs/msg (+ writer process {on[2]:.2f}) | msg/s {on[0] / off[0] - 1:+.1%} "
                  f"node cpu {on[1] / off[1] - 1:+.1%}", flush=True)
    med = {side: tuple(statistics.median(p[side][k] for p in pairs) for k in range(3))
           for side in ("off", "on")}
    rate_ratios = [p["on"][0] / p["off"][0] for p in pairs]
    cpu_ratios = [p["on"][1] / p["off"][1] for p in pairs]
    summary = {
        "median_off": med["off"], "median_on": med["on"],
        "msgs_ratio_of_medians": med["on"][0] / med["off"][0],
        "cpu_ratio_of_medians": med["on"][1] / med["off"][1],
        "median_pair_msgs_ratio": statistics.median(rate_ratios),
        "median_pair_cpu_ratio": statistics.median(cpu_ratios),
    }
    print(f"medians: off {med['off'][0]:,.0f} msg/s {med['off'][1]:.2f} µs/msg; on {med['on'][0]:,.0f} msg/s "
          f"{med['on'][1]:.2f} µs/msg in the node + {med['on'][2]:.2f} µs/msg in the writer process")
    print(f"msg/s on/off: {summary['msgs_ratio_of_medians'] - 1:+.1%} (medians), "
          f"{summary['median_pair_msgs_ratio'] - 1:+.1%} (median of pairs); node CPU per message: "
          f"{summary['cpu_ratio_of_medians'] - 1:+.1%} (medians), "
          f"{summary['median_pair_cpu_ratio'] - 1:+.1%} (median of pairs)")
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-telemetry-ab.json"
    out.write_text(json.dumps({"command": sys.argv, "pairs": pairs, "summary": summary}, indent=1))
    print(f"Results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
