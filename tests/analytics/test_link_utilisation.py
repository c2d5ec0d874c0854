"""Per-link utilisation over time (issue 19 point 5) from a real three-node chain C - B - A with
telemetry: known traffic crosses known inter-router links in two bursts a second and more apart, then
`meshrouter analyze` (in-process, on the shared local session) must count per (node -> next hop) and
second exactly what the nodes' records say, and per link exactly what was sent."""

from __future__ import annotations

import io
import json
import math
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.clients import Client, make_message
from tests.support.meshes import build, wait_address
from tests.support.nodes import NodeSet
from tests.support.telemetry import deliveries
from tests.support.waiting import close_all, pump_for

CA, AC = "svc/lu-ca", "svc/lu-ac"   # consumed at A, produced at C; consumed at C, produced at A
# (burst, unsettled, pre-settled) messages per address
TRAFFIC = {CA: ((20, 0), (10, 4)), AC: ((5, 0), (7, 0))}
SENT = {a: sum(u + p for u, p in bursts) for a, bursts in TRAFFIC.items()}
# the links each address crosses, in order: (node, next hop)
PATHS = {CA: (("C", "B"), ("B", "A")), AC: (("A", "B"), ("B", "C"))}


@dataclass
class MeshRun:
    records: Path
    out: Path
    code: int


def _send(client: Client, address: str, unsettled: int, presettled: int, tag: str) -> None:
    s = client.sender(address)
    s.wait_credit()
    trackers = [s.send(make_message(f"{tag}-{i:04d}")) for i in range(unsettled)]
    for i in range(presettled):
        s.send(make_message(f"{tag}-settled-{i:04d}"), settled=True)
    assert all(t.wait().outcome == "ACCEPTED" for t in trackers)


@pytest.fixture(scope="module")
def mesh_run(spark, tmp_path_factory) -> MeshRun:
    from router.cli import main

    base = tmp_path_factory.mktemp("link-run")
    tdir = base / "telemetry"
    nodes = NodeSet(base)
    try:
        mesh = build(nodes.start, "ABC", [("B", "A", 1), ("C", "B", 1)],
                     sections={n: {"telemetry": {"dir": str(tdir)}} for n in "ABC"})
        at_a = Client(mesh["A"].url).receiver(CA, credit=100)
        at_c = Client(mesh["C"].url).receiver(AC, credit=100)
        wait_address(mesh.values(), CA, ["A"])
        wait_address(mesh.values(), AC, ["C"])
        prod_c, prod_a = Client(mesh["C"].url), Client(mesh["A"].url)
        for burst in range(2):
            if burst:
                pump_for(1.2)                   # the second burst settles in a later second
            _send(prod_c, CA, *TRAFFIC[CA][burst], f"ca{burst}")
            _send(prod_a, AC, *TRAFFIC[AC][burst], f"ac{burst}")
        at_a.wait_messages(SENT[CA])
        at_c.wait_messages(SENT[AC])
    finally:
        close_all()
        failure = nodes.stop_all()           # a clean stop completes every writer's files
    assert failure is None, failure
    out = base / "report"
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        code = main(["analyze", str(tdir), "--out", str(out), "--master", "local[2]"])
    return MeshRun(tdir, out, code)


def _table(spark, run: MeshRun, name: str) -> list[dict]:
    return [r.asDict() for r in spark.read.parquet(str(run.out / "tables" / name)).collect()]


def _cells(records: list[dict]) -> dict[tuple, tuple[int, int]]:
    """(node, next_hop, second) -> (messages, bytes), straight from the records."""
    messages: Counter = Counter()
    size: Counter = Counter()
    for r in records:
        if r["next_hop"] is not None:
            key = (r["node"], r["next_hop"], math.floor(r["settled"]))
            messages[key] += 1
            size[key] += r["size"]
    return {k: (messages[k], size[k]) for k in messages}


def test_records_name_the_next_hop_of_each_inter_router_link(mesh_run):
    recs = deliveries(mesh_run.records, [CA, AC])
    got = Counter((r["address"], r["node"], r["out_link"], r["next_hop"]) for r in recs)
    assert got == {(CA, "C", "inter-router", "B"): SENT[CA], (CA, "B", "inter-router", "A"): SENT[CA],
                   (CA, "A", "client", None): SENT[CA],
                   (AC, "A", "inter-router", "B"): SENT[AC], (AC, "B", "inter-router", "C"): SENT[AC],
                   (AC, "C", "client", None): SENT[AC]}


def test_link_utilisation_per_second_and_per_link_equals_the_known_traffic(spark, mesh_run):
    assert mesh_run.code == 0
    recs = deliveries(mesh_run.records)
    cells = _cells(recs)
    assert len({s for _, _, s in cells}) >= 2            # two bursts, two seconds at least

    # the per-second table: every (node, next hop, second) cell, messages and bytes
    rows = _table(spark, mesh_run, "link_utilisation")
    assert {(r["node"], r["next_hop"], r["second"]): (r["messages"], r["bytes"]) for r in rows} == cells
    assert len(rows) == len(cells)

    # per link: exactly the messages sent across it (nothing else crossed an inter-router link)
    per_link: Counter = Counter()
    for address, links in PATHS.items():
        for link in links:
            per_link[link] += SENT[address]
    summary = {(r["node"], r["next_hop"]): r for r in _table(spark, mesh_run, "link_summary")}
    assert {k: r["messages"] for k, r in summary.items()} == per_link

    # and field by field: bytes, span, busy seconds, peak second, averages over the span
    for link, r in summary.items():
        mine = sorted((s, m, b) for (n, h, s), (m, b) in cells.items() if (n, h) == link)
        first, last = mine[0][0], mine[-1][0]
        peak = max(mine, key=lambda c: (c[1], -c[0]))
        total_bytes = sum(b for _, _, b in mine)
        assert r["bytes"] == total_bytes == sum(x["size"] for x in recs
                                                  if (x["node"], x["next_hop"]) == link)
        assert (r["first_second"], r["last_second"], r["busy_seconds"]) == (first, last, len(mine))
        assert (r["peak_second"], r["peak_msg_s"], r["peak_bytes_s"]) == peak
        assert r["avg_msg_s"] == pytest.approx(per_link[link] / (last - first + 1))
        assert r["avg_bytes_s"] == pytest.approx(total_bytes / (last - first + 1))


def test_link_utilisation_in_summary_json_and_report(spark, mesh_run):
    summary = json.loads((mesh_run.out / "summary.json").read_text())
    util = summary["questions"]["link_utilisation"]
    assert util["bucket_s"] == 1                          # a short run: the table's own 1 s buckets
    table = {(r["node"], r["next_hop"]): r for r in _table(spark, mesh_run, "link_summary")}
    cells = _cells(deliveries(mesh_run.records))
    assert [(r["node"], r["next_hop"]) for r in util["links"]] == [
        (r["node"], r["next_hop"]) for r in sorted(table.values(),
                                                   key=lambda r: (-r["messages"], r["node"], r["next_hop"]))]
    for r in util["links"]:
        link = (r["node"], r["next_hop"])
        assert {k: v for k, v in r.items() if k != "series"} == table[link]
        assert {(link[0], link[1], p["start"]): (p["messages"], p["bytes"]) for p in r["series"]} == {
            k: v for k, v in cells.items() if k[:2] == link}
    html = (mesh_run.out / "report.html").read_text()
    section = html[html.index("<h2 id='questions'>"):html.index("<h2 id='throughput'>")]
    assert "Per-link utilisation over time" in section and 'alt="Inter-router link utilisation"' in section
    assert "not answered" not in html
    for node, hop in table:
        assert f'<td class="t">{node}</td><td class="t">{hop}</td>' in section
