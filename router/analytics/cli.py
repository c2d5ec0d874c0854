"""``meshrouter analyze RECORDS_DIR --out REPORT_DIR [--master M] [--conf K=V]``.

Argument problems (missing directory, no record files, a bad master or --conf) exit 2 with one line
and no Spark start; a job failure exits 1 with one line. Nothing here imports PySpark at import time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from router.analytics.inputs import find_inputs
from router.analytics.session import java_available, valid_master

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
log = logging.getLogger("router.analytics")


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``analyze`` subcommand to the ``meshrouter`` parser."""
    p = commands.add_parser(
        "analyze", help="turn telemetry records into Parquet tables and an HTML report (PySpark)",
        description="Read the telemetry records under RECORDS_DIR (*.jsonl, *.json, *.parquet, recursively) "
                    "and write REPORT_DIR/report.html and REPORT_DIR/tables/<name>/ (Parquet).")
    p.add_argument("records_dir", metavar="RECORDS_DIR", help="directory with the nodes' telemetry files")
    p.add_argument("--out", required=True, metavar="REPORT_DIR", help="where report.html and tables/ go")
    p.add_argument("--master", default="local[*]",
                   help="Spark master: local[*] (default), local[N], spark://host:port, yarn, k8s://...")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting, e.g. spark.executor.memory=4g (repeatable)")
    p.add_argument("--follow", action="store_true",
                   help="live view: Spark Structured Streaming over RECORDS_DIR, a console table and "
                        "REPORT_DIR/live.html refreshed every --refresh seconds, until interrupted")
    p.add_argument("--refresh", type=float, default=5.0, metavar="SECONDS",
                   help="--follow: seconds between refreshes (default 5)")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="--follow: stop after this many seconds (default: run until interrupted)")
    p.add_argument("--json", action="store_true",
                   help="print the summary (REPORT_DIR/summary.json) on stdout instead of the text lines")
    p.set_defaults(func=cmd_analyze)


def _fail(message: str, code: int) -> int:
    print(f"meshrouter analyze: error: {message}", file=sys.stderr, flush=True)
    return code


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def cmd_analyze(args: argparse.Namespace) -> int:
    """Check the arguments, then run the job; returns the exit code."""
    records, out = Path(args.records_dir), Path(args.out)
    if not records.is_dir():
        return _fail(f"{records}: no such directory", EXIT_USAGE)
    if out.exists() and not out.is_dir():
        return _fail(f"--out {out}: exists and is not a directory", EXIT_USAGE)
    if not valid_master(args.master):
        return _fail(f"--master {args.master!r}: expected local[*], local[N], spark://HOST:PORT, yarn, "
                     "k8s://... or mesos://...", EXIT_USAGE)
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            return _fail(f"--conf {item!r}: expected KEY=VALUE", EXIT_USAGE)
        conf[key.strip()] = value
    if args.follow and args.refresh <= 0:
        return _fail("--refresh: must be > 0", EXIT_USAGE)
    inputs = find_inputs(records)
    if inputs.count == 0 and not args.follow:
        return _fail(f"{records}: no telemetry files (*.jsonl, *.json, *.parquet) in it", EXIT_USAGE)
    try:
        import matplotlib  # noqa: F401 - checked here for a clear message
        import pyspark  # noqa: F401
    except ImportError as err:
        return _fail(f"{err.name} is not installed: pip install 'meshrouter[analytics]'", EXIT_FAILURE)
    if not java_available():
        return _fail("java not found (PySpark needs Java 17 or newer): install openjdk-17-jre-headless "
                     "or set JAVA_HOME", EXIT_FAILURE)
    if args.follow:
        from router.analytics.follow import follow

        try:
            out.mkdir(parents=True, exist_ok=True)
            shown = follow(records, out, args.master, conf, args.refresh, args.duration)
        except Exception as err:
            log.debug("analyze --follow failed", exc_info=True)
            return _fail(_first_line(err), EXIT_FAILURE)
        print(f"follow: {shown} refreshes; last view: {out / 'live.html'}", flush=True)
        return EXIT_OK
    from router.analytics.job import run_analysis

    try:
        result = run_analysis(records, out, args.master, conf, inputs=inputs)
    except Exception as err:  # Spark and Py4J errors are many lines long: one line, details at debug
        log.debug("analyze failed", exc_info=True)
        return _fail(_first_line(err), EXIT_FAILURE)
    s = result.summary
    if args.json:
        print(json.dumps(s, indent=2, default=str), flush=True)
        return EXIT_OK
    skipped = ", ".join(f"{n:,} {label}" for label, n in s["skipped"].items())
    print(f"report: {result.report}\ntables: {out / 'tables'}\nsummary: {out / 'summary.json'}\n"
          f"records: {s['deliveries']:,} deliveries, {s['events']:,} events\nskipped: {skipped}", flush=True)
    return EXIT_OK
