"""``meshrouter analyze --follow RECORDS_DIR --out REPORT_DIR``: a live view with Spark Structured Streaming.

A node's Parquet file is readable only once the writer completes it (every 60 s, at rotation and when the
node stops), and Spark's file source reads each file once, when it first sees it. So a stager thread
links every *complete* file (router.analytics.inputs.parquet_problem: it has its footer) from RECORDS_DIR
into ``REPORT_DIR/.follow-input/``, and the stream reads that directory. Every ``refresh`` seconds the
stream aggregates per address (complete output mode): messages, bytes, outcome counts, settlement
latency p50/p90/p99 (``percentile_approx``); the driver prints a console table (with the rate since the
previous refresh) and rewrites ``REPORT_DIR/live.html``, which reloads itself.
"""

from __future__ import annotations

import html
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from router.analytics.inputs import PARQUET_SUFFIX, parquet_problem
from router.analytics.questions import is_internal
from router.analytics.schema import RECORD_SCHEMA, SETTLING_OUTCOMES
from router.analytics.session import get_session

OUTCOMES = ("accepted", "rejected", "released", "modified", "presettled", "dropped")
COLUMNS = ("address", "messages", "msg/s", "bytes", *OUTCOMES, "p50_ms", "p90_ms", "p99_ms")
CONSOLE_ROWS = 20  # busiest addresses on the console; live.html has them all
ADDRESS_WIDTH = 32  # the console's address column: longer addresses are cut (with "…"), shorter padded
NUMBER_WIDTH = 13


class Stager(threading.Thread):
    """Links complete Parquet files from `source` into `target` (each once), every `period` seconds."""

    def __init__(self, source: Path, target: Path, period: float = 0.5) -> None:
        super().__init__(name="follow-stager", daemon=True)
        self.source, self.target, self.period = source, target, period
        self.seen: set[Path] = set()
        self.halt = threading.Event()

    def scan(self) -> int:
        """Stage the files completed since the last scan; returns how many."""
        n = 0
        for path in sorted(self.source.rglob(f"*{PARQUET_SUFFIX}")):
            if path in self.seen or path.name.startswith((".", "_")) or parquet_problem(path):
                continue
            dest = self.target / f"{len(self.seen):06d}-{path.name}"
            try:
                os.link(path, dest)
            except OSError:                     # another file system: copy (the file never changes)
                shutil.copyfile(path, dest)
            self.seen.add(path)
            n += 1
        return n

    def run(self) -> None:
        while not self.halt.wait(self.period):
            self.scan()


def live_table(records: DataFrame) -> DataFrame:
    """Per address, over every delivery record seen so far."""
    c = F.col
    d = records.filter((c("kind") == "delivery") & c("node").isNotNull() & c("outcome").isNotNull()
                       & c("arrival").isNotNull() & c("settled").isNotNull())
    lat = F.when(c("outcome").isin(*SETTLING_OUTCOMES), (c("settled") - c("arrival")) * 1000)
    return (d.groupBy("address")
            .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"),
                 *(F.sum((c("outcome") == o).cast("long")).alias(o) for o in OUTCOMES),
                 F.percentile_approx(lat, [0.5, 0.9, 0.99]).alias("p")))


class View:
    """What each refresh shows: the console table and live.html."""

    def __init__(self, out_dir: Path, refresh: float, stream: TextIO) -> None:
        self.page = out_dir / "live.html"
        self.refresh, self.stream = refresh, stream
        self.previous: dict[object, int] = {}
        self.t_prev = time.monotonic()
        self.refreshes = 0

    def rows(self, batch: DataFrame) -> list[dict]:
        now = time.monotonic()
        elapsed, self.t_prev = max(now - self.t_prev, 1e-6), now
        out = []
        for r in sorted(batch.collect(), key=lambda r: -r["messages"]):
            p = r["p"] or [None, None, None]
            row = {k: r[k] for k in ("address", "messages", "bytes", *OUTCOMES)}
            row["msg/s"] = (r["messages"] - self.previous.get(r["address"], 0)) / elapsed
            row.update(p50_ms=p[0], p90_ms=p[1], p99_ms=p[2])
            self.previous[r["address"]] = r["messages"]
            out.append(row)
        return out

    def show(self, batch: DataFrame, batch_id: int) -> None:
        """foreachBatch: the whole aggregate (complete mode) of this refresh."""
        every = self.rows(batch)
        rows = [r for r in every if not is_internal(r["address"])]
        internal = [r for r in every if is_internal(r["address"])]
        self.refreshes += 1
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        lines = [f"-- {stamp} UTC refresh {self.refreshes} (batch {batch_id}): {len(rows)} addresses",
                 console_line({c: c for c in COLUMNS})]
        lines += [console_line(r) for r in rows[:CONSOLE_ROWS]]
        if internal:
            lines.append(f"   (and {len(internal)} internal addresses, management and its replies: "
                         f"{sum(r['messages'] for r in internal):,} records)")
        print("\n".join(lines), file=self.stream, flush=True)
        cells = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r[c]))}</td>" for c in COLUMNS) + "</tr>"
                        for r in rows)
        tmp = self.page.with_suffix(".tmp")
        tmp.write_text(
            f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='refresh' content='{max(1, round(self.refresh))}'>"
            f"<title>meshrouter live telemetry</title></head><body><h1>meshrouter live telemetry</h1>"
            f"<p>{stamp} UTC, refresh {self.refreshes}</p><table border='1'><tr>"
            + "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS) + f"</tr>{cells}</table></body></html>",
            encoding="utf-8")
        tmp.replace(self.page)


def cut(text: str, width: int) -> str:
    """``text`` in exactly ``width`` characters: padded, or cut with "…" as its last character."""
    return text.ljust(width) if len(text) <= width else text[:width - 1] + "…"


def console_line(row: Mapping[str, object]) -> str:
    """One console row of COLUMNS: the address left-aligned in ADDRESS_WIDTH, then each number after a
    space, right-aligned in NUMBER_WIDTH - 1."""
    first = row[COLUMNS[0]]
    return (cut(first if isinstance(first, str) else _fmt(first), ADDRESS_WIDTH)
            + "".join(f" {_fmt(row[c]):>{NUMBER_WIDTH - 1}}" for c in COLUMNS[1:]))


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if v >= 100 else f"{v:.3f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def follow(records_dir: Path, out_dir: Path, master: str = "local[*]", conf: Mapping[str, str] | None = None,
           refresh: float = 5.0, duration: float | None = None, stream: TextIO = sys.stdout) -> int:
    """Run the live view until `duration` seconds have passed (None: until interrupted); returns the
    number of refreshes shown."""
    staging, checkpoint = out_dir / ".follow-input", out_dir / ".follow-checkpoint"
    for d in (staging, checkpoint):
        if d.exists():
            shutil.rmtree(d)
    staging.mkdir(parents=True)
    stager = Stager(records_dir, staging)
    stager.scan()
    stager.start()
    spark, created = get_session(master, conf)
    view = View(out_dir, refresh, stream)
    query = None
    # Ctrl-C / SIGTERM end the view cleanly (PySpark's own SIGINT handler would cancel the stream's jobs
    # and fail the call that waits for it)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        records = spark.readStream.schema(RECORD_SCHEMA).parquet(str(staging))
        query = (live_table(records).writeStream.outputMode("complete")
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime=f"{refresh} seconds")
                 .foreachBatch(view.show).start())
        deadline = None if duration is None else time.monotonic() + duration
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            if query.awaitTermination(0.5):       # the query ended by itself (an error: raised here)
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stager.halt.set()
        if query is not None:
            query.stop()
        if created:
            spark.stop()
    return view.refreshes
