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
            "C" if i % 2 else None)


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
                 "arrival": T0 + 1, "settled": T0 + 1.0015, "egress": "C"}
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
    assert tuple(table.column_names) == ("kind", "node", *DELIVERY_FIELDS[:-1], "egress", "event", "link",
                                         "peer", "time")
    types = {f.name: str(f.type) for f in pq.read_schema(path)}
    assert types["hops"] == types["size"] == "int64" and types["arrival"] == types["time"] == "double"
    assert pq.ParquetFile(path).schema.column(2).physical_type == "BYTE_ARRAY"  # address: a string
    rows = table.to_pylist()
    assert rows[0]["kind"] == "event" and rows[0]["event"] == "link_up" and rows[0]["size"] is None
    assert rows[1] == {"kind": "delivery", "node": "A", "address": "svc/orders", "ingress": "A", "hops": 1,
                       "in_link": "client", "out_link": "inter-router", "outcome": "accepted", "size": 101,
                       "arrival": T0 + 1, "settled": T0 + 1.0015, "egress": "C", "event": None,
                       "link": None, "peer": None, "time": None}


def test_compact_records_routes_and_outcome_codes(tmp_path):
    from router.telemetry import DROPPED, PRESETTLED

    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", flush_interval=3600)
    r1 = w.route(("svc/x", "A", 0, "client", "client", "A"))
    r2 = w.route(("svc/y", "B", 2, "inter-router", None, None))
    assert w.route(("svc/x", "A", 0, "client", "client", "A")) == r1 != r2 and len(w.routes) == 2
    with pytest.raises(TypeError):
        w.route(("svc/z", "A", "two", "client", "client", None))
    put = w.putter()
    assert put == w._deliveries.append  # no sampling, room: the list's own append
    for code in (0x24, 0x25, 0x26, 0x27, PRESETTLED, DROPPED, 0, 99, 4096):
        put((r1 if code != DROPPED else r2, code, 7, T0, T0 + 0.5))
    w.put((r1, 0x24, "big", T0, T0))  # wrong type: skipped and counted
    w.close()
    got = lines(tmp_path)
    assert [r["outcome"] for r in got] == ["accepted", "rejected", "released", "modified", "presettled",
                                           "dropped", "released", "released", "released"]
    assert got[5]["address"] == "svc/y" and got[5]["hops"] == 2 and got[5]["egress"] is None
    assert all(r["address"] == "svc/x" and r["egress"] == "A" for i, r in enumerate(got) if i != 5)
    assert w.bad == 1 and not w.stopped
    assert w.putter()(("anything",)) is None  # closed: a no-op


@pytest.mark.parametrize("sample", [0.5, 1.0])
def test_putter_respects_sampling_and_bounds(tmp_path, sample):
    w = TelemetryWriter(TelemetryConfig(tmp_path, sample=sample), "A", flush_interval=3600, max_pending=100)
    rid = w.route(("svc/x", "A", 0, "client", "client", "A"))
    put = w.putter()
    for i in range(60):
        put((rid, 0x24, i, T0, T0))
    assert w.pending == 60 * sample
    put = w.putter()  # past half of max_pending (or sampling): the checking put
    assert put == w.put
    for i in range(200):
        put((rid, 0x24, i, T0, T0))
    assert w.pending == 100 and w.dropped == 60 * sample + 200 * sample - 100
    w.close()
