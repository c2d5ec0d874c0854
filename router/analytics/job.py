"""The ``meshrouter analyze`` job: read records, write Parquet tables, render report.html.

Each step prints one progress line on stderr (``analyze [ 5/22] table latency_node (3.1 s)``).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame

from router.analytics import derived as D
from router.analytics import tables as T
from router.analytics.inputs import Inputs, find_inputs
from router.analytics.load import read_records
from router.analytics.questions import answers
from router.analytics.report import write_report
from router.analytics.result import Result
from router.analytics.session import get_session

REPORT_ROWS = 200_000  # most rows of one table the report reads back (throughput over long runs)

# Tables Spark computes from the records (the cube, the events): (name, builder(cube, events)).
Builder = Callable[[DataFrame, DataFrame], DataFrame]
SPARK_TABLES: tuple[tuple[str, Builder], ...] = (
    ("latency_node", lambda d, e: T.latency(d, "node")),
    ("latency_address", lambda d, e: T.latency(d, "address")),
    ("pair_latency", lambda d, e: T.pair_latency(d)),
    ("pair_latency_egress", lambda d, e: T.pair_latency_egress(d)),
    ("starvation_link", lambda d, e: T.starvation_links(e)),
)
# Tables the driver regroups (router.analytics.derived) from Spark's small aggregates:
# (name, source, builder(source table)); sources: "routes", "throughput", "starvation_link".
Derive = Callable[[pa.Table], pa.Table]
DERIVED: tuple[tuple[str, str, Derive], ...] = (
    ("throughput_node", "throughput", lambda t: D.throughput(t, "node")),
    ("throughput_address", "throughput", lambda t: D.throughput(t, "address")),
    ("outcomes_node", "routes", lambda t: D.outcomes(t, "node")),
    ("outcomes_address", "routes", lambda t: D.outcomes(t, "address")),
    ("hops_node", "routes", lambda t: D.hops_by(t, "node")),
    ("hops_address", "routes", lambda t: D.hops_by(t, "address")),
    ("hops_mesh", "routes", lambda t: D.hops_by(t, None)),
    ("top_producers", "routes", D.top_producers),
    ("top_consumers", "routes", D.top_consumers),
    ("pair_traffic", "routes", D.pair_traffic),
    ("starvation_address", "starvation_link", D.starvation_addresses),
    ("link_utilisation", "throughput", D.link_utilisation),
    ("link_summary", "throughput", D.link_summary),
)
TABLE_NAMES = ("summary", "input_problems", *(n for n, _ in SPARK_TABLES), *(n for n, _, _ in DERIVED),
               "windows")
INPUT_PROBLEMS_SCHEMA = pa.schema([("file", pa.string()), ("problem", pa.string()), ("count", pa.int64())])


class Progress:
    """Numbered step lines on a stream, with the time since the start."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total, self.stream, self.n, self.t0 = total, stream, 0, time.monotonic()

    def step(self, what: str) -> None:
        """Announce the next step."""
        self.n += 1
        if self.stream is not None:
            print(f"analyze [{self.n:2d}/{self.total}] {what} ({time.monotonic() - self.t0:.1f} s)",
                  file=self.stream, flush=True)

    def done(self, what: str) -> None:
        """The closing line."""
        if self.stream is not None:
            print(f"analyze: {what} in {time.monotonic() - self.t0:.1f} s", file=self.stream, flush=True)


def _save(df: DataFrame | pa.Table, path: Path) -> tuple[pa.Table, list[dict]]:
    """Collect a (small) table to the driver as Arrow, write it as ``path/part-00000.parquet``; returns
    it and its first REPORT_ROWS rows: one Spark job per table, none to read it back."""
    table = df if isinstance(df, pa.Table) else df.toArrow()
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    pq.write_table(table, path / "part-00000.parquet")
    return table, table.slice(0, REPORT_ROWS).to_pylist()


COUNTS = ("lines", "deliveries", "events", "corrupt_lines", "invalid_records", "invalid_deliveries",
          "invalid_events", "unknown_kind", "nodes", "addresses", "bytes")
# The summary's ``skipped`` breakdown: what could not be read, by kind (label -> summary count).
SKIPPED = (("corrupt or truncated files", "corrupt_files"), ("malformed lines", "corrupt_lines"),
           ("incomplete delivery records", "invalid_deliveries"),
           ("incomplete event records", "invalid_events"), ("records of unknown kind", "unknown_kind"))


def skipped(summary: Mapping[str, object]) -> dict[str, int]:
    """What the run could not read, by kind (every kind, zeros included)."""
    return {label: int(summary[key]) for label, key in SKIPPED}


SUMMARY_SCHEMA = pa.schema([("records_dir", pa.string()), ("json_files", pa.int64()),
                            ("parquet_files", pa.int64()), ("corrupt_files", pa.int64()),
                            *((n, pa.int64()) for n in COUNTS),
                            ("first_time", pa.float64()), ("last_time", pa.float64())])


def _summary(routes: pa.Table, inputs: Inputs, records_dir: Path) -> pa.Table:
    """The one-row summary table from the routes of the whole cube (router.analytics.tables.routes)."""
    rows = routes.select(["cls", "kind", "node", "messages", "bytes", "first_arrival", "last_settled",
                          "first_time", "last_time"]).to_pylist()
    deliveries = routes.filter(pc.field("cls") == "delivery")
    addresses = pc.count_distinct(deliveries["address"], mode="only_valid").as_py()

    def n(cls: str | None = None, kind: str | None = None, other: bool = False) -> int:
        return sum(r["messages"] for r in rows if (cls is None or r["cls"] == cls)
                   and (kind is None or r["kind"] == kind)
                   and (not other or r["kind"] not in ("delivery", "event")))

    valid = [r for r in rows if r["cls"] in ("delivery", "event")]
    firsts = [r["first_arrival" if r["cls"] == "delivery" else "first_time"] for r in valid]
    lasts = [r["last_settled" if r["cls"] == "delivery" else "last_time"] for r in valid]
    firsts, lasts = [t for t in firsts if t is not None], [t for t in lasts if t is not None]
    row = {"records_dir": str(records_dir), "json_files": len(inputs.json_files),
           "parquet_files": len(inputs.parquet_files), "corrupt_files": len(inputs.bad_files),
           "lines": n(), "deliveries": n("delivery"), "events": n("event"), "corrupt_lines": n("corrupt"),
           "invalid_records": n("invalid"), "invalid_deliveries": n("invalid", "delivery"),
           "invalid_events": n("invalid", "event"), "unknown_kind": n("invalid", other=True),
           "nodes": len({r["node"] for r in valid}), "addresses": addresses,
           "bytes": sum(r["bytes"] or 0 for r in rows if r["cls"] == "delivery"),
           "first_time": min(firsts) if firsts else None, "last_time": max(lasts) if lasts else None}
    return pa.Table.from_pylist([row], SUMMARY_SCHEMA)


def run_analysis(records_dir: str | Path, out_dir: str | Path, master: str = "local[*]",
                 conf: Mapping[str, str] | None = None, progress: TextIO | None = sys.stderr,
                 inputs: Inputs | None = None) -> Result:
    """Run the whole job; returns the summary and where everything went. Spark errors propagate.

    The records are read once into the cube (router.analytics.tables.cube: every record counted by
    class, route, second and latency), which the summary and every delivery table are built from;
    the events are read again (Parquet: only the event row groups, by the statistics of ``kind``) and
    so are the malformed records, only if there are any. JSON Lines input is cached (parsing it is
    the expensive part)."""
    records_dir, out_dir = Path(records_dir), Path(out_dir)
    steps = Progress(9 + len(SPARK_TABLES) + len(DERIVED), progress)
    steps.step(f"starting Spark ({master})")
    spark, created = get_session(master, conf)
    cached: list[DataFrame] = []
    try:
        steps.step(f"finding record files under {records_dir}")
        inputs = inputs if inputs is not None else find_inputs(records_dir)
        steps.step(f"reading {inputs.count} files and checking every record")
        classified = T.classify(read_records(spark, inputs))
        if inputs.json_files:
            classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(classified)
        result = Result(out_dir, out_dir / "report.html", {})
        tables_dir = out_dir / "tables"

        def save(name: str, df: DataFrame | pa.Table) -> pa.Table:
            result.tables[name] = tables_dir / name
            table, result.data[name] = _save(df, tables_dir / name)
            return table

        steps.step("cube: every record counted by class, route, second and latency")
        cube = T.cube(classified).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(cube)
        every_route = T.routes(cube).toArrow()
        steps.step("table summary")
        result.summary = save("summary", _summary(every_route, inputs, records_dir)).to_pylist()[0]
        result.summary["bad_files"] = [{"file": f, "problem": why} for f, why in inputs.bad_files]
        result.summary["skipped"] = skipped(result.summary)
        sources = {"routes": every_route.filter(pc.field("cls") == "delivery")}
        steps.step("table input_problems")
        save("input_problems", T.input_problems(classified)
             if result.summary["corrupt_lines"] or result.summary["invalid_records"]
             else INPUT_PROBLEMS_SCHEMA.empty_table())
        d = T.deliveries_of(cube)
        steps.step("throughput per node, address and second")
        sources["throughput"] = T.throughput_cells(d).toArrow()
        e = T.events_of(classified)
        for name, build in SPARK_TABLES:
            steps.step(f"table {name}")
            sources[name] = save(name, build(d, e))
        for name, source, derive in DERIVED:
            steps.step(f"table {name}")
            save(name, derive(sources[source]))
        steps.step("table windows (first and second half of the time span)")
        first, last = result.summary["first_time"], result.summary["last_time"]
        mid = math.floor((first + last) / 2) if first is not None and last is not None else 0
        save("windows", T.windows(d, mid))
        result.summary["questions"] = answers(result.data)
        result.summary["questions"]["windows_split_at"] = mid
        steps.step("report.html")
        write_report(result)
        (out_dir / "summary.json").write_text(json.dumps(result.summary, indent=2, default=str) + "\n")
    finally:
        for df in cached:
            df.unpersist()
        if created:
            spark.stop()
    steps.done(f"wrote {result.report}")
    return result
