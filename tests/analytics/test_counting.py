"""What the analysis report counts (issue 34): each message once in "Top addresses by volume" (at its
ingress, not once per node on its path), the mesh's own management traffic kept out of the per-address
tables, and ``analyze --follow``'s console: aligned columns for long addresses and no Spark WARN lines.

The chain is real: three node processes A - B - C with telemetry, 200 messages from a client on C to a
receiver on A (three records each), management reads across the mesh while it converges (``$management``,
``_topo/0/*/$management`` and their ``_topo/0/*/temp.*`` replies)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from router.analytics.follow import ADDRESS_WIDTH, COLUMNS, View, live_table
from router.analytics.questions import is_internal
from router.analytics.schema import RECORD_SCHEMA
from tests.support.clients import Client, make_message
from tests.support.meshes import build
from tests.support.nodes import NodeSet
from tests.support.state import mesh_view
from tests.support.waiting import close_all, wait_for

pytestmark = pytest.mark.timeout(600)     # Spark's start-up and a chain's analysis on a loaded machine
SENT = 200
ADDRESS = "svc/count"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chain_report(spark, tmp_path_factory):
    """200 messages C -> B -> A through a real chain, then `meshrouter analyze` in-process."""
    from router.cli import main

    base = tmp_path_factory.mktemp("chain-count")
    tdir, out = base / "telemetry", base / "report"
    nodes_set = NodeSet(base)
    try:
        nodes = build(nodes_set.start, "ABC", [("B", "A", 1), ("C", "B", 1)],
                      sections={n: {"telemetry": {"dir": str(tdir)}} for n in "ABC"})
        receiver = Client(nodes["A"].url).receiver(ADDRESS, credit=SENT)
        wait_for(lambda: mesh_view(nodes["C"]).addresses.get(ADDRESS) == ["A"], what=f"{ADDRESS} at C")
        sender = Client(nodes["C"].url).sender(ADDRESS)
        sender.wait_credit()
        trackers = [sender.send(make_message(f"m{i}")) for i in range(SENT)]
        assert [t.wait().outcome for t in trackers] == ["ACCEPTED"] * SENT
        assert len(receiver.wait_messages(SENT)) == SENT
    finally:
        close_all()
        failure = nodes_set.stop_all()          # a clean stop completes every writer's file
    assert failure is None, failure
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        code = main(["analyze", str(tdir), "--out", str(out), "--master", "local[2]"])
    assert code == 0
    return out, json.loads((out / "summary.json").read_text())


def test_top_addresses_by_volume_counts_each_message_once(spark, chain_report):
    out, summary = chain_report
    q = summary["questions"]
    assert {"address": ADDRESS, "messages": SENT} in q["top_addresses_by_volume"]
    records = [r.asDict() for r in spark.read.parquet(str(out / "tables" / "outcomes_address")).collect()]
    per_record = sum(r["messages"] for r in records if r["address"] == ADDRESS)
    assert per_record == 3 * SENT        # one record per node on the path: the Parquet table keeps them


def test_internal_addresses_stay_out_of_the_answers_and_are_counted_apart(spark, chain_report):
    out, summary = chain_report
    q = summary["questions"]
    tables = [q["top_addresses_by_volume"], q["top_addresses_by_latency"], q["undeliverable_by_address"],
              q["windows"]]
    assert not [r["address"] for rows in tables for r in rows if is_internal(r["address"])]
    producers = [r.asDict() for r in spark.read.parquet(str(out / "tables" / "top_producers")).collect()]
    internal = {r["address"] for r in producers if is_internal(r["address"])}
    assert internal, "the mesh's management reads made no records: the test would prove nothing"
    assert any(a.startswith("_topo/0/") for a in internal)
    assert q["internal"] == {"addresses": len(internal),
                             "messages": sum(r["messages"] for r in producers if is_internal(r["address"]))}
    html = (out / "report.html").read_text()
    body = html[html.index("<h2 id='questions'>"):html.index("<h2 id='definitions'>")]
    assert "_topo/0/" not in body and "<td class=\"t\">$management</td>" not in body
    assert f"{len(internal):,} internal addresses" in body


def test_how_to_read_this_says_what_is_counted(chain_report):
    out, _ = chain_report
    html = (out / "report.html").read_text()
    definitions = " ".join(html[html.index("<h2 id='definitions'>"):].split())
    assert "What is counted" in definitions and "once per node on its path" in definitions
    assert "at its ingress" in definitions and "Internal addresses" in definitions


@pytest.mark.parametrize("address", ["_topo/0/A/temp.Zx3_9", "_topo/0/B/$management", "$management",
                                     "_topo/0/C/$management/read", "temp.Zx3_9"])
def test_internal_addresses(address):
    assert is_internal(address)


@pytest.mark.parametrize("address", ["svc/a", "_topo/0/A/svc", "tempx", "$managementx", None,
                                     "x/$management", "_topo/0/A/B/temp.x", "svc/temp.x"])
def test_not_internal(address):
    assert not is_internal(address)


def test_follow_console_columns_line_up_with_long_addresses(spark, tmp_path):
    long = "openstack.org/om/rpc/anycast/nova/compute.host-0042.example.org"
    rows = [{"kind": "delivery", "node": "A", "address": a, "outcome": "accepted", "size": 10,
             "arrival": 1.0, "settled": 1.002}
            for a, n in ((long, 3), ("a", 2), (long + "-other", 1), ("_topo/0/A/temp.q1", 4))
            for _ in range(n)]
    full = [{f.name: r.get(f.name) for f in RECORD_SCHEMA.fields} for r in rows]
    batch = live_table(spark.createDataFrame(full, RECORD_SCHEMA))
    stream = io.StringIO()
    View(tmp_path, 2.0, stream).show(batch, 0)
    lines = stream.getvalue().splitlines()
    header, table, note = lines[1], lines[2:-1], lines[-1]
    assert len(table) == 3 and "temp.q1" not in stream.getvalue().split("(and")[0]
    assert note.strip() == "(and 1 internal addresses, management and its replies: 4 records)"
    assert {len(x) for x in [header, *table]} == {len(header)}          # every row as wide as the header
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    for line in table:                  # each number ends where its heading ends
        ends = [m.end() for m in re.finditer(r"\S+", line[ADDRESS_WIDTH:])]
        assert [e + ADDRESS_WIDTH for e in ends] == [m.end() for m in re.finditer(r"\S+", header)][1:]
    assert starts[0] == 0 and header.split()[:2] == list(COLUMNS[:2])
    assert table[0].startswith(long[:ADDRESS_WIDTH - 1] + "…")
    assert {line[:ADDRESS_WIDTH].rstrip() for line in table} >= {"a"}


def test_follow_prints_no_spark_warnings(spark, tmp_path):
    """A short live view over one Parquet file: its table on stdout, nothing from Spark's log on stderr."""
    tdir, out = tmp_path / "telemetry", tmp_path / "live"
    tdir.mkdir()
    rows = [{"kind": "delivery", "node": "A", "address": "svc/w", "outcome": "accepted", "size": 10,
             "arrival": 1.0, "settled": 1.5}] * 5
    frame = spark.createDataFrame([{f.name: r.get(f.name) for f in RECORD_SCHEMA.fields} for r in rows],
                                  RECORD_SCHEMA)
    frame.coalesce(1).write.parquet(str(tmp_path / "spark-out"))
    next((tmp_path / "spark-out").glob("part-*.parquet")).rename(tdir / "A-1.parquet")
    proc = subprocess.Popen(
        [sys.executable, "-m", "router", "analyze", "--follow", str(tdir), "--out", str(out),
         "--master", "local[1]", "--refresh", "2", "--duration", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:            # until the table shows the file
            seen.append(line)
            if re.match(r"svc/w\s+5\s", line):
                break
        time.sleep(3)                       # no new data: no batch runs while the view stops
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)          # Ctrl-C to the command (not to its JVM)
        stdout, stderr = proc.communicate(timeout=120)
    stdout = "".join(seen) + stdout
    assert proc.returncode == 0, stderr[-3000:]
    assert re.search(r"^svc/w\s+5\s", stdout, re.M), stdout[-2000:]
    spark_lines = [x for x in stderr.splitlines() if x.startswith("spark:") or " WARN " in x]
    assert not spark_lines, "\n".join(spark_lines)
