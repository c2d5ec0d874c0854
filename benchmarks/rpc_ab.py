#!/usr/bin/env python3
"""router.rpc latency and throughput before (a git revision) and after (the working tree), alternated.

Each round runs ``benchmarks/rpc_bench.py --repeat 1`` once with the tree of ``--base`` (extracted with
``git archive``; the working tree's rpc_bench.py and harness/ are copied into it, so both sides run the
same benchmark) and once with the working tree, each with ``PYTHONPATH`` on its own tree, so both sides
see the same load. Prints each run's line and a table of medians over the rounds, with every round's
p50; writes benchmarks/results/<time>-rpc-ab.json.

    .venv/bin/python benchmarks/rpc_ab.py --base 6c7760a --rounds 4 --scenarios one-node,four-node
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from harness.trees import extract  # noqa: E402


def one_run(tree: Path, a: argparse.Namespace, out: Path) -> list[dict]:
    cmd = [sys.executable, str(tree / "benchmarks" / "rpc_bench.py"), "--scenarios", a.scenarios, "--repeat",
           "1", "--calls", str(a.calls), "--json", str(out)]
    proc = subprocess.run(cmd, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"rpc_bench failed in {tree}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads(out.read_text())["runs"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision for 'before'")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scenarios", default="one-node", help="rpc_bench.py scenarios (default one-node)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per mode and run (default 2000)")
    a = ap.parse_args()
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    loads = []
    with tempfile.TemporaryDirectory(prefix="rpc-ab-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "base").mkdir()
        base = extract(a.base, tmp / "base")
        # the same benchmark on both sides (it uses router.rpc's public API only): this tree's rpc_bench.py
        shutil.copy(BENCH_DIR / "rpc_bench.py", base / "benchmarks" / "rpc_bench.py")
        shutil.copytree(BENCH_DIR / "harness", base / "benchmarks" / "harness", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        for i in range(a.rounds):
            for label, tree in (("before", base), ("after", REPO)):
                loads.append(os.getloadavg()[0])
                for r in one_run(tree, a, tmp / f"{label}-{i}.json"):
                    runs[label].append(r)
                    print(f"round {i + 1} {label:6} {r['scenario']} {r['mode']:10}: "
                          f"{r['calls_per_s']:.0f} calls/s, p50 {r['p50_us']:.0f} µs, "
                          f"p99 {r['p99_us']:.0f} µs, errors {r['errors']}", flush=True)
    loads.append(os.getloadavg()[0])
    print()
    print("| scenario | mode | calls/s before → after | p50 µs before → after | p50 per round, after | "
          "p99 µs before → after | node CPU µs/call | client CPU µs/call | server CPU µs/call | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for scenario in a.scenarios.split(","):
        for mode in ("sequential", "concurrent"):
            sel = {k: [r for r in v if r["scenario"] == scenario and r["mode"] == mode]
                   for k, v in runs.items()}

            def both(key: str, sel: dict[str, list[dict]] = sel) -> str:
                meds = []
                for k in ("before", "after"):
                    vals = [r[key] for r in sel[k] if r[key] is not None]
                    meds.append(f"{statistics.median(vals):,.0f}" if vals else "–")
                return " → ".join(meds)

            cells = [scenario, mode, both("calls_per_s"), both("p50_us"),
                     " / ".join(f"{r['p50_us']:.0f}" for r in sel["after"]),
                     both("p99_us"), both("node_cpu_us_per_call"), both("client_cpu_us_per_call"),
                     both("server_cpu_us_per_call")]
            cells.append(str(sum(r["errors"] for v in sel.values() for r in v)))
            print("| " + " | ".join(cells) + " |")
    print()
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    print(f"load average {min(loads):.1f}–{max(loads):.1f} (1 min, sampled before each run), "
          f"{time.strftime('%Y-%m-%d %H:%M')} UTC at the end")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-rpc-ab.json"
    out.write_text(json.dumps({"base": a.base, "rounds": a.rounds, "loads": loads, "runs": runs}, indent=1))
    print(f"Results: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
