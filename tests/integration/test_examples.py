"""examples/amqp_tool.py against a real node, the way the README's tour runs it: as subprocesses."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.ports import free_port

TOOL = Path(__file__).resolve().parents[2] / "examples" / "amqp_tool.py"
TIMEOUT = 20.0  # seconds, for every subprocess


class Tool:
    """One running ``amqp_tool.py`` whose stdout lines can be waited for."""

    def __init__(self, url: str, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(TOOL), "--url", url, *args], text=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, text: str, timeout: float = TIMEOUT) -> None:
        """Wait until a stdout line contains ``text``."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            left = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(left, 0.0))
            except queue.Empty:
                line = None
            if line is None:
                pytest.fail(f"no line with {text!r} within {timeout:.0f}s; stdout so far: {self.lines!r}")
            self.lines.append(line)

    def finish(self, timeout: float = TIMEOUT) -> tuple[int, list[str], str]:
        """Wait for the exit: (exit code, all stdout lines, stderr)."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"{self.proc.args[3:]} did not exit within {timeout:.0f}s; stdout: {self.lines!r}")
        assert self.proc.stderr is not None
        stderr = self.proc.stderr.read()
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return rc, self.lines, stderr


@pytest.fixture
def tool(node):
    """``tool(*args)`` starts amqp_tool.py against the node; still-running ones are killed at teardown."""
    started: list[Tool] = []

    def start(*args: str) -> Tool:
        t = Tool(node.url, *args)
        started.append(t)
        return t

    yield start
    for t in started:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait(5)


def run(tool, *args: str) -> tuple[int, list[str], str]:
    """Run amqp_tool.py to completion."""
    return tool(*args).finish()


def test_info_shows_router_identity(tool, node):
    rc, out, err = run(tool, "info")
    assert rc == 0, err
    assert f"container-id: {node.node_id}" in out
    assert "product: meshrouter" in out
    assert any(line.startswith("version: ") and "(not sent)" not in line for line in out), out
    assert any("ANONYMOUS-RELAY" in line for line in out if line.startswith("offered-capabilities:")), out


def test_send_waits_for_credit_until_a_receiver_comes(tool):
    sender = tool("send", "tour/queue", "--count", "3", "--timeout", "15")
    sender.wait_for_line("waiting for credit...")
    assert sender.proc.poll() is None, "send gave up without a consumer"

    rc, got, err = run(tool, "recv", "tour/queue", "--count", "3")
    assert rc == 0, err
    assert got == ["hello 1", "hello 2", "hello 3"]

    rc, out, err = sender.finish()
    assert rc == 0, err
    assert out == ["waiting for credit...", "#1 ACCEPTED", "#2 ACCEPTED", "#3 ACCEPTED"]


@pytest.mark.parametrize("outcome, expected", [
    ("reject", "#1 REJECTED app:rejected: rejected by amqp_tool"),
    ("release", "#1 RELEASED"),
    ("modify", "#1 MODIFIED delivery_failed=True undeliverable_here=False"),
])
def test_receiver_outcome_reaches_sender(tool, outcome, expected):
    address = f"tour/{outcome}"
    receiver = tool("recv", address, "--count", "1", "--outcome", outcome)
    rc, out, err = run(tool, "send", address, "--body", "please " + outcome, "--timeout", "15")
    assert rc == 0, err
    assert out[-1] == expected, out

    rc, got, err = receiver.finish()
    assert rc == 0, err
    assert got == ["please " + outcome]


def test_presettled_send(tool):
    receiver = tool("recv", "tour/presettled", "--count", "2")
    rc, out, err = run(tool, "send", "tour/presettled", "--count", "2", "--presettled", "--timeout", "15")
    assert rc == 0, err
    assert out[-2:] == ["#1 SENT presettled", "#2 SENT presettled"]
    rc, got, err = receiver.finish()
    assert rc == 0, err
    assert got == ["hello 1", "hello 2"]


def test_rpc_round_trips(tool):
    server = tool("rpc-server", "tour/rpc", "--count", "3")
    rc, out, err = run(tool, "rpc-call", "tour/rpc", "ping", "--count", "3", "--timeout", "15")
    assert rc == 0, err
    assert re.fullmatch(r"reply-to: amqp:/_topo/0/A/temp\.[A-Za-z0-9+_]{15}", out[0]), out
    replies = [line for line in out if re.fullmatch(r"#\d echo: ping \(\d+\.\d ms\)", line)]
    assert [r.split()[0] for r in replies] == ["#1", "#2", "#3"], out

    rc, served, err = server.finish()
    assert rc == 0, err
    reply_to = out[0].removeprefix("reply-to: ")
    assert served == [f"#{n} ping (id req-{n}, reply to {reply_to})" for n in (1, 2, 3)]


def test_send_timeout_exits_1(tool):
    rc, out, err = run(tool, "send", "tour/nobody", "--timeout", "1")
    assert rc == 1
    assert out == ["waiting for credit..."]
    assert "timeout after 1s: 0 of 1 messages settled" in err


def test_rpc_call_timeout_exits_1(tool):
    rc, out, err = run(tool, "rpc-call", "tour/no-server", "ping", "--timeout", "1")
    assert rc == 1
    assert "timeout after 1s: 0 of 1 replies received" in err


@pytest.mark.parametrize("command", [("recv", "tour/forever"), ("rpc-server", "tour/forever-rpc")])
def test_ctrl_c_closes_politely(tool, node, command):
    running = tool(*command)
    if command[0] == "recv":
        assert run(tool, "send", "tour/forever", "--timeout", "15")[0] == 0
        running.wait_for_line("hello 1")
    else:
        assert run(tool, "rpc-call", "tour/forever-rpc", "ping", "--timeout", "15")[0] == 0
        running.wait_for_line("#1 ping")
    running.proc.send_signal(signal.SIGINT)
    rc, _, err = running.finish()
    assert rc == 130
    assert err == "amqp_tool: interrupted\n"
    assert "aborted" not in node.stderr_tail(200), "the tool dropped the connection instead of closing it"


def test_connection_refused_exits_1():
    port = free_port()  # nobody listens on it
    proc = subprocess.run([sys.executable, str(TOOL), "--url", f"amqp://127.0.0.1:{port}", "info"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 1
    assert "Connection refused" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
