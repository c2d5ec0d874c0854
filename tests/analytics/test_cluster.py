"""`meshrouter analyze --master spark://...` against a real Spark standalone cluster (master and worker
on 127.0.0.1, started from pyspark's own distribution) gives the same report as the local run, on the
telemetry of a real node that carried known traffic."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.spark_cluster import StandaloneCluster

pytestmark = pytest.mark.timeout(900)
COMPARED = ("outcomes_address", "outcomes_node", "latency_address", "throughput_address", "top_producers",
            "top_consumers", "starvation_link", "pair_traffic", "hops_node")


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory) -> StandaloneCluster:
    """One master + one worker (2 cores, 2g) for this module; always torn down (finalizer)."""
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    request.addfinalizer(c.stop)
    return c.start()


def rows(spark, out, name: str) -> list[dict]:
    return sorted((r.asDict() for r in spark.read.parquet(str(out / "tables" / name)).collect()),
                  key=lambda r: tuple(str(v) for v in r.values()))


def test_analyze_on_a_standalone_cluster_equals_the_local_run(spark, node_run, cluster, tmp_path):
    out = tmp_path / "cluster-report"
    proc = subprocess.run(
        [sys.executable, "-m", "router", "analyze", str(node_run.records), "--out", str(out),
         "--master", cluster.url, "--json", "--conf", "spark.executor.memory=1g"],
        capture_output=True, text=True, timeout=600, env=cluster.env())
    assert proc.returncode == 0, proc.stderr[-3000:] + cluster.log_tail()
    on_cluster = json.loads(proc.stdout)
    local = json.loads((node_run.out / "summary.json").read_text())
    for key in ("deliveries", "events", "nodes", "addresses", "bytes", "lines", "first_time", "last_time",
                "skipped"):
        assert on_cluster[key] == local[key], key
    assert on_cluster["deliveries"] >= sum(node_run.expected.values())
    # the job really ran on the cluster's executor, not in the driver
    assert any((cluster.work / "worker").glob("app-*/0/stderr")), cluster.log_tail()
    for name in COMPARED:
        assert rows(spark, out, name) == rows(spark, node_run.out, name), name
