"""The ``meshrouter analyze`` job: read records, write Parquet tables, render report.html.

Each step prints one progress line on stderr (``analyze [ 5/22] table latency_node (3.1 s)``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from router.analytics import tables as T
from router.analytics.inputs import Inputs, find_inputs
from router.analytics.load import read_records
from router.analytics.report import write_report
from router.analytics.result import Result
from router.analytics.session import get_session

REPORT_ROWS = 200_000  # most rows of one table the report reads back (throughput over long runs)

# (table name, builder) in the order they are computed; builders get (deliveries, events, classified).
Builder = Callable[[DataFrame, DataFrame, DataFrame], DataFrame]
TABLES: tuple[tuple[str, Builder], ...] = (
    ("input_problems", lambda d, e, c: T.input_problems(c)),
    ("throughput_node", lambda d, e, c: T.throughput(d, "node")),
    ("throughput_address", lambda d, e, c: T.throughput(d, "address")),
    ("outcomes_node", lambda d, e, c: T.outcomes(d, "node")),
    ("outcomes_address", lambda d, e, c: T.outcomes(d, "address")),
    ("latency_node", lambda d, e, c: T.latency(d, "node")),
    ("latency_address", lambda d, e, c: T.latency(d, "address")),
    ("hops_node", lambda d, e, c: T.hops_by(d, "node")),
    ("hops_address", lambda d, e, c: T.hops_by(d, "address")),
    ("hops_mesh", lambda d, e, c: T.hops_by(d, None)),
    ("top_producers", lambda d, e, c: T.top_producers(d)),
    ("top_consumers", lambda d, e, c: T.top_consumers(d)),
    ("starvation_link", lambda d, e, c: T.starvation_links(e)),
    ("pair_traffic", lambda d, e, c: T.pair_traffic(d)),
    ("pair_latency", lambda d, e, c: T.pair_latency(d)),
    ("pair_latency_egress", lambda d, e, c: T.pair_latency_egress(d)),
)
# Built from another table's output rather than from the records.
DERIVED = ("starvation_address",)
TABLE_NAMES = ("summary", *(name for name, _ in TABLES), *DERIVED)


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


def _write(df: DataFrame, path: Path) -> None:
    df.coalesce(1).write.mode("overwrite").parquet(str(path))


def _read_back(spark: SparkSession, path: Path) -> list[dict]:
    return [row.asDict() for row in spark.read.parquet(str(path)).limit(REPORT_ROWS).collect()]


COUNTS = ("lines", "deliveries", "events", "corrupt_lines", "invalid_records", "invalid_deliveries",
          "invalid_events", "unknown_kind", "nodes", "addresses", "bytes")
# The summary's ``skipped`` breakdown: what could not be read, by kind (label -> summary count).
SKIPPED = (("corrupt or truncated files", "corrupt_files"), ("malformed lines", "corrupt_lines"),
           ("incomplete delivery records", "invalid_deliveries"),
           ("incomplete event records", "invalid_events"), ("records of unknown kind", "unknown_kind"))


def skipped(summary: Mapping[str, object]) -> dict[str, int]:
    """What the run could not read, by kind (every kind, zeros included)."""
    return {label: int(summary[key]) for label, key in SKIPPED}


def _summary(classified: DataFrame, inputs: Inputs, records_dir: Path) -> DataFrame:
    c, cls = F.col, F.col("_class")
    valid = cls.isin("delivery", "event")
    first = F.when(cls == "delivery", c("arrival")).when(cls == "event", c("time"))
    last = F.when(cls == "delivery", c("settled")).when(cls == "event", c("time"))
    counts = classified.agg(
        F.count("*").alias("lines"),
        F.sum((cls == "delivery").cast("long")).alias("deliveries"),
        F.sum((cls == "event").cast("long")).alias("events"),
        F.sum((cls == "corrupt").cast("long")).alias("corrupt_lines"),
        F.sum((cls == "invalid").cast("long")).alias("invalid_records"),
        F.sum(((cls == "invalid") & (c("kind") == "delivery")).cast("long")).alias("invalid_deliveries"),
        F.sum(((cls == "invalid") & (c("kind") == "event")).cast("long")).alias("invalid_events"),
        F.sum(((cls == "invalid") & ~F.coalesce(c("kind").isin("delivery", "event"), F.lit(False)))
              .cast("long")).alias("unknown_kind"),
        F.countDistinct(F.when(valid, c("node"))).alias("nodes"),
        F.countDistinct(F.when(cls == "delivery", c("address"))).alias("addresses"),
        F.sum(F.when(cls == "delivery", c("size"))).alias("bytes"),
        F.min(first).alias("first_time"),
        F.max(last).alias("last_time"))
    return counts.select(
        F.lit(str(records_dir)).alias("records_dir"),
        F.lit(len(inputs.json_files)).alias("json_files"),
        F.lit(len(inputs.parquet_files)).alias("parquet_files"),
        F.lit(len(inputs.bad_files)).alias("corrupt_files"),
        *[F.coalesce(c(n), F.lit(0)).cast("long").alias(n) for n in COUNTS],
        "first_time", "last_time")


def run_analysis(records_dir: str | Path, out_dir: str | Path, master: str = "local[*]",
                 conf: Mapping[str, str] | None = None, progress: TextIO | None = sys.stderr,
                 inputs: Inputs | None = None) -> Result:
    """Run the whole job; returns the summary and where everything went. Spark errors propagate."""
    records_dir, out_dir = Path(records_dir), Path(out_dir)
    steps = Progress(3 + len(TABLES) + len(DERIVED) + 1, progress)
    steps.step(f"starting Spark ({master})")
    spark, created = get_session(master, conf)
    classified = None
    try:
        steps.step(f"finding record files under {records_dir}")
        inputs = inputs if inputs is not None else find_inputs(records_dir)
        steps.step(f"reading {inputs.count} files and checking every record")
        classified = T.classify(read_records(spark, inputs)).persist(StorageLevel.MEMORY_AND_DISK)
        result = Result(out_dir, out_dir / "report.html", {})
        tables_dir = out_dir / "tables"
        path = tables_dir / "summary"
        _write(_summary(classified, inputs, records_dir), path)
        result.tables["summary"] = path
        result.summary = _read_back(spark, path)[0]
        result.summary["bad_files"] = [{"file": f, "problem": why} for f, why in inputs.bad_files]
        result.summary["skipped"] = skipped(result.summary)
        d, e = T.deliveries_of(classified), T.events_of(classified)
        for name, build in TABLES:
            steps.step(f"table {name}")
            path = tables_dir / name
            _write(build(d, e, classified), path)
            result.tables[name] = path
        steps.step("table starvation_address")
        path = tables_dir / "starvation_address"
        _write(T.starvation_addresses(spark.read.parquet(str(result.tables["starvation_link"]))), path)
        result.tables["starvation_address"] = path
        steps.step("report.html")
        result.data = {name: _read_back(spark, p) for name, p in result.tables.items()}
        write_report(result)
        (out_dir / "summary.json").write_text(json.dumps(result.summary, indent=2, default=str) + "\n")
    finally:
        if classified is not None:
            classified.unpersist()
        if created:
            spark.stop()
    steps.done(f"wrote {result.report}")
    return result
