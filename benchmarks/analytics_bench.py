"""Records per second of `meshrouter analyze` on generated telemetry (issue: 10 million on local[2]).

    .venv/bin/python benchmarks/analytics_bench.py                      # 10,000,000 records, local[2]
    .venv/bin/python benchmarks/analytics_bench.py --records 2000000 --keep /tmp/bench-records

Generation: numpy draws the fields for a chunk, the node's own formatter (router.telemetry.jsonl)
turns them into JSON Lines, one worker process per core, one file per chunk (like rotated node files).
Then the job runs once; the printed rate is records / job wall time (Spark start-up included, and
also shown separately).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from router.telemetry.jsonl import Formatter  # noqa: E402

NODES = ("A", "B", "C", "D")
OUTCOMES = ("accepted", "rejected", "released", "modified", "presettled", "dropped")
OUTCOME_P = (0.90, 0.01, 0.03, 0.01, 0.049, 0.001)
OUT_LINKS = ("client", "inter-router", "broker")
CHUNK = 500_000
START = 1_763_770_000.0
RATE = 20_000.0  # records per second of simulated mesh time: 10 M records span 500 s


def _chunk(args: tuple[str, int, int, int]) -> int:
    """Write records [first, first + n) as one file; returns the bytes written."""
    directory, first, n, addresses = args
    rng = np.random.default_rng(first)
    node_i = rng.integers(0, len(NODES), n)
    local = rng.random(n) < 0.7
    ingress_i = np.where(local, node_i, (node_i + rng.integers(1, len(NODES), n)) % len(NODES))
    hops = np.where(local, 0, 1)
    out_i = rng.choice(len(OUT_LINKS), n, p=(0.6, 0.35, 0.05))
    outcome_i = rng.choice(len(OUTCOMES), n, p=OUTCOME_P)
    address_i = np.minimum(rng.zipf(1.3, n) - 1, addresses - 1)
    size = rng.integers(100, 2000, n)
    arrival = START + (first + np.arange(n)) / RATE
    settled = arrival + np.round(rng.lognormal(0.0, 1.0, n), 3) / 1000.0  # ms resolution, median 1 ms
    names = [f"svc/orders.{i}" for i in range(addresses)]
    rows = list(zip([names[i] for i in address_i.tolist()], [NODES[i] for i in ingress_i.tolist()],
                    hops.tolist(), np.where(local, "client", "inter-router").tolist(),
                    [OUT_LINKS[i] for i in out_i.tolist()], [OUTCOMES[i] for i in outcome_i.tolist()],
                    size.tolist(), arrival.tolist(), settled.tolist(), strict=True))
    node_rows: dict[int, list[tuple]] = {}
    for i, row in zip(node_i.tolist(), rows, strict=True):
        node_rows.setdefault(i, []).append(row)
    written = 0
    for i, mine in node_rows.items():
        text = Formatter(NODES[i]).deliveries(mine)
        # a few credit-starvation intervals per chunk and node
        t = float(mine[0][7])
        events = [("credit_starved_start", f"{NODES[i]}/l{k}", names[k % addresses], "p", t + k)
                  for k in range(5)]
        events += [("credit_starved_end", f"{NODES[i]}/l{k}", names[k % addresses], "p", t + k + 0.25)
                   for k in range(5)]
        text += Formatter(NODES[i]).events(events)
        path = Path(directory) / f"{NODES[i]}-bench-{first // CHUNK:06d}.jsonl"
        path.write_text(text)
        written += len(text)
    return written


def generate(directory: Path, records: int, addresses: int, workers: int) -> tuple[float, int]:
    """Write ``records`` delivery records; returns (seconds, bytes)."""
    t0 = time.perf_counter()
    jobs = [(str(directory), first, min(CHUNK, records - first), addresses)
            for first in range(0, records, CHUNK)]
    with multiprocessing.Pool(workers) as pool:
        written = sum(pool.imap_unordered(_chunk, jobs))
    return time.perf_counter() - t0, written


def main() -> int:
    """Generate, analyse, print the rate."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000, help="delivery records (default 10,000,000)")
    ap.add_argument("--addresses", type=int, default=200, help="distinct addresses (Zipf-distributed)")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="generator processes")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (reused if it has files)")
    args = ap.parse_args()

    from router.analytics.job import run_analysis
    from router.analytics.session import get_session

    base = Path(tempfile.mkdtemp(prefix="analytics-bench-"))
    records_dir = Path(args.keep) if args.keep else base / "records"
    try:
        if records_dir.is_dir() and any(records_dir.glob("*.jsonl")):
            print(f"reusing records in {records_dir}", flush=True)
        else:
            records_dir.mkdir(parents=True, exist_ok=True)
            secs, size = generate(records_dir, args.records, args.addresses, args.workers)
            print(f"generated {args.records:,} records ({size / 1e9:.2f} GB) in {secs:.1f} s "
                  f"({args.records / secs:,.0f} records/s, {args.workers} processes)", flush=True)
        t0 = time.perf_counter()
        spark, _ = get_session(args.master)
        startup = time.perf_counter() - t0
        result = run_analysis(records_dir, base / "report", args.master)
        total = time.perf_counter() - t0
        spark.stop()
        n = result.summary["deliveries"] + result.summary["events"]
        print(f"analyzed {n:,} records on {args.master} in {total:.1f} s (Spark start-up {startup:.1f} s): "
              f"{n / total:,.0f} records/s ({n / (total - startup):,.0f} records/s after start-up)")
        print(f"skipped lines: {result.summary['corrupt_lines']:,}; "
              f"report: {result.report.stat().st_size:,} bytes")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
