"""A node with telemetry writes one record per settled delivery and per link/connection event, and
`meshrouter analyze` turns the real records into a report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import Client, make_message


def records(directory: Path) -> list[dict]:
    """Every record of the node's Parquet files (JSON Lines too, if any), as dicts."""
    import pyarrow.parquet as pq

    out = []
    for f in sorted(directory.glob("*.parquet")):
        out += pq.read_table(f).to_pylist()
    for f in sorted(directory.glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def run_traffic(node) -> None:
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/tel", credit=20, auto_accept=False)
    s = prod.sender("balanced/tel")
    s.wait_credit()
    trackers = [s.send(make_message(f"m{i}")) for i in range(6)]
    r.wait_messages(6)
    for i, m in enumerate(r.received):
        [m.accept, m.accept, m.accept, m.reject, m.release, m.modify][i]()
    for t in trackers:
        t.wait()
    s.send(make_message("fire and forget"), settled=True)
    r.wait_messages(7)
    anon = prod.sender(None)
    assert anon.send(make_message("lost", address="balanced/nobody")).wait().outcome == "RELEASED"
    prod.close()
    cons.close()


def test_records_for_deliveries_and_events(node_factory, tmp_path):
    tdir = tmp_path / "telemetry"
    node = node_factory(extra={"telemetry": {"dir": str(tdir)}})
    run_traffic(node)
    node.proc.terminate()                                # a clean stop flushes the writer
    node.proc.wait(10)
    node.stopped = True
    recs = records(tdir)
    deliveries = [r for r in recs if r["kind"] == "delivery"]
    outcomes = sorted(r["outcome"] for r in deliveries)
    assert outcomes == sorted(["accepted"] * 3 + ["rejected", "released", "modified", "presettled",
                               "released"]), outcomes
    routed = [r for r in deliveries if r["address"] == "balanced/tel"]
    assert all(r["node"] == "A" and r["ingress"] == "A" and r["hops"] == 0 for r in routed)
    assert all(r["settled"] >= r["arrival"] > 0 and r["size"] > 0 for r in routed)
    assert all(r["egress"] == "A" for r in routed)                      # consumed here
    lost = [r for r in deliveries if r["out_link"] is None]            # the unroutable one
    assert [(r["outcome"], r["out_link"], r["egress"]) for r in lost] == [("released", None, None)]
    assert sorted(p.suffix for p in tdir.iterdir()) == [".parquet"] * len(list(tdir.iterdir()))
    events = {r["event"] for r in recs if r["kind"] == "event"}
    assert {"conn_up", "conn_down", "link_up", "link_down"} <= events


@pytest.mark.timeout(300)
def test_analyze_real_node_records(node_factory, tmp_path):
    pytest.importorskip("pyspark", reason="pyspark is in the test extra; not installed here")
    tdir = tmp_path / "telemetry"
    node = node_factory(extra={"telemetry": {"dir": str(tdir)}})
    run_traffic(node)
    node.proc.terminate()
    node.proc.wait(10)
    node.stopped = True
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "router", "analyze", str(tdir), "--out", str(out),
                           "--master", "local[1]"], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    html = (out / "report.html").read_text()
    assert "balanced/tel" in html and "<img" in html
    summary = json.loads((out / "summary.json").read_text())
    recs = records(tdir)
    assert summary["deliveries"] == sum(r["kind"] == "delivery" for r in recs) == 8
    assert summary["events"] == sum(r["kind"] == "event" for r in recs) > 0
    assert summary["nodes"] == 1 and summary["corrupt_lines"] == 0 and summary["invalid_records"] == 0
