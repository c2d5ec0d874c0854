"""A node with telemetry writes one record per settled delivery and per link/connection event, and
`meshrouter analyze` turns the real records into a report."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.clients import Client, at_most_once_receiver, make_message, random_bytes
from tests.support.telemetry import records
from tests.support.waiting import pump_for, wait_until


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


# ---- the writer process --------------------------------------------------------------------------------
def writer_pid(node) -> int:
    """The node's telemetry writer process (its only child)."""
    children = Path(f"/proc/{node.pid}/task/{node.pid}/children").read_text().split()
    assert len(children) == 1, children
    pid = int(children[0])
    assert "router.telemetry.child" in Path(f"/proc/{pid}/cmdline").read_text()
    return pid


def gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie nobody reaped counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def telemetry_errors(node) -> list[str]:
    text = node.stderr_path.read_text(errors="replace")
    return [ln for ln in text.splitlines() if "telemetry stopped" in ln]


def test_the_writer_is_a_child_process_and_the_node_stays_single_threaded(node_factory, tmp_path):
    node = node_factory(extra={"telemetry": {"dir": str(tmp_path / "telemetry")}})
    child = writer_pid(node)
    assert os.listdir(f"/proc/{node.pid}/task") == [str(node.pid)]    # no writer thread in the node
    run_traffic(node)
    node.proc.terminate()
    assert node.proc.wait(20) == 0
    node.stopped = True
    assert gone(child)                                                 # the node waited for it
    assert len([r for r in records(tmp_path / "telemetry") if r["kind"] == "delivery"]) == 8


def test_unwritable_dir_stops_telemetry_with_one_line_and_routing_goes_on(node_factory, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    node = node_factory(extra={"telemetry": {"dir": str(blocker / "telemetry")}})
    child = writer_pid(node)
    # the writer runs at nice 10: on a busy machine it may take a while to start, fail and exit
    wait_until(lambda: gone(child), 60, "the writer process exits on its error")
    for _ in range(3):
        run_traffic(node)                                              # asserts every outcome
        time.sleep(0.6)                                                # a hand-off to the dead writer
    lines = telemetry_errors(node)
    assert len(lines) == 1 and "a-file" in lines[0], lines


def test_writer_process_killed_routing_goes_on_with_one_line(node_factory, tmp_path):
    node = node_factory(extra={"telemetry": {"dir": str(tmp_path / "telemetry")}})
    child = writer_pid(node)
    os.kill(child, signal.SIGKILL)
    for _ in range(3):
        run_traffic(node)
        time.sleep(0.6)
    wait_until(lambda: len(telemetry_errors(node)) >= 1, 10, "the node notices the writer is gone")
    run_traffic(node)
    time.sleep(0.6)
    lines = telemetry_errors(node)
    assert len(lines) == 1 and "writer process" in lines[0], lines


def test_node_killed_the_writer_keeps_what_it_was_given(node_factory, tmp_path):
    tdir = tmp_path / "telemetry"
    node = node_factory(extra={"telemetry": {"dir": str(tdir)}})
    child = writer_pid(node)
    run_traffic(node)
    time.sleep(1.5)                                                    # hand-offs happen every 0.5 s
    node.proc.kill()
    node.proc.wait(10)
    node.stopped = True
    wait_until(lambda: gone(child), 60, "the writer process ends when the node's pipe closes")
    assert len([r for r in records(tdir) if r["kind"] == "delivery"]) == 8


def test_streamed_held_and_handed_over_deliveries_get_one_record_each(node_factory, tmp_path):
    """Multi-frame (streamed) messages, unicast and multicast, settled or not; small messages that
    wait while a stream goes to their consumer; deliveries handed over to an at-most-once consumer;
    a streamed message nobody can take."""
    tdir = tmp_path / "telemetry"
    node = node_factory(extra={"telemetry": {"dir": str(tdir)}})
    mb = 1024 * 1024
    cons, p1, p2 = Client(node.url), Client(node.url), Client(node.url)
    r = cons.receiver("balanced/streams", credit=100)
    m1, m2 = cons.receiver("multicast/streams", credit=10), cons.receiver("multicast/streams", credit=10)
    amo = at_most_once_receiver(cons, "balanced/amo", credit=10)
    s1, s2 = p1.sender("balanced/streams"), p2.sender("balanced/streams")
    s1.wait_credit()
    s2.wait_credit()
    trackers = [s1.send(make_message(random_bytes(2 * mb)))]
    trackers += [s2.send(make_message(f"small {i}")) for i in range(10)]      # some wait for the stream
    s1.send(make_message(random_bytes(2 * mb)), settled=True)
    mc = p1.sender("multicast/streams")
    mc.wait_credit()
    trackers.append(mc.send(make_message(random_bytes(mb))))
    sa = p2.sender("balanced/amo")
    sa.wait_credit()
    trackers += [sa.send(make_message(f"amo {i}")) for i in range(3)]
    trackers.append(sa.send(make_message(random_bytes(mb))))
    lost = p2.sender(None).send(make_message(random_bytes(mb), address="balanced/nobody"))
    assert [t.wait(30).outcome for t in trackers] == ["ACCEPTED"] * 16
    assert lost.wait(30).outcome == "RELEASED"
    r.wait_messages(12, 30)
    m1.wait_messages(1, 30)
    m2.wait_messages(1, 30)
    amo.wait_messages(4, 30)
    for c in (cons, p1, p2):
        c.close()
    node.proc.terminate()
    assert node.proc.wait(20) == 0
    node.stopped = True
    got = sorted((d["address"], d["outcome"], d["size"] >= mb, d["out_link"])
                 for d in records(tdir) if d["kind"] == "delivery")
    assert got == sorted(
        [("balanced/streams", "accepted", True, "client")]
        + [("balanced/streams", "accepted", False, "client")] * 10
        + [("balanced/streams", "presettled", True, "client")]
        + [("multicast/streams", "accepted", True, "client")]
        + [("balanced/amo", "accepted", False, "client")] * 3
        + [("balanced/amo", "accepted", True, "client")]
        + [("balanced/nobody", "released", True, None)]), "\n".join(map(str, got))


def test_consumer_lost_mid_stream_records_the_stream_and_what_waited(node_factory, tmp_path):
    """A consumer stops reading in the middle of a streamed message (small ones wait behind it), then
    its connection drops: the stream comes back MODIFIED, what waited RELEASED, each with its record."""
    tdir = tmp_path / "telemetry"
    node = node_factory(extra={"telemetry": {"dir": str(tdir)}})
    mb = 1024 * 1024
    prod, prod2, cons = Client(node.url), Client(node.url), Client(node.url)
    cons.receiver("balanced/lost", credit=20)
    s, s2 = prod.sender("balanced/lost"), prod2.sender("balanced/lost")
    s.wait_credit()
    s2.wait_credit()
    cons.paused = True                                  # reads nothing more: the stream stalls
    big = s.send(make_message(random_bytes(8 * mb)))
    pump_for(0.5)
    small = [s2.send(make_message(f"small {i}")) for i in range(3)]   # wait behind the stream
    pump_for(0.5)
    cons.disconnect()
    assert big.wait(30).outcome == "MODIFIED"
    assert [t.wait(30).outcome for t in small] == ["RELEASED"] * 3
    prod.close()
    prod2.close()
    node.proc.terminate()
    assert node.proc.wait(20) == 0
    node.stopped = True
    got = sorted((r["outcome"], r["out_link"], r["size"] > mb)
                 for r in records(tdir) if r["kind"] == "delivery" and r["address"] == "balanced/lost")
    assert got == sorted([("modified", "client", True)] + [("released", None, False)] * 3), got
