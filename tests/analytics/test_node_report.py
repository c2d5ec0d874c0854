"""The report of a real node that carried known traffic (tests/support/known_traffic.py), field by
field: outcomes, latency counts, throughput, producers and consumers, hops, mesh pairs and credit
starvation per address, against both the traffic sent and the node's own records."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from tests.support.telemetry import records

TEL = "tel/"


def table(spark, run, name: str) -> list[dict]:
    return [r.asDict() for r in spark.read.parquet(str(run.out / "tables" / name)).collect()]


def ours(rows: list[dict]) -> list[dict]:
    """Rows of the test's own addresses (management requests make deliveries too)."""
    return [r for r in rows if (r.get("address") or "").startswith(TEL)]


def test_undeliverable_records_carry_their_address(node_run):
    lost = [r for r in records(node_run.records) if r["kind"] == "delivery" and r["out_link"] is None]
    assert sorted((r["address"], r["outcome"]) for r in lost) == [("tel/none", "dropped")] * 2 + \
        [("tel/none", "released")] * 7
    assert all(r["egress"] is None and r["in_link"] == "client" and r["size"] > 0 for r in lost)


def test_credit_starvation_events_pair_up(spark, node_run):
    events = sorted((r for r in records(node_run.records) if r["kind"] == "event"), key=lambda r: r["time"])
    per_link: dict[str, list[str]] = defaultdict(list)
    for r in events:
        if r["event"].startswith("credit_starved"):
            per_link[r["link"]].append(r["event"][len("credit_starved_"):])
    assert per_link, "no credit starvation recorded"
    for link, marks in per_link.items():
        assert marks == ["start", "end"] * (len(marks) // 2), (link, marks)   # alternating, closed
    starved = {r["address"] for r in events if r["event"] == "credit_starved_start"}
    assert starved == {"tel/s"}
    links = ours(table(spark, node_run, "starvation_link"))
    assert [(r["address"], r["intervals"], r["open_intervals"]) for r in links] == [("tel/s", 2, 0)]
    assert links[0]["starved_s"] > 0
    (addr,) = ours(table(spark, node_run, "starvation_address"))
    assert (addr["address"], addr["links"], addr["intervals"], addr["open_intervals"]) == ("tel/s", 1, 2, 0)


def test_report_matches_the_known_traffic_field_by_field(spark, node_run):
    assert node_run.code == 0
    want = node_run.expected
    recs = records(node_run.records)
    deliveries = [r for r in recs if r["kind"] == "delivery"]
    mine = ours(deliveries)
    per_address = Counter(r["address"] for r in mine)
    totals = Counter()
    for (address, _), n in want.items():
        totals[address] += n
    assert per_address == totals

    # summary (also the JSON output): every record of the node, nothing skipped
    summary = json.loads((node_run.out / "summary.json").read_text())
    assert summary["deliveries"] == len(deliveries) and summary["events"] == len(recs) - len(deliveries)
    assert summary["nodes"] == 1 and set(summary["skipped"].values()) == {0}
    assert summary["bytes"] == sum(r["size"] for r in deliveries)
    assert f"records: {len(deliveries):,} deliveries" in node_run.stdout

    outcomes = {(r["address"], r["outcome"]): r["messages"] for r in ours(table(spark, node_run,
                                                                                "outcomes_address"))}
    assert outcomes == want
    by_node = {r["outcome"]: r["messages"] for r in table(spark, node_run, "outcomes_node")}
    assert by_node == dict(Counter(r["outcome"] for r in deliveries))

    settling = Counter()
    for (address, outcome), n in want.items():
        if outcome in ("accepted", "rejected", "released", "modified"):
            settling[address] += n
    latency = {r["address"]: r for r in ours(table(spark, node_run, "latency_address"))}
    assert {a: r["deliveries"] for a, r in latency.items()} == settling
    for r in latency.values():
        assert 0 <= r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"]

    sizes = defaultdict(int)
    for r in mine:
        sizes[r["address"]] += r["size"]
    throughput = defaultdict(lambda: [0, 0])
    for r in ours(table(spark, node_run, "throughput_address")):
        throughput[r["address"]][0] += r["messages"]
        throughput[r["address"]][1] += r["bytes"]
    assert {a: tuple(v) for a, v in throughput.items()} == {a: (totals[a], sizes[a]) for a in totals}

    producers = {(r["node"], r["in_link"], r["address"]): r["messages"]
                 for r in ours(table(spark, node_run, "top_producers"))}
    assert producers == {("A", "client", a): n for a, n in totals.items()}
    consumers = {(r["node"], r["out_link"], r["address"]): (r["messages"], r["accepted"])
                 for r in ours(table(spark, node_run, "top_consumers"))}
    assert consumers == {("A", "client", a): (totals[a] - (a == "tel/none") * totals[a],
                                              want.get((a, "accepted"), 0))
                         for a in totals if a != "tel/none"}

    hops = {(r["address"], r["hops"]): r["messages"] for r in ours(table(spark, node_run, "hops_address"))}
    assert hops == {(a, 0): totals[a] for a in totals if a != "tel/none"}
    pairs = {(r["ingress"], r["egress"]): r["messages"] for r in table(spark, node_run, "pair_traffic")}
    assert pairs == {("A", "A"): sum(r["out_link"] == "client" for r in deliveries)}


def test_questions_answered_in_json_and_report(node_run):
    want = node_run.expected
    totals: Counter = Counter()
    for (address, _), n in want.items():
        totals[address] += n
    summary = json.loads((node_run.out / "summary.json").read_text())
    q = summary["questions"]
    assert [(r["address"], r["messages"]) for r in ours(q["top_addresses_by_volume"])] == \
        sorted(totals.items(), key=lambda kv: -kv[1])
    assert [(r["address"], r["released"], r["modified"], r["undeliverable"])
            for r in ours(q["undeliverable_by_address"])] == [("tel/none", 7, 0, 7), ("tel/a", 3, 3, 6)]
    recs = [r for r in records(node_run.records) if r["kind"] == "delivery"]
    (node,) = q["undeliverable_by_node"]
    assert (node["node"], node["undeliverable"]) == ("A", sum(r["outcome"] in ("released", "modified")
                                                              for r in recs))
    settling = {a: sum(n for (b, o), n in want.items() if b == a and o not in ("presettled", "dropped"))
                for a in totals}
    for r in ours(q["top_addresses_by_latency"]):        # the top 10 (management addresses may rank too)
        assert r["deliveries"] == settling[r["address"]] and r["p99_ms"] >= r["p50_ms"] >= 0
    assert ("A", "A") in {(r["ingress"], r["egress"]) for r in q["slowest_paths"]}
    per_window: Counter = Counter()
    for r in ours(q["windows"]):
        assert r["window"] in ("first", "second")
        per_window[r["address"]] += r["messages"]
    assert per_window == totals
    html = (node_run.out / "report.html").read_text()
    assert ">Questions</h2>" in html and "Undeliverable (released or modified) by address" in html


def test_report_in_headless_chromium(node_run, tmp_path):
    """The page loads in a real browser, is not blank, and shows the expected totals."""
    import shutil
    import subprocess

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    url = (node_run.out / "report.html").resolve().as_uri()
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    summary = json.loads((node_run.out / "summary.json").read_text())
    page = dom.stdout
    assert "<h1>meshrouter telemetry report</h1>" in page
    assert f">{summary['deliveries']:,}</td>" in page and f">{summary['events']:,}</td>" in page
    for address in ("tel/a", "tel/b", "tel/none", "tel/s"):
        assert address in page
    shot = tmp_path / "page.png"
    run = subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,1600", url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[..., :3]
    ink = (pixels.min(axis=2) < 0.9).mean()             # share of pixels that are not (near) white
    assert 0.01 < ink < 0.9, ink
