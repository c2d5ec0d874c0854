#!/usr/bin/env python3
"""Telemetry overhead: node_bench.py's throughput workload with telemetry off and on, alternated.

Each pair runs the node without and then with ``telemetry: {dir: ...}`` (same config otherwise),
``node_bench.py --config X --workloads throughput --repeat 1 --no-direct`` each, so a noisy machine
hits both sides alike. Prints each pair, then medians and the ratios (msg/s on/off, node CPU per
message on/off), and writes benchmarks/results/<timestamp>-telemetry-ab.json.

    benchmarks/telemetry_ab.py --pairs 5 [--sample 1.0] [--bench-args '...']
"""

from __future__ import annotations

import argparse
import json
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


def config(tmp: Path, on: bool, sample: float) -> Path:
    text = node_config_yaml(free_port(), 250)
    if on:
        text += f"telemetry:\n  dir: {tmp / 'telemetry'}\n  sample: {sample}\n"
    path = tmp / ("on.yaml" if on else "off.yaml")
    path.write_text(text)
    return path


def one_run(tmp: Path, on: bool, a: argparse.Namespace) -> tuple[float, float]:
    """(msg/s, node CPU µs per message) of one node_bench run."""
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
    return row["rate"], row["cpu_us_per_msg"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--sample", type=float, default=1.0, help="telemetry sample of the 'on' config")
    ap.add_argument("--bench-args", default="", help="passed to node_bench.py --bench-args")
    a = ap.parse_args(argv)
    pairs = []
    with tempfile.TemporaryDirectory(prefix="telemetry_ab-") as tmpdir:
        tmp = Path(tmpdir)
        for i in range(a.pairs):
            off = one_run(tmp, False, a)
            on = one_run(tmp, True, a)
            pairs.append({"off": off, "on": on})
            print(f"pair {i + 1}: off {off[0]:,.0f} msg/s {off[1]:.2f} µs/msg | on {on[0]:,.0f} msg/s "
                  f"{on[1]:.2f} µs/msg | msg/s {on[0] / off[0] - 1:+.1%} cpu {on[1] / off[1] - 1:+.1%}",
                  flush=True)
    med = {side: (statistics.median(p[side][0] for p in pairs),
                  statistics.median(p[side][1] for p in pairs)) for side in ("off", "on")}
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
          f"{med['on'][1]:.2f} µs/msg")
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
