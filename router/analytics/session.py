"""The SparkSession for ``meshrouter analyze``: local by default, any master by option, quiet logs."""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
MASTER_RE = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|(spark|k8s|mesos)://\S+|yarn)$")


def valid_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``, ``spark://…``, ``k8s://…``, ``mesos://…``,
    ``yarn``."""
    return bool(MASTER_RE.match(master))


def is_local(master: str) -> bool:
    """True for the in-process ``local…`` masters."""
    return master.startswith("local")


def local_cores(master: str) -> int:
    """Threads a local master uses (``local[*]``: this machine's CPUs)."""
    m = re.match(r"^local\[(\*|\d+)", master)
    if not m:
        return 1
    if m.group(1) == "*":
        return os.cpu_count() or 1
    return int(m.group(1))


def java_available() -> bool:
    """PySpark starts a JVM: JAVA_HOME or ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    return bool(home and (Path(home) / "bin" / "java").exists()) or shutil.which("java") is not None


def spark_conf(master: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings for the session: UTC, no UI, no console progress bar, our log4j config, and for
    local masters loopback-only networking, few shuffle partitions and a larger driver heap."""
    conf = {
        "spark.app.name": "meshrouter-analyze",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.ansi.enabled": "false",  # casts of odd input give null, as in Spark 3, never an error
        "spark.sql.files.ignoreCorruptFiles": "true",
        "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{LOG4J_CONFIG}",
    }
    if is_local(master):
        conf.update({
            "spark.sql.shuffle.partitions": str(max(2, 2 * local_cores(master))),
            "spark.driver.memory": os.environ.get("MESHROUTER_SPARK_DRIVER_MEMORY", "4g"),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        })
    conf.update(extra or {})
    return conf


def get_session(master: str = "local[*]", extra: Mapping[str, str] | None = None):
    """A SparkSession for ``master`` (the active one if there is one); returns (session, created)."""
    from pyspark.sql import SparkSession

    # PySpark logs every failed query as a multi-line JSON blob; the CLI reports errors in one line.
    logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master)
    for key, value in spark_conf(master, extra).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark, True
