#!/usr/bin/env python3
"""Throughput of the node at a git revision (A) against the working tree (B), alternated.

Used for the cost of always-on work such as management counters: A is extracted with `git archive`
into a temporary directory (the repository is not touched) and each pair runs
``node_bench.py --workloads throughput --repeat 1 --no-direct`` once from A's tree and once from B's,
so a noisy machine hits both alike. Prints each pair, the medians and the ratio B/A of msg/s and of
node CPU per message, and writes benchmarks/results/<timestamp>-code-ab.json.

``--bench chain`` measures the mesh path instead: ``mesh_bench.py --scenarios chain`` (A - B - C, unsettled
throughput A -> C) once per tree and pair; CPU per message is the sum over the three nodes.

    benchmarks/code_ab.py --base HEAD~3 --pairs 7
    benchmarks/code_ab.py --base HEAD~3 --pairs 5 --bench chain --bench-args "--count 100000"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
sys.path.insert(0, str(BENCH_DIR))

from harness.trees import extract  # noqa: E402  (the other A/B scenarios import it from here too)


def one_run(tree: Path, label: str, bench_args: str, bench: str = "node") -> tuple[float, float]:
    """(msg/s, node CPU µs per message) of one run of the node in `tree` (`bench`: node or chain)."""
    if bench == "chain":
        cmd = [sys.executable, str(tree / "benchmarks" / "mesh_bench.py"), "--scenarios", "chain",
               "--repeat", "1", "--chain-workloads", "throughput", "--label", label, *bench_args.split()]
    else:
        cmd = [sys.executable, str(tree / "benchmarks" / "node_bench.py"), "--workloads", "throughput",
               "--repeat", "1", "--no-direct", "--label", label]
        if bench_args:
            cmd += ["--bench-args", bench_args]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tree, env=env)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("Results: ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"{bench} bench failed ({out.returncode}):\n{out.stdout[-2000:]}\n"
                         f"{out.stderr[-2000:]}")
    record = json.loads((tree / line.split(" ", 1)[1].strip()).read_text())
    if bench == "chain":
        row = record["results"]["chain"]["summary"]["throughput"]
        return row["median"], sum(n["us_per_msg"] for n in row["nodes"].values())
    row = record["summary"][0]
    return row["rate"], row["cpu_us_per_msg"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision A (e.g. a commit before the change)")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--bench", choices=("node", "chain"), default="node",
                    help="node: one node (node_bench.py); chain: the 3-node chain (mesh_bench.py)")
    ap.add_argument("--bench-args", default="",
                    help="node: passed to node_bench.py --bench-args; chain: extra mesh_bench.py options")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="code-ab-") as tmp:
        base = extract(a.base, Path(tmp))
        for i in range(a.pairs):
            ra, ca = one_run(base, "code-ab-base", a.bench_args, a.bench)
            rb, cb = one_run(REPO, "code-ab-work", a.bench_args, a.bench)
            rows.append({"base_rate": ra, "base_cpu_us": ca, "work_rate": rb, "work_cpu_us": cb})
            print(f"pair {i + 1}: base {ra:9.0f} msg/s {ca:6.2f} µs/msg | working tree {rb:9.0f} msg/s "
                  f"{cb:6.2f} µs/msg", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    rate_ratio = statistics.median(r["work_rate"] / r["base_rate"] for r in rows)
    cpu_ratio = statistics.median(r["work_cpu_us"] / r["base_cpu_us"] for r in rows)
    print(f"medians: base {med['base_rate']:.0f} msg/s {med['base_cpu_us']:.2f} µs/msg; working tree "
          f"{med['work_rate']:.0f} msg/s {med['work_cpu_us']:.2f} µs/msg")
    print(f"median of per-pair ratios (working tree / base): msg/s {rate_ratio:.3f}, CPU per message "
          f"{cpu_ratio:.3f}")
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-code-ab.json"
    record = {"base": a.base, "bench": a.bench, "pairs": rows, "medians": med, "rate_ratio": rate_ratio,
              "cpu_ratio": cpu_ratio, "command": " ".join(sys.argv)}
    out.write_text(json.dumps(record, indent=2))
    print(f"Results: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
