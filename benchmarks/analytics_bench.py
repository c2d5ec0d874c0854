"""Records per second of `meshrouter analyze` on generated telemetry (issue: 10 million on local[2]).

    .venv/bin/python benchmarks/analytics_bench.py                      # 10,000,000 records, local[2]
    .venv/bin/python benchmarks/analytics_bench.py --records 2000000 --keep /tmp/bench-records

Generation goes through the node's own telemetry code: one process per node runs a
`router.telemetry.writer.TelemetryWriter` (Parquet, the node's default format), interns its routes with
`route()` and hands it `DeliveryColumns` batches (router/telemetry/columns.py) the way the node's
observer fills them (one size per record; route, outcome and arrival as runs; one settlement time per
batch of events), plus credit-starvation events. numpy draws the fields. The writer's `bad` and
`dropped` counts must be 0, and the job must analyse exactly the records generated (exit 1 otherwise).

Then the job runs once; the printed rate is records / job wall time (Spark start-up included, and also
shown separately).
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

from router.telemetry.columns import DeliveryColumns  # noqa: E402
from router.telemetry.config import TelemetryConfig  # noqa: E402
from router.telemetry.schema import DROPPED, PRESETTLED  # noqa: E402
from router.telemetry.writer import TelemetryWriter  # noqa: E402

NODES = ("A", "B", "C", "D")
OUTCOME_CODES = (0x24, 0x25, 0x26, 0x27, PRESETTLED, DROPPED)   # accepted rejected released modified ...
OUTCOME_P = (0.90, 0.01, 0.03, 0.01, 0.049, 0.001)
OUT_LINKS = ("client", "inter-router", "broker")
BATCH = 65_536       # records per batch handed to the writer (the node's HANDOFF_RECORDS)
RUN = 16             # records per (route, outcome, arrival) run
PUMP = 64            # records per settlement time (one batch of events)
START = 1_763_770_000.0
RATE = 20_000.0      # records per second of simulated mesh time: 10 M records span 500 s
STARVED_EVERY = 100_000  # one credit-starvation interval per this many records


def _routes(writer: TelemetryWriter, node: str, addresses: int) -> list[int]:
    """Route ids of every (address, ingress, link kinds) this node sees: local (hops 0) or from a peer."""
    ids = []
    nxt = NODES[(NODES.index(node) + 1) % len(NODES)]       # the next hop of what leaves inter-router
    for a in range(addresses):
        address = f"svc/orders.{a}"
        for out_link in OUT_LINKS:
            hop = nxt if out_link == "inter-router" else None
            ids.append(writer.route((address, node, 0, "client", out_link,
                                     node if out_link != "inter-router" else nxt, hop)))
            peer = NODES[(NODES.index(node) + 1 + a % (len(NODES) - 1)) % len(NODES)]
            ids.append(writer.route((address, peer, 1, "inter-router", out_link,
                                     node if out_link != "inter-router" else None, hop)))
    return ids


def _node(args: tuple[str, str, int, int, int]) -> tuple[int, int, int]:
    """One node's records [first, first + n) (of the whole mesh's time line) through a TelemetryWriter;
    returns (deliveries, events, bytes written)."""
    directory, node, first, n, addresses = args
    rng = np.random.default_rng(first + NODES.index(node))
    writer = TelemetryWriter(TelemetryConfig(directory, rotate_mb=256), node, max_pending=4 * BATCH,
                             roll_seconds=3600.0)
    ids = np.array(_routes(writer, node, addresses))
    per_address = 2 * len(OUT_LINKS)
    events = 0
    done = 0
    while done < n:
        m = min(BATCH, n - done)
        runs = (m + RUN - 1) // RUN
        address_i = np.minimum(rng.zipf(1.3, runs) - 1, addresses - 1)
        local = rng.random(runs) < 0.7
        out_i = rng.choice(len(OUT_LINKS), runs, p=(0.6, 0.35, 0.05))
        rid = ids[address_i * per_address + out_i * 2 + np.where(local, 0, 1)].tolist()
        code = np.asarray(OUTCOME_CODES)[rng.choice(len(OUTCOME_CODES), runs, p=OUTCOME_P)].tolist()
        t = START + (first + done + np.arange(0, m, RUN)) / RATE
        arrival = (t - np.round(rng.lognormal(0.0, 1.0, runs), 3) / 1000.0).tolist()  # median 1 ms
        b = DeliveryColumns(rid[0], code[0], arrival[0])
        b.sizes = rng.integers(100, 2000, m).tolist()
        for k in range(1, runs):
            b.starts.append(k * RUN)
            b.routes.append(rid[k])
            b.codes.append(code[k])
            b.arrivals.append(arrival[k])
        b.ends = list(range(PUMP, m, PUMP)) + [m]
        b.times = (START + (first + done + np.asarray(b.ends) - 1) / RATE).tolist()
        # settled >= arrival: a run's records settle at the end of their batch of events
        b.times = [max(x, arrival[min((e - 1) // RUN, runs - 1)])
                   for x, e in zip(b.times, b.ends, strict=True)]
        while writer.pending > 2 * BATCH:
            time.sleep(0.01)
        writer.deliveries(b)
        for k in range((first + done) // STARVED_EVERY, (first + done + m) // STARVED_EVERY):
            t0 = START + k * STARVED_EVERY / RATE
            link = f"l{k:x}"
            writer.event(("credit_starved_start", link, "svc/orders.0", "p", t0))
            writer.event(("credit_starved_end", link, "svc/orders.0", "p", t0 + 0.25))
            events += 2
        done += m
    writer.close(timeout=600)
    assert writer.bad == 0 and writer.dropped == 0 and not writer.stopped, (writer.bad, writer.dropped)
    size = sum(p.stat().st_size for p in Path(directory).glob(f"{node}-*.parquet"))
    return n, events, size


def generate(directory: Path, records: int, addresses: int, workers: int) -> tuple[float, int, int, int]:
    """Write ``records`` delivery records (a quarter per node); returns (seconds, deliveries, events,
    bytes)."""
    t0 = time.perf_counter()
    share = [records // len(NODES) + (i < records % len(NODES)) for i in range(len(NODES))]
    jobs = [(str(directory), node, sum(share[:i]), share[i], addresses) for i, node in enumerate(NODES)]
    with multiprocessing.Pool(workers) as pool:
        made = pool.map(_node, jobs)
    return (time.perf_counter() - t0, sum(d for d, _, _ in made), sum(e for _, e, _ in made),
            sum(b for _, _, b in made))


def main() -> int:
    """Generate, analyse, print the rate."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000, help="delivery records (default 10,000,000)")
    ap.add_argument("--addresses", type=int, default=200, help="distinct addresses (Zipf-distributed)")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="generator processes")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (reused if it has files)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    args = ap.parse_args()
    conf = dict(item.split("=", 1) for item in args.conf)

    from router.analytics.job import run_analysis
    from router.analytics.session import get_session

    base = Path(tempfile.mkdtemp(prefix="analytics-bench-"))
    records_dir = Path(args.keep) if args.keep else base / "records"
    try:
        generated = None
        if records_dir.is_dir() and any(records_dir.glob("*.parquet")):
            print(f"reusing records in {records_dir} (records analysed are not checked)", flush=True)
        else:
            records_dir.mkdir(parents=True, exist_ok=True)
            secs, deliveries, events, size = generate(records_dir, args.records, args.addresses, args.workers)
            generated = deliveries + events
            print(f"generated {deliveries:,} deliveries and {events:,} events ({size / 1e6:,.0f} MB Parquet) "
                  f"in {secs:.1f} s through TelemetryWriter ({args.workers} processes)", flush=True)
        t0 = time.perf_counter()
        spark, _ = get_session(args.master, conf)
        startup = time.perf_counter() - t0
        result = run_analysis(records_dir, base / "report", args.master, conf)
        total = time.perf_counter() - t0
        spark.stop()
        s = result.summary
        n = s["deliveries"] + s["events"]
        print(f"analyzed {n:,} records on {args.master} in {total:.1f} s (Spark start-up {startup:.1f} s): "
              f"{n / total:,.0f} records/s = {n / total * 60 / 1e6:.1f} M/min "
              f"({n / (total - startup):,.0f} records/s after start-up)")
        print(f"skipped: {s['skipped']}; report: {result.report.stat().st_size:,} bytes")
        if generated is not None and (n != generated or any(s["skipped"].values())):
            print(f"FAIL: analysed {n:,} records, generated {generated:,}", file=sys.stderr)
            return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
