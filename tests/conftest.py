"""Shared fixtures: real node processes for the integration tests.

``node_factory(**overrides)`` writes a YAML config into the test's tmp_path, starts
``python -m router run CONFIG``, waits for its ``ready:`` line and returns a :class:`NodeProcess`.
At teardown every client is closed, then the node gets SIGTERM; the test fails if the node died
during the test, does not stop within 10 s or does not exit 0.  The node's stderr goes to a file
whose tail is attached to the report of a failed test.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0

DEFAULT_RULES = (
    ("multicast", "multicast"),
    ("closest", "closest"),
    ("balanced", "balanced"),
)

LISTENING_RE = re.compile(r"^listening: role=(?P<role>\S+) url=(?P<url>amqp://(?P<host>[^:\s]+):(?P<port>\d+))\s*$")
READY_RE = re.compile(r"^ready: node=(?P<node>\S+) pid=(?P<pid>\d+)\s*$")


@dataclass
class NodeProcess:
    node_id: str
    proc: subprocess.Popen
    url: str
    host: str
    port: int
    config_path: Path
    stderr_path: Path
    stdout_lines: list[str] = field(default_factory=list)
    stopped: bool = False

    def __repr__(self) -> str:
        return f"<node {self.node_id} pid={self.proc.pid} {self.url}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError as e:
            return f"<cannot read {self.stderr_path}: {e}>"
        return "\n".join(text.splitlines()[-lines:])

    def rss(self) -> int:
        from tests.integration.helpers import rss_bytes

        return rss_bytes(self.proc.pid)


def _write_config(path: Path, node_id: str, rules, default_distribution: str, link_capacity: int,
                  idle_timeout: float, log_level: str, port: int, extra: dict | None) -> None:
    cfg = {
        "node": {
            "id": node_id,
            "link_capacity": link_capacity,
            "idle_timeout": idle_timeout,
            "log_level": log_level,
        },
        "listeners": [{"host": "127.0.0.1", "port": port, "role": "normal"}],
        "addresses": {
            "default": default_distribution,
            "rules": [{"prefix": p, "distribution": d} for p, d in rules],
        },
    }
    if extra:
        for k, v in extra.items():
            if isinstance(v, dict) and isinstance(cfg.get(k), dict):
                cfg[k].update(v)
            else:
                cfg[k] = v
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def _reader(stream, q: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        q.put(line.rstrip("\n"))
    q.put(None)


def _start_node(tmp_path: Path, index: int, node_id: str, rules, default_distribution: str,
                link_capacity: int, idle_timeout: float, log_level: str, extra: dict | None) -> NodeProcess:
    cfg_path = tmp_path / f"node-{node_id}-{index}.yaml"
    err_path = tmp_path / f"node-{node_id}-{index}.stderr"
    _write_config(cfg_path, node_id, rules, default_distribution, link_capacity, idle_timeout, log_level,
                  0, extra)
    cmd = [sys.executable, "-m", "router", "run", str(cfg_path)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    err = open(err_path, "wb")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=REPO_ROOT, env=env, text=True, start_new_session=True)
    finally:
        err.close()
    q: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, q), daemon=True).start()

    lines: list[str] = []
    url = host = None
    port = 0
    ready = False
    deadline = time.monotonic() + START_TIMEOUT
    while not ready:
        left = deadline - time.monotonic()
        try:
            line = q.get(timeout=max(0.0, left)) if left > 0 else None
        except queue.Empty:
            line = None
        if line is None:
            break
        lines.append(line)
        m = LISTENING_RE.match(line)
        if m and url is None:
            url, host, port = m["url"], m["host"], int(m["port"])
        m = READY_RE.match(line)
        if m:
            ready = True
            if m["node"] != node_id or int(m["pid"]) != proc.pid:
                _kill(proc)
                pytest.fail(f"node ready line {line!r} does not match node id {node_id!r} / pid {proc.pid}")
    node = NodeProcess(node_id, proc, url or "", host or "", port, cfg_path, err_path, lines)
    if not ready or url is None:
        rc = proc.poll()
        why = f"exited with code {rc}" if rc is not None else \
            f"no ready/listening line within {START_TIMEOUT:.0f}s"
        _kill(proc)
        pytest.fail(f"node {node_id} did not start ({why}); stdout: {lines!r}\n"
                    f"config:\n{cfg_path.read_text()}\nstderr tail:\n{node.stderr_tail()}")
    return node


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def _stop(node: NodeProcess) -> list[str]:
    """SIGTERM the node; return the problems found."""
    problems = []
    rc = node.proc.poll()
    if rc is not None and node.stopped:      # the test stopped or killed it on purpose
        return problems
    if rc is not None:
        problems.append(f"node {node.node_id} (pid {node.pid}) died during the test with exit code {rc}")
        return problems
    node.stopped = True
    node.proc.send_signal(signal.SIGTERM)
    try:
        rc = node.proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill(node.proc)
        problems.append(f"node {node.node_id} did not stop within {STOP_TIMEOUT:.0f}s of SIGTERM")
        return problems
    if rc != 0:
        problems.append(f"node {node.node_id} exited with code {rc} after SIGTERM (expected 0)")
    return problems


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    nodes = getattr(item, "_meshrouter_nodes", None)
    if nodes and report.failed:
        for n in nodes:
            report.sections.append((f"node {n.node_id} stderr (tail, {report.when})", n.stderr_tail()))


@pytest.fixture
def node_factory(request, tmp_path):
    """Start nodes: ``node_factory(node_id="A", link_capacity=250, idle_timeout=16, rules=...,
    default_distribution="balanced", log_level="info", extra=None)``."""
    from tests.integration import helpers

    nodes: list[NodeProcess] = []
    request.node._meshrouter_nodes = nodes

    def factory(node_id: str = "A", *, link_capacity: int = 250, idle_timeout: float = 16,
                rules=DEFAULT_RULES, default_distribution: str = "balanced", log_level: str = "info",
                extra: dict | None = None) -> NodeProcess:
        n = _start_node(tmp_path, len(nodes), node_id, rules, default_distribution, link_capacity,
                        idle_timeout, log_level, extra)
        nodes.append(n)
        return n

    yield factory

    helpers.close_all()
    problems = []
    for n in nodes:
        problems += _stop(n)
    if problems:
        tails = "\n".join(f"--- node {n.node_id} stderr tail:\n{n.stderr_tail()}" for n in nodes)
        pytest.fail("; ".join(problems) + "\n" + tails, pytrace=False)


@pytest.fixture
def node(node_factory):
    """One default node: multicast/closest/balanced prefixes, default balanced, capacity 250, idle 16 s."""
    return node_factory()


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    helpers = sys.modules.get("tests.integration.helpers")
    if helpers is not None:
        helpers.close_all()
