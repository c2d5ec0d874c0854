"""router.telemetry: config, JSON Lines format, the writer (both formatters), rotation, sampling,
bounded memory, and failures (unwritable dir, ENOSPC, child process lost) that stop telemetry only."""

from __future__ import annotations

import errno
import io
import json
import logging
import re
import shutil
import time
from pathlib import Path

import pytest

import router.telemetry.jsonl as jsonl
from router.telemetry import TelemetryConfig, TelemetryWriter
from router.telemetry.child import HEADER, ProcessSink, serve
from router.telemetry.jsonl import Formatter, JsonlSink, RotatingFile

T0 = 1_763_770_000.25
NAME_RE = re.compile(r"^A-\d{8}T\d{6}Z-(\d{6})\.jsonl$")


def rec(i: int, address: str = "svc/orders") -> tuple:
    return (address, "A", i % 3, "client", "inter-router", "accepted", 100 + i, T0 + i, T0 + i + 0.0015)


def lines(directory: Path) -> list[dict]:
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def telemetry_logs(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "router.telemetry"]


@pytest.fixture(params=["process", "thread"])
def formatter(request) -> str:
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
                 "arrival": T0 + 1, "settled": T0 + 1.0015}
    e = json.loads(f.events([("link_up", "c1/l2", None, "peer-1", T0)]))
    assert e == {"kind": "event", "node": "A", "event": "link_up", "link": "c1/l2", "address": None,
                 "peer": "peer-1", "time": T0}


def test_strings_are_escaped_and_bad_records_skipped_and_counted():
    f = Formatter("A")
    odd = 'a"b\\c\n\u00e9/\u2603'
    good = (odd, None, 0, "client", None, "released", 5, T0, T0)
    text = f.deliveries([good, ("x", "A", "two", "client", "client", "accepted", 1, T0, T0),
                         ("x", "A", 0, "client", "client", "accepted", 1, float("nan"), T0), good])
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


def test_child_ignores_a_torn_last_frame(tmp_path):
    sink = JsonlSink(tmp_path, "A", "A-P", 1 << 20)
    import marshal

    payload = marshal.dumps([rec(1)])
    stream = io.BytesIO(HEADER.pack(ord("D"), len(payload)) + payload + HEADER.pack(ord("D"), 99) + b"abc")
    serve(sink, stream, io.BytesIO())
    sink.close()
    assert [r["size"] for r in lines(tmp_path)] == [101]


# ---- writer -------------------------------------------------------------------------------------------
def test_writer_writes_deliveries_and_events(tmp_path, formatter):
    w = TelemetryWriter(TelemetryConfig(tmp_path / "t"), "A", formatter=formatter)
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
    names = [p.name for p in (tmp_path / "t").iterdir()]
    assert len(names) == 1 and NAME_RE.match(names[0]) and names[0].startswith(w.prefix)
    assert not w._thread.is_alive() and w.dropped == 0 and not w.stopped


def test_hot_path_only_appends(tmp_path, formatter):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", formatter=formatter, flush_interval=3600)
    try:
        for i in range(10):
            w.delivery(rec(i))
        w.event(("link_up", "l1", "svc", "p", T0))
        assert w.pending == 11
        assert lines(tmp_path) == []  # nothing formatted or written by the calls themselves
    finally:
        w.close()
    assert len(lines(tmp_path)) == 11 and w.pending == 0


def test_writer_rotates(tmp_path, formatter):
    w = TelemetryWriter(TelemetryConfig(tmp_path, rotate_mb=0.01), "A", formatter=formatter)  # 10485 bytes
    for i in range(500):
        w.delivery(rec(i))
    w.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) > 5
    assert all(p.stat().st_size <= 10485 for p in files)
    assert [int(NAME_RE.match(p.name).group(1)) for p in files] == list(range(1, len(files) + 1))
    assert [r["size"] for r in lines(tmp_path)] == [100 + i for i in range(500)]


@pytest.mark.parametrize("sample, kept", [(0.25, [3, 7, 11]), (0.5, [1, 3, 5]), (0.0, []), (1.0, [0, 1, 2])])
def test_sampling_is_deterministic_and_spares_events(tmp_path, sample, kept):
    w = TelemetryWriter(TelemetryConfig(tmp_path, sample=sample), "A", formatter="thread")
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


def test_bounded_memory_drops_and_counts_with_one_log_line(tmp_path, caplog, formatter):
    w = TelemetryWriter(TelemetryConfig(tmp_path), "A", formatter=formatter, flush_interval=3600,
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


def test_unwritable_dir_stops_telemetry_with_one_line(tmp_path, caplog, formatter):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.INFO, logger="router.telemetry"):
        w = TelemetryWriter(TelemetryConfig(blocker / "telemetry"), "A", formatter=formatter)
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


def test_disk_full_stops_telemetry_with_one_line(tmp_path, caplog, monkeypatch):
    def full_open(path, mode, buffering=-1):
        return _FullDisk(io.FileIO(path, mode.replace("b", "")))

    monkeypatch.setattr(_FullDisk, "room", 3000)
    monkeypatch.setattr(jsonl, "open", full_open, raising=False)
    with caplog.at_level(logging.INFO, logger="router.telemetry"):
        w = TelemetryWriter(TelemetryConfig(tmp_path), "A", formatter="thread", flush_interval=0.05)
        for i in range(10):
            w.delivery(rec(i))
        assert w.flush()
        for i in range(100):
            w.delivery(rec(i))
        _assert_stopped_quietly(w, caplog)
    assert "No space left on device" in telemetry_logs(caplog)[0].getMessage()
    assert len(lines(tmp_path)) == 10


def test_directory_lost_mid_run_stops_the_child_with_one_line(tmp_path, caplog):
    target = tmp_path / "t"
    with caplog.at_level(logging.INFO, logger="router.telemetry"):
        w = TelemetryWriter(TelemetryConfig(target, rotate_mb=0.001), "A")  # rotates every ~5 records
        for i in range(3):
            w.delivery(rec(i))
        assert w.flush()
        shutil.move(target, tmp_path / "moved")
        target.write_text("a file where the directory was")
        for i in range(100):
            w.delivery(rec(i))
        _assert_stopped_quietly(w, caplog)
    assert "t/A-" in telemetry_logs(caplog)[0].getMessage()  # the child's reason names the file


def test_child_process_killed_stops_telemetry_with_one_line(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="router.telemetry"):
        w = TelemetryWriter(TelemetryConfig(tmp_path), "A")
        w.delivery(rec(1))
        assert w.flush()
        sink = w._sink
        assert isinstance(sink, ProcessSink)
        sink.proc.kill()
        sink.proc.wait()
        for i in range(100):
            w.delivery(rec(i))
        _assert_stopped_quietly(w, caplog)


def test_bad_formatter_name(tmp_path):
    with pytest.raises(ValueError, match="formatter"):
        TelemetryWriter(TelemetryConfig(tmp_path), "A", formatter="fast")
