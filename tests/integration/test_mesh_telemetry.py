"""Telemetry records from a short run of the four-node mesh, and `meshrouter analyze` on them."""

import json
import subprocess
import sys

import pytest

from tests.support.clients import Client, make_message, random_bytes
from tests.support.meshes import build
from tests.support.state import mesh_view
from tests.support.telemetry import deliveries
from tests.support.waiting import wait_for

EDGES = [("B", "A"), ("D", "C"), ("C", "A"), ("D", "B"), ("D", "A"), ("C", "B")]   # every pair, cost 1
RULES = [("multicast", "multicast")]


def four_node_mesh(node_factory, tdir):
    sections = {name: {"telemetry": {"dir": str(tdir)}} for name in "ABCD"}
    return build(node_factory, "ABCD", [(frm, to, 1) for frm, to in EDGES], rules=RULES, sections=sections)


def run_mesh_traffic(nodes) -> None:
    """10 anycast messages C -> A (one hop), 4 multicast from B to receivers on A and D."""
    a, b, c, d = (nodes[x] for x in "ABCD")
    svc = Client(a.url).receiver("svc/tel", credit=50)
    news_a = Client(a.url).receiver("multicast/tel", credit=50)
    news_d = Client(d.url).receiver("multicast/tel", credit=50)
    wait_for(lambda: mesh_view(c).addresses.get("svc/tel") == ["A"], what="svc/tel known at C")
    wait_for(lambda: mesh_view(b).addresses.get("multicast/tel") == ["A", "D"], what="multicast/tel at B")
    s = Client(c.url).sender("svc/tel")
    s.wait_credit()
    for t in [s.send(make_message(f"m{i}")) for i in range(10)]:
        assert t.wait().outcome == "ACCEPTED"
    m = Client(b.url).sender("multicast/tel")
    m.wait_credit()
    for t in [m.send(make_message(f"n{i}")) for i in range(4)]:
        assert t.wait().outcome == "ACCEPTED"
    assert len(svc.wait_messages(10)) == 10
    assert len(news_a.wait_messages(4)) == 4 and len(news_d.wait_messages(4)) == 4
    for node in nodes.values():
        node.proc.terminate()              # a clean stop flushes every writer
    for node in nodes.values():
        node.proc.wait(10)
        node.stopped = True


def test_mesh_records_carry_ingress_hops_and_link_kinds(node_factory, tmp_path):
    tdir = tmp_path / "telemetry"
    nodes = four_node_mesh(node_factory, tdir)
    run_mesh_traffic(nodes)
    svc = deliveries(tdir, ["svc/tel"])
    at_c = [r for r in svc if r["node"] == "C"]
    at_a = [r for r in svc if r["node"] == "A"]
    assert len(at_c) == len(at_a) == 10 and len(svc) == 20            # no other node saw them
    fields = ("ingress", "hops", "in_link", "out_link", "outcome", "egress", "next_hop")
    assert all(tuple(r[f] for f in fields)
               == ("C", 0, "client", "inter-router", "accepted", "A", "A") for r in at_c)  # C knew: A
    assert all(tuple(r[f] for f in fields)
               == ("C", 1, "inter-router", "client", "accepted", "A", None) for r in at_a)
    news = deliveries(tdir, ["multicast/tel"])
    assert sorted((r["node"], r["hops"], r["in_link"]) for r in news) == sorted(
        [("B", 0, "client")] * 4 + [("A", 1, "inter-router")] * 4 + [("D", 1, "inter-router")] * 4)
    assert all(r["ingress"] == "B" and r["outcome"] == "accepted" for r in news)
    # multicast: B sent copies to peers (several egresses: null); A and D delivered to their clients
    assert {(r["node"], r["egress"]) for r in news} == {("B", None), ("A", "A"), ("D", "D")}
    assert {r["next_hop"] for r in news} == {None}       # B's copies went to two peers


@pytest.mark.timeout(300)
def test_analyze_four_node_mesh_records(node_factory, tmp_path):
    pytest.importorskip("pyspark", reason="pyspark is in the test extra; not installed here")
    tdir = tmp_path / "telemetry"
    run_mesh_traffic(four_node_mesh(node_factory, tdir))
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "router", "analyze", str(tdir), "--out", str(out),
                           "--master", "local[1]"], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    # the job counts every delivery record: the test's 32 and those of the management readings that
    # waited for the mesh (tests/support/state.py)
    assert len(deliveries(tdir, ["svc/tel", "multicast/tel"])) == 32
    assert summary["nodes"] == 4 and summary["deliveries"] == len(deliveries(tdir))
    assert summary["corrupt_lines"] == 0 and summary["invalid_records"] == 0
    html = (out / "report.html").read_text()
    assert "svc/tel" in html and "multicast/tel" in html and "<img" in html


def test_streamed_and_held_deliveries_across_two_nodes(node_factory, tmp_path):
    """Multi-frame messages crossing A -> B (unicast settled or not, multicast), and small ones that
    wait at A while a stream goes out on the inter-router link: one record per delivery on each node."""
    tdir = tmp_path / "telemetry"
    nodes = build(node_factory, "AB", [("B", "A", 1)], rules=RULES,
                  sections={name: {"telemetry": {"dir": str(tdir)}} for name in "AB"})
    a, b = nodes["A"], nodes["B"]
    mb = 1024 * 1024
    svc = Client(b.url).receiver("svc/big", credit=50)
    news_a = Client(a.url).receiver("multicast/big", credit=10)
    news_b = Client(b.url).receiver("multicast/big", credit=10)
    wait_for(lambda: mesh_view(a).addresses.get("svc/big") == ["B"], what="svc/big known at A")
    wait_for(lambda: mesh_view(a).addresses.get("multicast/big") == ["B"], what="multicast/big at A")
    prod = Client(a.url)
    s = prod.sender("svc/big")
    s.wait_credit()
    trackers = [s.send(make_message(random_bytes(2 * mb)))]
    trackers += [s.send(make_message(f"small {i}")) for i in range(10)]
    s.send(make_message(random_bytes(2 * mb)), settled=True)
    m = prod.sender("multicast/big")
    m.wait_credit()
    trackers.append(m.send(make_message(random_bytes(mb))))
    assert [t.wait(30).outcome for t in trackers] == ["ACCEPTED"] * 12
    svc.wait_messages(12, 30)
    news_a.wait_messages(1, 30)
    news_b.wait_messages(1, 30)
    for node in nodes.values():
        node.proc.terminate()
    for node in nodes.values():
        node.proc.wait(10)
        node.stopped = True
    recs = deliveries(tdir, ["svc/big", "multicast/big"])
    assert {(r["node"], r["address"], r["out_link"], r["next_hop"]) for r in recs} == {
        ("A", "svc/big", "inter-router", "B"), ("B", "svc/big", "client", None),
        ("A", "multicast/big", "client", "B"),          # one copy to A's client, one to peer B
        ("B", "multicast/big", "client", None)}
    got = sorted((r["node"], r["address"], r["outcome"], r["size"] >= mb, r["in_link"], r["out_link"])
                 for r in recs)
    out_a, in_b = ("A", "svc/big"), ("B", "svc/big")
    assert got == sorted(
        [(*out_a, "accepted", True, "client", "inter-router")]
        + [(*out_a, "accepted", False, "client", "inter-router")] * 10
        + [(*out_a, "presettled", True, "client", "inter-router")]
        + [(*in_b, "accepted", True, "inter-router", "client")]
        + [(*in_b, "accepted", False, "inter-router", "client")] * 10
        # A settles a streamed delivery with its last frame, so B forwarded the pre-settled one unsettled
        + [(*in_b, "accepted", True, "inter-router", "client")]
        + [("A", "multicast/big", "accepted", True, "client", "client")]       # first copy: A's client
        + [("B", "multicast/big", "accepted", True, "inter-router", "client")]), "\n".join(map(str, got))
