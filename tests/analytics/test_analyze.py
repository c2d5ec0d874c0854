"""`meshrouter analyze` on a record set with known answers: every table checked against exact
numbers (hand-computed spot checks plus a plain-Python reference), broken input skipped and
counted, the CLI end to end (report.html), and bad arguments exit 2 without starting Spark.

Not here: the issue's "real records from a short run of the four-node mesh" (the mesh does not exist yet).
"""

from __future__ import annotations

import base64
import json
import math
import re
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from router.cli import main
from tests.support.analytics_dataset import T0

SETTLING = ("accepted", "rejected", "released", "modified")
EXITS = ("client", "broker")


def pct(values: list[int], p: float) -> float:
    """Exact percentile, linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    pos = p * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def lat_us(d: dict) -> int:
    return round((d["settled"] - d["arrival"]) * 1_000_000)


def reference_latency(rows: list[dict], key) -> dict:
    groups: dict[object, list[int]] = defaultdict(list)
    for d in rows:
        if d["outcome"] in SETTLING:
            groups[key(d)].append(lat_us(d))
    return {k: (len(v), pct(v, 0.5) / 1000, pct(v, 0.9) / 1000, pct(v, 0.99) / 1000, max(v) / 1000)
            for k, v in groups.items()}


def as_latency(rows: list[dict], *keys: str) -> dict:
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]:
            (r["deliveries"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"]) for r in rows}


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert got[k][0] == want[k][0], k
        assert got[k][1:] == pytest.approx(want[k][1:], abs=1e-9), k


# ---- the job's run -----------------------------------------------------------------------------------
def test_cli_exits_0_and_reports_counts(run):
    assert run.code == 0, run.stderr
    assert "report: " in run.stdout and "263 deliveries, 16 events" in run.stdout
    assert ("skipped: 2 corrupt or truncated files, 5 malformed lines, 1 incomplete delivery records, "
            "0 incomplete event records, 2 records of unknown kind") in run.stdout
    steps = re.findall(r"^analyze \[\s*(\d+)/(\d+)\] (.+) \(", run.stderr, re.M)
    assert [int(n) for n, _, _ in steps] == list(range(1, len(steps) + 1)) and len(steps) == int(steps[0][1])
    assert any("latency_address" in s for _, _, s in steps)
    assert "Traceback" not in run.stderr and "INFO" not in run.stderr


def test_summary_counts_records_and_skipped_input(spark, run):
    (s,) = run.table(spark, "summary")
    ds = run.ds
    assert s["deliveries"] == len(ds.deliveries) == 263
    assert s["events"] == len(ds.events) == 16
    assert (s["corrupt_lines"], s["invalid_records"], s["corrupt_files"]) == (5, 3, 2)
    assert (s["invalid_deliveries"], s["invalid_events"], s["unknown_kind"]) == (1, 0, 2)
    assert (s["json_files"], s["parquet_files"]) == (8, 1)
    assert (s["nodes"], s["addresses"]) == (3, 4)
    assert s["bytes"] == sum(d["size"] for d in ds.deliveries)
    assert (s["first_time"], s["last_time"]) == (T0, T0 + 7)


def test_input_problems_name_each_file(spark, run):
    rows = {(r["file"].rsplit("/", 1)[-1], r["problem"]): r["count"]
            for r in run.table(spark, "input_problems")}
    assert rows == {("A-broken-000001.jsonl", "malformed lines"): 4,
                    ("A-broken-000001.jsonl", "incomplete delivery records"): 1,
                    ("A-broken-000001.jsonl", "records of unknown kind"): 2,
                    ("B-20261122T000000Z-000002.jsonl", "malformed lines"): 1}
    html = (run.out / "report.html").read_text()
    assert "C-truncated.parquet" in html and "truncated Parquet file" in html
    assert "fake.parquet" in html and "notes.txt" not in html


def test_skipped_input_is_counted_by_kind_in_html_and_json(run, tmp_path):
    want = {"corrupt or truncated files": 2, "malformed lines": 5, "incomplete delivery records": 1,
            "incomplete event records": 0, "records of unknown kind": 2}
    summary = json.loads((run.out / "summary.json").read_text())
    assert summary["skipped"] == want
    html = (run.out / "report.html").read_text()
    warn = re.search(r'<p class="warn" id="skipped">(.*?)</p>', html).group(1)
    assert warn.startswith("Skipped: 2 corrupt or truncated files, 5 malformed lines, "
                           "1 incomplete delivery records, 2 records of unknown kind")
    for label, n in want.items():
        assert re.search(rf"<td[^>]*>skipped: {label}</td><td[^>]*>{n}</td>", html), label


def test_outcome_counts(spark, run):
    got = {(r["node"], r["outcome"]): r["messages"] for r in run.table(spark, "outcomes_node")}
    assert got == {("A", "accepted"): 138, ("A", "rejected"): 5, ("A", "released"): 5, ("A", "modified"): 2,
                   ("B", "accepted"): 40, ("B", "presettled"): 20, ("B", "dropped"): 3,
                   ("C", "accepted"): 48, ("C", "released"): 2}
    by_address = {(r["address"], r["outcome"]): r["messages"] for r in run.table(spark, "outcomes_address")}
    assert by_address == dict(Counter((d["address"], d["outcome"]) for d in run.ds.deliveries))
    assert by_address[("svc/a", "accepted")] == 90 and by_address[("svc/d", "released")] == 4


def test_latency_percentiles_are_exact(spark, run):
    by_address = as_latency(run.table(spark, "latency_address"), "address")
    assert by_address["svc/a"] == pytest.approx((100, 50.5, 90.1, 99.01, 100.0), abs=1e-9)
    assert "svc/c" not in by_address  # only pre-settled and dropped deliveries: no settlement latency
    assert_close(by_address, reference_latency(run.ds.deliveries, lambda d: d["address"]))
    by_node = as_latency(run.table(spark, "latency_node"), "node")
    assert_close(by_node, reference_latency(run.ds.deliveries, lambda d: d["node"]))


def test_throughput_buckets(spark, run):
    got = {(r["node"], r["second"]): r["messages"] for r in run.table(spark, "throughput_node")}
    assert got[("A", T0)] == 91 and got[("A", T0 + 1)] == 9  # svc/a: settled at T0+0.001 .. T0+1.09
    assert got == dict(Counter((d["node"], math.floor(d["settled"])) for d in run.ds.deliveries))
    per_address = {(r["address"], r["second"]): (r["messages"], r["bytes"])
                   for r in run.table(spark, "throughput_address")}
    want: dict = defaultdict(lambda: [0, 0])
    for d in run.ds.deliveries:
        want[(d["address"], math.floor(d["settled"]))][0] += 1
        want[(d["address"], math.floor(d["settled"]))][1] += d["size"]
    assert per_address == {k: tuple(v) for k, v in want.items()}


def test_records_without_next_hop_count_on_no_link(spark, run):
    """Old files (no next_hop column, or lines without the field) read as null: no link utilisation,
    and the throughput above still counts them."""
    assert run.table(spark, "link_utilisation") == [] and run.table(spark, "link_summary") == []
    summary = json.loads((run.out / "summary.json").read_text())
    assert summary["questions"]["link_utilisation"] == {"bucket_s": 1, "links": []}


def test_hop_histograms(spark, run):
    mesh = {r["hops"]: r["messages"] for r in run.table(spark, "hops_mesh")}
    assert mesh == {0: 120, 1: 10, 2: 40}
    per_node = {(r["node"], r["hops"]): r["messages"] for r in run.table(spark, "hops_node")}
    assert per_node == {("A", 0): 140, ("A", 1): 10, ("B", 0): 23, ("B", 1): 40, ("C", 0): 10, ("C", 2): 40}
    per_address = {(r["address"], r["hops"]): r["messages"] for r in run.table(spark, "hops_address")}
    assert per_address == {("svc/a", 0): 100, ("svc/b", 2): 40, ("svc/c", 0): 20, ("svc/d", 1): 10}


def test_pair_traffic_and_latency(spark, run):
    traffic = {(r["ingress"], r["egress"]): (r["messages"], r["bytes"])
               for r in run.table(spark, "pair_traffic")}
    assert traffic == {("A", "A"): (100, 10_000), ("A", "C"): (40, 8_000), ("B", "B"): (20, 1_000),
                       ("C", "A"): (10, 3_000)}
    # end to end, from the ingress records (hops 0) that name their egress; B's records (old format,
    # no egress) and multicast would be left out
    latency = as_latency(run.table(spark, "pair_latency"), "ingress", "egress")
    assert latency == {
        ("A", "A"): pytest.approx((100, 50.5, 90.1, 99.01, 100.0), abs=1e-9),
        ("A", "C"): pytest.approx((40, 12.25, 20.05, 21.805, 22.0), abs=1e-9),  # 2 ms + C's (j+1)*0.5 ms
        ("C", "A"): pytest.approx((10, 3.0, 3.0, 3.0, 3.0), abs=1e-9),          # Parquet rows
    }
    ingress = [d for d in run.ds.deliveries
               if d["in_link"] in EXITS and d["hops"] == 0 and d["egress"] is not None]
    assert_close(latency, reference_latency(ingress, lambda d: (d["node"], d["egress"])))
    # the last leg only, from the egress records
    at_egress = as_latency(run.table(spark, "pair_latency_egress"), "ingress", "egress")
    assert at_egress[("A", "C")] == pytest.approx((40, 10.25, 18.05, 19.805, 20.0), abs=1e-9)
    assert at_egress[("C", "A")] == pytest.approx((10, 1.0, 1.0, 1.0, 1.0), abs=1e-9)
    egress = [d for d in run.ds.deliveries if d["out_link"] in EXITS]
    assert_close(at_egress, reference_latency(egress, lambda d: (d["ingress"], d["node"])))


def test_top_producers_and_consumers(spark, run):
    producers = [(r["node"], r["in_link"], r["address"], r["messages"])
                 for r in run.table(spark, "top_producers")]
    assert producers == [("A", "client", "svc/a", 100), ("A", "client", "svc/b", 40),
                         ("B", "client", "svc/c", 23), ("C", "client", "svc/d", 10)]
    consumers = [(r["node"], r["address"], r["messages"], r["accepted"])
                 for r in run.table(spark, "top_consumers")]
    assert consumers == [("A", "svc/a", 100, 90), ("C", "svc/b", 40, 40), ("B", "svc/c", 20, 0),
                         ("A", "svc/d", 10, 8)]


def test_credit_starvation_time(spark, run):
    links = {(r["node"], r["link"]): (r["address"], r["intervals"], r["open_intervals"], r["starved_s"])
             for r in run.table(spark, "starvation_link")}
    assert links == {("A", "A/l1"): ("svc/a", 3, 0, 0.875), ("A", "A/l2"): ("svc/a", 1, 0, 0.0625),
                     ("B", "B/l1"): ("svc/b", 1, 2, 0.5)}
    addresses = {r["address"]: (r["links"], r["intervals"], r["open_intervals"], r["starved_s"])
                 for r in run.table(spark, "starvation_address")}
    assert addresses == {"svc/a": (2, 4, 0, 0.9375), "svc/b": (1, 1, 2, 0.5)}


def test_report_is_self_contained_with_sections_and_images(run):
    html = (run.out / "report.html").read_text()
    for section in ("Summary", "Throughput", "Outcomes", "Settlement latency", "Hops",
                    "Top producers and consumers", "Credit starvation", "Mesh: ingress &rarr; egress",
                    "Input problems", "How to read this"):
        assert f">{section}</h2>" in html, section
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 5  # throughput, outcomes, latency, hops, ingress->egress
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert not re.search(r'(src|href)="(?!data:|#)', html)  # nothing loaded from elsewhere
    assert "50.500" in html and "svc/a" in html  # the p50 of svc/a, in the latency table
    assert (run.out / "summary.json").exists()


# ---- arguments ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["{missing}", "--out", "{tmp}/r"], "no such directory"),
    (["{empty}", "--out", "{tmp}/r"], "no telemetry files"),
    (["{records}", "--out", "{file}"], "not a directory"),
    (["{records}", "--out", "{tmp}/r", "--master", "bogus"], "--master"),
    (["{records}", "--out", "{tmp}/r", "--conf", "novalue"], "KEY=VALUE"),
    (["{records}"], "required: --out"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "A-1.jsonl").write_text("{}\n")
    (tmp_path / "file").write_text("x")
    names = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "records": tmp_path / "records",
             "file": tmp_path / "file", "tmp": tmp_path}
    assert main(["analyze", *(a.format(**names) for a in args)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_dir_from_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "router", "analyze", "/nonexistent/records", "--out", "/tmp/x"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "meshrouter analyze: error: /nonexistent/records: no such directory"
