"""One local SparkSession for the whole analytics test session, and one run of the job over the
known record set (through the CLI, in-process) that most tests read from."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install 'meshrouter[analytics]')")
pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'meshrouter[analytics]')")

from router.analytics.session import get_session, java_available  # noqa: E402
from tests.support import analytics_dataset as dataset
from tests.support import known_traffic
from tests.support.nodes import NodeSet
from tests.support.waiting import close_all

if not java_available():
    pytest.skip("java not found: PySpark needs Java 17 (openjdk-17-jre-headless)", allow_module_level=True)


@pytest.fixture(scope="session")
def spark():
    session, created = get_session("local[2]", {"spark.sql.shuffle.partitions": "2",
                                                "spark.driver.memory": "1g"})
    yield session
    if created:
        session.stop()


@dataclass
class Run:
    ds: dataset.Dataset
    records: Path
    out: Path
    code: int
    stdout: str
    stderr: str

    def table(self, spark, name: str) -> list[dict]:
        return [r.asDict() for r in spark.read.parquet(str(self.out / "tables" / name)).collect()]


@pytest.fixture(scope="session")
def run(spark, tmp_path_factory) -> Run:
    from router.cli import main

    base = tmp_path_factory.mktemp("analytics")
    records, out = base / "records", base / "report"
    ds = dataset.write(records, spark)
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main(["analyze", str(records), "--out", str(out), "--master", "local[2]"])
    return Run(ds, records, out, code, stdout.getvalue(), stderr.getvalue())


CAPACITY = 50  # the node's link capacity: a producer starves after this many unsettled deliveries


@dataclass
class NodeRun:
    """Telemetry of one real node that carried known_traffic, and the local analysis of it."""

    records: Path
    expected: dict[tuple[str, str], int]
    out: Path
    code: int
    stdout: str


@pytest.fixture(scope="session")
def node_run(spark, tmp_path_factory) -> NodeRun:
    """One node with telemetry carries the known traffic and stops (its writer completes the files);
    then `meshrouter analyze` (in-process, on the shared local session) reads them."""
    from router.cli import main

    base = tmp_path_factory.mktemp("node-run")
    tdir = base / "telemetry"
    nodes = NodeSet(base)
    try:
        node = nodes.start(link_capacity=CAPACITY, extra={"telemetry": {"dir": str(tdir)}})
        expected = known_traffic.run(node, CAPACITY)
    finally:
        close_all()
        failure = nodes.stop_all()
    assert failure is None, failure
    out = base / "report"
    stdout = io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(io.StringIO()):
        code = main(["analyze", str(tdir), "--out", str(out), "--master", "local[2]"])
    return NodeRun(tdir, expected, out, code, stdout.getvalue())
