"""`meshrouter analyze --follow`: Spark Structured Streaming over a telemetry directory while nodes
write into it; the console table and live.html follow the traffic."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import known_traffic
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(600)
CAPACITY = 50


def live_messages(page: Path, address: str) -> int | None:
    """Messages shown for `address` in live.html (None: not shown yet)."""
    try:
        text = page.read_text()
    except OSError:
        return None
    m = re.search(rf"<tr><td>{re.escape(address)}</td><td>([\d,]+)</td>", text)
    return int(m.group(1).replace(",", "")) if m else None


def stop(node) -> None:
    node.proc.terminate()                               # a clean stop completes the writer's file
    node.proc.wait(20)
    node.stopped = True


def test_follow_refreshes_while_nodes_write(node_factory, tmp_path):
    tdir, out = tmp_path / "telemetry", tmp_path / "live"
    tdir.mkdir()
    follower = subprocess.Popen(
        [sys.executable, "-m", "router", "analyze", "--follow", str(tdir), "--out", str(out),
         "--master", "local[2]", "--refresh", "2", "--duration", "400"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    try:
        page = out / "live.html"
        a = node_factory("A", link_capacity=CAPACITY, extra={"telemetry": {"dir": str(tdir)}})
        first = known_traffic.run(a, CAPACITY)
        stop(a)
        wait_until(lambda: live_messages(page, "tel/s") == first[("tel/s", "accepted")], 180,
                   "live.html showing the first node's tel/s traffic")
        assert live_messages(page, "tel/a") == 20 and live_messages(page, "tel/none") == 9
        b = node_factory("B", link_capacity=CAPACITY, extra={"telemetry": {"dir": str(tdir)}})
        known_traffic.run(b, CAPACITY)
        stop(b)
        wait_until(lambda: live_messages(page, "tel/a") == 40, 180, "live.html adding the second node's")
        assert "http-equiv='refresh' content='2'" in page.read_text()
    finally:
        if follower.poll() is None:
            os.kill(follower.pid, signal.SIGINT)          # Ctrl-C to the command (not to its JVM)
        stdout, stderr = follower.communicate(timeout=120)
    assert follower.returncode == 0, stderr[-3000:]
    tables = stdout.split("-- ")
    assert len(tables) >= 3 and "refreshes; last view" in stdout, stdout[-3000:]
    assert re.search(r"^tel/a\s+40\s", stdout, re.M), stdout[-3000:]
