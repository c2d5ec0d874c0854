"""router.telemetry: config, the Parquet and JSON Lines formats, the writer (both formats), rotation,
sampling, bounded memory, and failures (unwritable dir, ENOSPC, directory lost) that stop telemetry only."""

from __future__ import annotations

import errno
import io
import json
import logging
import re
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import router.telemetry.jsonl as jsonl
import router.telemetry.parquet as parquet
from router.telemetry import DELIVERY_FIELDS, TelemetryConfig, TelemetryWriter
from router.telemetry.jsonl import Formatter, RotatingFile

T0 = 1_763_770_000.25
NAME_RE = re.compile(r"^A-\d{8}T\d{6}Z-(\d{6})\.(jsonl|parquet)$")


def rec(i: int, address: str = "svc/orders") -> tuple:
    return (address, "A", i % 3, "client", "inter-router", "accepted", 100 + i, T0 + i, T0 + i + 0.0015,
            "C" if i % 2 else None, "B" if i % 2 else None)


def lines(directory: Path) -> list[dict]:
    """Every record in the directory's files (in file order), as dicts."""
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    for path in sorted(directory.glob("*.parquet")):
        out += pq.read_table(path).to_pylist()
    return out


def telemetry_logs(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "router.telemetry"]


@pytest.fixture(params=["parquet", "jsonl"])
def fmt(request) -> str:
    return request.param


# ---- config -------------------------------------------------------------------------------------------
def test_config_defaults_and_bytes(tmp_path):
    cfg = TelemetryConfig(tmp_path)
    assert (cfg.rotate_mb, cfg.sample, cfg.path) == (64, 1.0, tmp_path)
    assert cfg.rotate_bytes == 64 * 1024 * 1024


@pytest.mark.parametrize("kwargs, problem", [
    ({"rotate_mb": 0}, "rotate_mb"), ({"rotate_mb": "1"}, "rotate_mb"), ({"rotate_mb": True}, "rotate_mb"),
    ({"sample": 1.5}, "sample"), ({"sample": -0.1}, "sample"), ({"sample": None}, "sample"),
])
def test_config_rejects_bad_values(tmp_path, kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        TelemetryConfig(tmp_path, **kwargs)


def test_config_from_mapping():
    assert TelemetryConfig.from_mapping({"dir": "/x", "sample": 0.5}) == TelemetryConfig("/x", 64, 0.5)
    for data, problem in [({}, "dir: required"), ({"dir": 3}, "dir: must be a string"),
                          ({"dir": "/x", "rotate": 1}, "rotate: unknown key"), ([], "mapping")]:
        with pytest.raises(ValueError, match=problem):
            TelemetryConfig.from_mapping(data)


# ---- format -------------------------------------------------------------------------------------------
def test_delivery_and_event_lines_are_the_documented_json():
    f = Formatter("A")
    d = json.loads(f.deliveries([rec(1)]))
    assert d == {"kind": "delivery", "node": "A", "address": "svc/orders", "ingress": "A", "hops": 1,
                 "in_link": "client", "out_link": "inter-router", "outcome": "accepted", "size": 101,
                 "arrival": T0 + 1, "settled": T0 + 1.0015, "egress": "C",
                 "next_hop": "B"}
    e = json.loads(f.events([("link_up", "c1/l2", None, "peer-1", T0)]))
    assert e == {"kind": "event", "node": "A", "event": "link_up", "link": "c1/l2", "address": None,
                 "peer": "peer-1", "time": T0}


def test_strings_are_escaped_and_bad_records_skipped_and_counted():
    f = Formatter("A")
    odd = 'a"b\\c\n\u00e9/\u2603'
    good = (odd, None, 0, "client", None, "released", 5, T0, T0, None)
    text = f.deliveries([good, ("x", "A", "two", "client", "client", "accepted", 1, T0, T0, None),
                         ("x", "A", 0, "client", "client", "accepted", 1, float("nan"), T0, None), good])
    rows = [json.loads(line) for line in text.splitlines()]
    assert len(rows) == 2 and f.bad == 2
    assert rows[0]["address"] == odd and rows[0]["ingress"] is None and rows[0]["out_link"] is None


# ---- files --------------------------------------------------------------------------------------------
def test_rotation_keeps_every_file_within_the_limit_and_lines_whole(tmp_path):
    f = RotatingFile(tmp_path, "A-20260101T000000Z", 1000)
    text = "".join(f"{i:0>99}\n" for i in range(35))  # 35 lines of 100 bytes, one write
    f.write(text)
    f.write("x" * 1500 + "\n")  # longer than the limit: a file of its own
    f.write("tail\n")
    f.close()
    sizes = [p.stat().st_size for p in f.paths]
    assert [p.name for p in f.paths] == [f"A-20260101T000000Z-{i:06d}.jsonl" for i in range(1, 7)]
    assert sizes == [1000, 1000, 1000, 500, 1501, 5]
    assert "".join(p.read_text() for p in f.paths) == text + "x" * 1500 + "\ntail\n"


def test_existing_files_are_never_overwritten(tmp_path):
    (tmp_path / "A-P-000001.jsonl").write_text("old\n")
    f = RotatingFile(tmp_path, "A-P", 100)
    f.write("new\n")
    f.close()
    assert (tmp_path / "A-P-000001.jsonl").read_text() == "old\n"
    assert (tmp_path / "A-P-000002.jsonl").read_text() == "new\n"


# ---- writer -------------------------------------------------------------------------------------------
def test_writer_writes_deliveries_and_events(tmp_path, fmt):
    w = TelemetryWriter(TelemetryConfig(tmp_path / "t"), "A", fmt=fmt)
    for i in range(1000):
        w.delivery(rec(i))
    w.event(("conn_up", None, None, "peer-1", T0))
    assert w.flush()
    got = lines(tmp_path / "t")
    assert len(got) == 1001
    w.delivery(rec(1000))
    w.close()
    got = lines(tmp_path / "t")
    deliveries = [r for r in got if r["kind"] == "delivery"]
    assert [r["size"] for r in deliveries] == [100 + i for i in range(1001)]
    assert [r["event"] for r in got if r["kind"] == "event"] == ["conn_up"]
    names = sorted(p.name for p in (tmp_path / "t").iterdir())
    # Parquet: flush() completes the file (a footer), the next records go to the next one
    assert len(names) == (1 if fmt == "jsonl" else 2)
    assert all(NAME_RE.match(n) and n.startswith(w.prefix) and n.endswith(fmt) for n in names)
    assert not w._thread.is_alive() and w.dropped == 0 and not w.stopped


def test_hot_path_only_appends(tmp_path, fmt):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", fmt=fmt, flush_interval=3600)
    try:
        for i in range(10):
            w.delivery(rec(i))
        w.event(("link_up", "l1", "svc", "p", T0))
        assert w.pending == 11
        assert lines(tmp_path) == []  # nothing formatted or written by the calls themselves
    finally:
        w.close()
    assert len(lines(tmp_path)) == 11 and w.pending == 0


def test_writer_rotates(tmp_path, fmt):
    w = TelemetryWriter(TelemetryConfig(tmp_path, rotate_mb=0.01), "A", fmt=fmt)  # 10485 bytes
    n = 500 if fmt == "jsonl" else 20_000  # Parquet: ~10 bytes per record, ~3 KB of footer per file
    for i in range(n):
        w.delivery(rec(i))
    w.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) > 5
    assert all(p.stat().st_size <= 10485 for p in files)
    assert [int(NAME_RE.match(p.name).group(1)) for p in files] == list(range(1, len(files) + 1))
    assert [r["size"] for r in lines(tmp_path)] == [100 + i for i in range(n)]


@pytest.mark.parametrize("sample, kept", [(0.25, [3, 7, 11]), (0.5, [1, 3, 5]), (0.0, []), (1.0, [0, 1, 2])])
def test_sampling_is_deterministic_and_spares_events(tmp_path, sample, kept):
    w = TelemetryWriter(TelemetryConfig(tmp_path, sample=sample), "A", fmt="jsonl")
    for i in range(1000):
        w.delivery(rec(i))
    for _ in range(3):
        w.event(("link_up", "l", "a", "p", T0))
    w.close()
    got = lines(tmp_path)
    sizes = [r["size"] - 100 for r in got if r["kind"] == "delivery"]
    assert len(sizes) == round(1000 * sample)
    assert sizes[:3] == kept
    assert sum(r["kind"] == "event" for r in got) == 3


def test_bounded_memory_drops_and_counts_with_one_log_line(tmp_path, caplog, fmt):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", fmt=fmt, flush_interval=3600,
                        max_pending=100)
    with caplog.at_level(logging.WARNING, logger="router.telemetry"):
        for i in range(150):
            w.delivery(rec(i))
        w.event(("link_up", "l", "a", "p", T0))
        assert w.pending == 101 and w.dropped == 50
        assert w.flush()
        for i in range(150):
            w.delivery(rec(i))
        w.close()
    assert w.dropped == 100
    assert len(lines(tmp_path)) == 201
    logs = telemetry_logs(caplog)
    assert len(logs) == 1 and logs[0].levelno == logging.WARNING and "dropping" in logs[0].getMessage()


def _wait_stopped(w: TelemetryWriter, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not w.stopped and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.stopped


def _assert_stopped_quietly(w: TelemetryWriter, caplog) -> None:
    _wait_stopped(w)
    for i in range(1000):
        w.delivery(rec(i))  # no-ops now, and never raise
        w.event(("link_down", "l", "a", "p", T0))
    assert w.pending == 0
    assert w.flush(1) is False
    w.close()
    w.close()
    logs = telemetry_logs(caplog)
    assert len(logs) == 1, [r.getMessage() for r in logs]
    assert logs[0].levelno == logging.ERROR and "telemetry stopped" in logs[0].getMessage()


def test_unwritable_dir_stops_telemetry_with_one_line(tmp_path, caplog, fmt):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.INFO, logger="router.telemetry"):
        w = TelemetryWriter(TelemetryConfig(blocker / "telemetry"), "A", fmt=fmt)
        w.delivery(rec(1))
        _assert_stopped_quietly(w, caplog)
    assert str(blocker) in telemetry_logs(caplog)[0].getMessage()


class _FullDisk(io.BufferedWriter):
    """A file that accepts ``room`` bytes, then fails like a full disk."""

    room = 3000

    def write(self, data) -> int:
        if len(data) > _FullDisk.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        _FullDisk.room -= len(data)
        return super().write(data)


def test_disk_full_stops_telemetry_with_one_line(tmp_path, caplog, monkeypatch, fmt):
    def full_open(path, mode, buffering=-1):
        return _FullDisk(io.FileIO(path, mode.replace("b", "")))

    monkeypatch.setattr(_FullDisk, "room", 3000 if fmt == "jsonl" else 5000)  # Parquet: one small file
    monkeypatch.setattr(jsonl if fmt == "jsonl" else parquet, "open", full_open, raising=False)
    with caplog.at_level(logging.INFO, logger="router.telemetry"):
        w = TelemetryWriter(TelemetryConfig(tmp_path), "A", fmt=fmt, flush_interval=0.05)
        for i in range(10):
            w.delivery(rec(i))
        assert w.flush()
        for i in range(100):
            w.delivery(rec(i))
        w.flush(5)  # Parquet writes the file at flush (or after roll_seconds)
        _assert_stopped_quietly(w, caplog)
    assert "No space left on device" in telemetry_logs(caplog)[0].getMessage()
    if fmt == "jsonl":
        assert len(lines(tmp_path)) == 10
    else:  # the complete first file; the second one has no footer (unreadable, as after a crash)
        first = sorted(tmp_path.glob("*.parquet"))[0]
        assert pq.read_table(first).num_rows == 10


def test_directory_lost_mid_run_stops_telemetry_with_one_line(tmp_path, caplog, fmt):
    target = tmp_path / "t"
    with caplog.at_level(logging.INFO, logger="router.telemetry"):
        w = TelemetryWriter(TelemetryConfig(target, rotate_mb=0.001), "A", fmt=fmt)  # small files
        for i in range(3):
            w.delivery(rec(i))
        assert w.flush()
        shutil.move(target, tmp_path / "moved")
        target.write_text("a file where the directory was")
        for i in range(100):
            w.delivery(rec(i))
        _assert_stopped_quietly(w, caplog)
    assert "t/A-" in telemetry_logs(caplog)[0].getMessage()  # the reason names the file


def test_bad_format_name(tmp_path):
    with pytest.raises(ValueError, match="fmt"):
        TelemetryWriter(TelemetryConfig(tmp_path), "A", fmt="csv")


def test_parquet_file_has_the_documented_columns_and_types(tmp_path):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A")
    w.delivery(rec(1))
    w.event(("link_up", "l1", "svc/orders", "peer-1", T0))
    w.close()
    (path,) = tmp_path.glob("*.parquet")
    table = pq.read_table(path)
    assert tuple(table.column_names) == ("kind", "node", *DELIVERY_FIELDS[:-2], "egress", "next_hop", "event",
                                         "link", "peer", "time")
    types = {f.name: str(f.type) for f in pq.read_schema(path)}
    assert types["hops"] == types["size"] == "int64" and types["arrival"] == types["time"] == "double"
    assert pq.ParquetFile(path).schema.column(2).physical_type == "BYTE_ARRAY"  # address: a string
    rows = table.to_pylist()
    assert rows[0]["kind"] == "event" and rows[0]["event"] == "link_up" and rows[0]["size"] is None
    assert rows[1] == {"kind": "delivery", "node": "A", "address": "svc/orders", "ingress": "A", "hops": 1,
                       "in_link": "client", "out_link": "inter-router", "outcome": "accepted", "size": 101,
                       "arrival": T0 + 1, "settled": T0 + 1.0015, "egress": "C", "next_hop": "B",
                       "event": None, "link": None, "peer": None, "time": None}


def test_routes_carry_next_hop_and_six_field_routes_have_none(tmp_path):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", flush_interval=3600)
    old = w.route(("svc/x", "A", 0, "client", "inter-router", "C"))
    new = w.route(("svc/x", "A", 0, "client", "inter-router", "C", "B"))
    assert old != new and w.routes == [("svc/x", "A", 0, "client", "inter-router", "C", None),
                                       ("svc/x", "A", 0, "client", "inter-router", "C", "B")]
    with pytest.raises(TypeError):
        w.route(("svc/x", "A", 0, "client", "inter-router", "C", 7))
    w.put((old, 0x24, 1, T0, T0))
    w.put((new, 0x24, 2, T0, T0))
    w.delivery(("svc/y", "A", 0, "client", "client", "accepted", 3, T0, T0))   # no egress, no next hop
    w.close()
    assert [(r["size"], r["egress"], r["next_hop"]) for r in pq.read_table(
        next(tmp_path.glob("*.parquet"))).to_pylist()] == [(1, "C", None), (2, "C", "B"), (3, None, None)]


def test_compact_records_routes_and_outcome_codes(tmp_path):
    from router.telemetry import DROPPED, PRESETTLED

    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", flush_interval=3600)
    r1 = w.route(("svc/x", "A", 0, "client", "client", "A"))
    r2 = w.route(("svc/y", "B", 2, "inter-router", None, None))
    assert w.route(("svc/x", "A", 0, "client", "client", "A")) == r1 != r2 and len(w.routes) == 2
    with pytest.raises(TypeError):
        w.route(("svc/z", "A", "two", "client", "client", None))
    for code in (0x24, 0x25, 0x26, 0x27, PRESETTLED, DROPPED, 0, 99, 4096):
        w.put((r1 if code != DROPPED else r2, code, 7, T0, T0 + 0.5))
    w.put((r1, 0x24, "big", T0, T0))  # wrong type: skipped and counted
    w.put((r2 + 1, 0x24, 1, T0, T0))  # a route id it never gave: skipped and counted
    w.close()
    got = lines(tmp_path)
    assert [r["outcome"] for r in got] == ["accepted", "rejected", "released", "modified", "presettled",
                                           "dropped", "released", "released", "released"]
    assert got[5]["address"] == "svc/y" and got[5]["hops"] == 2 and got[5]["egress"] is None
    assert all(r["address"] == "svc/x" and r["egress"] == "A" for i, r in enumerate(got) if i != 5)
    assert w.bad == 2 and not w.stopped


# ---- columnar batches (the node's hand-off) -----------------------------------------------------------
def _batch(rows: list[tuple], settled: list[tuple[int, float]]):
    """A DeliveryColumns batch from (route id, outcome, size, arrival) rows and (end, time) runs."""
    from router.telemetry.columns import DeliveryColumns

    b = DeliveryColumns()
    for rid, outcome, size, arrival in rows:
        b.add(rid, outcome, size, arrival)
    for end, t in settled:
        b.sizes, rest = b.sizes[:end], b.sizes[end:]
        b.settle(t)
        b.sizes += rest
    return b


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_columnar_batches_give_exact_records(tmp_path, fmt):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", fmt=fmt, flush_interval=3600)
    x = w.route(("svc/x", "A", 0, "client", "client", "A"))
    y = w.route(("svc/y", "B", 3, "inter-router", "client", "A"))
    rows = [(x, 0x24, 10, T0), (x, 0x24, 0, T0), (y, 0x26, 2**40 + 5, T0 + 1), (x, 0x24, 30, T0 + 1),
            (y, 0x27, 40, T0 + 1), (x, 0x25, 50, T0 + 2)]
    w.deliveries(_batch(rows, [(2, T0 + 0.5), (5, T0 + 1.5), (6, T0 + 3)]))
    w.deliveries(_batch([(y, 1, 60, T0 + 4)], [(1, T0 + 4)]))
    w.close()
    got = [(r["address"], r["ingress"], r["hops"], r["in_link"], r["out_link"], r["egress"], r["outcome"],
            r["size"], r["arrival"], r["settled"]) for r in lines(tmp_path)]
    assert got == [
        ("svc/x", "A", 0, "client", "client", "A", "accepted", 10, T0, T0 + 0.5),
        ("svc/x", "A", 0, "client", "client", "A", "accepted", 0, T0, T0 + 0.5),
        ("svc/y", "B", 3, "inter-router", "client", "A", "released", 2**40 + 5, T0 + 1, T0 + 1.5),
        ("svc/x", "A", 0, "client", "client", "A", "accepted", 30, T0 + 1, T0 + 1.5),
        ("svc/y", "B", 3, "inter-router", "client", "A", "modified", 40, T0 + 1, T0 + 1.5),
        ("svc/x", "A", 0, "client", "client", "A", "rejected", 50, T0 + 2, T0 + 3),
        ("svc/y", "B", 3, "inter-router", "client", "A", "presettled", 60, T0 + 4, T0 + 4),
    ]
    assert w.bad == 0 and w.pending == 0 and not w.stopped


def test_malformed_batches_are_skipped_and_counted(tmp_path):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", flush_interval=3600)
    x = w.route(("svc/x", "A", 0, "client", "client", "A"))
    unclosed = _batch([(x, 0x24, 1, T0)] * 3, [(2, T0)])      # the last record has no settlement time
    broken = _batch([(x, 0x24, 1, T0)] * 2, [(2, T0)])
    broken.sizes[1] = "two"
    unknown = _batch([(x + 5, 0x24, 1, T0)], [(1, T0)])       # a route id the writer never gave
    for b in (unclosed, broken, unknown, _batch([(x, 0x24, 9, T0)], [(1, T0)])):
        w.deliveries(b)
    w.close()
    assert [r["size"] for r in lines(tmp_path)] == [9]
    assert w.bad == 6 and not w.stopped


@pytest.mark.parametrize("sample", [0.25, 0.5, 0.3, 0.0])
def test_batch_sampling_matches_the_counter(tmp_path, sample):
    w = TelemetryWriter(TelemetryConfig(tmp_path, sample=sample), "A", flush_interval=3600)
    x = w.route(("svc/x", "A", 0, "client", "client", "A"))
    for start in (0, 7, 20):                                 # batches of 7, 13 and 80 records
        n = {0: 7, 7: 13, 20: 80}[start]
        w.deliveries(_batch([(x, 0x24, start + i, T0) for i in range(n)], [(n, T0)]))
    w.close()
    ref = TelemetryWriter(TelemetryConfig(tmp_path / "ref", sample=sample), "A", flush_interval=3600)
    rid = ref.route(("svc/x", "A", 0, "client", "client", "A"))
    for i in range(100):
        ref.put((rid, 0x24, i, T0, T0))
    ref.close()
    assert [r["size"] for r in lines(tmp_path)] == [r["size"] for r in lines(tmp_path / "ref")]


def test_batches_bounded_drop_and_count(tmp_path, caplog):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", flush_interval=3600, max_pending=100)
    x = w.route(("svc/x", "A", 0, "client", "client", "A"))
    with caplog.at_level(logging.WARNING, logger="router.telemetry"):
        for _ in range(3):
            w.deliveries(_batch([(x, 0x24, 1, T0)] * 40, [(40, T0)]))
        assert w.pending == 80 and w.dropped == 40
        w.close()
    assert len(lines(tmp_path)) == 80
    assert len(telemetry_logs(caplog)) == 1


# ---- the node's hooks ---------------------------------------------------------------------------------
def test_node_hooks_give_exact_records(tmp_path):
    """NodeTelemetry as the adapter drives it (router.adapter.observer): routes carried in in-flight
    entries, settlements, deliveries that end at once, multicast groups, streams, pumps (tick), hand-off
    by size and by age, close."""
    from types import SimpleNamespace

    from router.amqp.annotations import RouterAnnotations
    from router.forwarding.decisions import HANDED_OVER, PRESETTLED
    from router.forwarding.records import Address, Consumer, InFlight, McastGroup, Producer, RemoteDest
    from router.telemetry.observer import NodeTelemetry
    from router.telemetry.process import WriterProcess

    w = WriterProcess(TelemetryConfig(tmp_path), "A")      # the real child process
    # the node's clock is monotonic; records get wall-clock times (here: T0 + the node's clock)
    tel = NodeTelemetry(w, "A", handoff_records=3, handoff_seconds=10, wall_offset=lambda: T0)
    client, router = SimpleNamespace(kind="client"), SimpleNamespace(kind="inter-router")
    p = Producer("p", client, Address("q", "balanced"), "q")
    from_b = Producer("pb", router, None, "_router/B")
    from_b.router = True
    q = Consumer("q", client, Address("q", "balanced"), "q")
    r = Consumer("r", client, Address("r", "closest"), "r")
    to_c = Consumer("out", router, Address("_router/C", "closest"), "_router/C")
    to_c.peer = "C"
    toward_c = RemoteDest("C", 1, to_c)
    via_b = RouterAnnotations(ingress="0/B", trace=["0/B", "0/X"])

    def sent(d, key, prod, c, n, ann=None, rd=None):    # what the adapter keeps in the in-flight entry
        return InFlight(d, prod, c, None, 0, rd, tel_now[0], n, tel.route_of(key, prod, c, ann, rd))

    t1, t2, t3, t4 = 1.0, 2.0, 3.0, 30.0
    tel_now = [t1]
    tel.tick(t1)
    e1, e2, e5 = sent("d1", "q", p, q, 100), sent("d2", "q", p, q, 0), sent("d5", "r", p, r, 2**41)
    assert e1.route == -1                                              # client to client here
    e3 = sent("d3", "q", from_b, q, 7, via_b)                           # from a peer, consumed here
    e8 = sent("d8", "q", p, to_c, 80, None, toward_c)                   # toward C
    g = McastGroup("dg", p)
    tel.multicast("m", p, None, [q, to_c], g, 9)
    tel.forwarded_settled("q", p, q, None, None, PRESETTLED, 5)
    stream = SimpleNamespace(key="q", ann=None, producer=p, group=None, presettled=False, in_dlv="d4",
                             outs=[(to_c, "od4")], final=None, size=0, tel=None)
    tel.stream_routed(stream, False, [to_c], toward_c)                  # streamed toward C
    tel.tick(t2)
    tel_now[0] = t2
    e6 = sent("d6", "q", p, q, 1)
    tel.settled(e2, 0x24)
    tel.settled(e1, 0x26)
    tel.settled(e5, 0x26)
    tel.grew("d4", 12345)
    tel.ended("nowhere", p, False, 3)
    sunk = SimpleNamespace(key="q", ann=RouterAnnotations(ingress="0/B", trace=["0/B"]), producer=from_b,
                           group=None, presettled=True, in_dlv="d9", outs=[], final=None, size=4, tel=None)
    tel.stream_sunk(sunk)
    tel.stream_ended(sunk, aborted=False)                               # pre-settled, went nowhere
    tel.tick(t3)                                                       # 6 records: handed off
    tel.settled(e3, 0x27)
    tel.group_settled(g, 0x25)
    tel.settled(e6, 0x24)
    tel.forwarded_settled("q", p, q, None, None, HANDED_OVER, 2)
    tel.settled(e8, 0x24)
    tel.tick(t4)                                                       # 10 s later: handed off
    tel.settled(InFlight("d4", p, to_c, None, 0, toward_c, t1, -1, -1), 0x24)  # the stream
    tel.close()
    got = [(r["address"], r["ingress"], r["hops"], r["in_link"], r["out_link"], r["egress"], r["outcome"],
            r["size"], round(r["arrival"] - T0, 6), round(r["settled"] - T0, 6))
           for r in lines(tmp_path) if r["kind"] == "delivery"]
    here = ("A", 0, "client", "client", "A")
    assert got == [
        ("q", *here, "presettled", 5, t1, t1),
        ("q", *here, "accepted", 0, t1, t2),
        ("q", *here, "released", 100, t1, t2),
        ("r", *here, "released", 2**41, t1, t2),
        ("nowhere", "A", 0, "client", None, None, "released", 3, t2, t2),
        ("q", "B", 1, "inter-router", None, None, "dropped", 4, t2, t2),
        ("q", "B", 2, "inter-router", "client", "A", "modified", 7, t1, t3),
        ("m", "A", 0, "client", "client", None, "rejected", 9, t1, t3),
        ("q", *here, "accepted", 1, t2, t3),
        ("q", *here, "accepted", 2, t3, t3),
        ("q", "A", 0, "client", "inter-router", "C", "accepted", 80, t1, t3),
        ("q", "A", 0, "client", "inter-router", "C", "accepted", 12345, t1, t4),
    ]
    assert not tel.mesh and not w.stopped


# ---- the writer process (router.telemetry.process) --------------------------------------------------------
def _writer_child(w) -> int:
    return w._proc.pid


def test_writer_process_that_stalls_never_blocks_the_node(tmp_path, caplog):
    """A stopped child: the pipe fills, `deliveries` still returns at once, what waits is bounded and
    the rest is dropped and counted (one WARNING); once the child runs again it writes what it got."""
    import os
    import signal
    import time

    from router.telemetry.process import WriterProcess

    w = WriterProcess(TelemetryConfig(tmp_path), "A", max_backlog=1 << 20)
    x = w.route(("svc/x", "A", 0, "client", "client", "A"))
    os.kill(_writer_child(w), signal.SIGSTOP)
    try:
        with caplog.at_level(logging.WARNING, logger="router.telemetry"):
            sent = 0
            slowest = 0.0
            while w.dropped == 0:
                n = 20_000
                t = time.perf_counter()
                w.deliveries(_batch([(x, 0x24, 1, T0)] * n, [(n, T0 + 1)]))
                slowest = max(slowest, time.perf_counter() - t)
                sent += n
                assert sent < 10_000_000, "the backlog bound never applied"
            w.deliveries(_batch([(x, 0x24, 1, T0)] * 10, [(10, T0 + 1)]))
        assert slowest < 0.5                                 # never waits for the child
        assert 1 << 20 < w.pending < (1 << 20) + 1_000_000   # bounded by max_backlog (+ one batch)
        assert w.dropped == 20_000 + 10
        assert len(telemetry_logs(caplog)) == 1 and "fell behind" in telemetry_logs(caplog)[0].getMessage()
    finally:
        os.kill(_writer_child(w), signal.SIGCONT)
    w.close()
    written = sum(pq.ParquetFile(f).metadata.num_rows for f in tmp_path.glob("*.parquet"))
    assert written == sent - 20_000 and not w.stopped


def test_writer_process_routes_and_events_arrive_in_order(tmp_path):
    from router.telemetry.process import WriterProcess

    w = WriterProcess(TelemetryConfig(tmp_path), "A")
    ids = [w.route((f"svc/{i}", "A", 0, "client", "client", "A")) for i in range(3)]
    assert ids == [0, 1, 2] and w.route(("svc/1", "A", 0, "client", "client", "A")) == 1
    with pytest.raises(TypeError):
        w.route(("svc/bad", "A", "0", "client", "client", "A"))       # hops must be an int
    w.event(("link_up", "l1", "svc/0", "peer", T0))
    w.deliveries(_batch([(2, 0x24, 5, T0), (0, 0x26, 6, T0)], [(2, T0 + 1)]))
    w.event(("link_down", "l1", "svc/0", "peer", T0 + 2))
    w.close()
    got = lines(tmp_path)
    assert sorted((r["address"], r["outcome"], r["size"]) for r in got if r["kind"] == "delivery") == [
        ("svc/0", "released", 6), ("svc/2", "accepted", 5)]
    assert [r["event"] for r in got if r["kind"] == "event"] == ["link_up", "link_down"]
