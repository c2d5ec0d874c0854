"""Node processes: write a config, start ``python -m router run CONFIG``, stop or kill it.

:func:`launch` writes the YAML config, starts the node (optionally under a command prefix such as
``ip netns exec NS``), reads its stdout until the ``ready:`` line and returns a :class:`NodeProcess`
(URL of its first plain AMQP listener, the stdout lines read so far, the file its stderr goes to).
:class:`NodeSet` starts the nodes of one test (or one package) with :func:`node_config`'s defaults and
stops them at the end with :func:`stop`, which reports a node that died, hung or exited non-zero.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.ports import LISTENING_RE

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


def _node_env() -> dict[str, str]:
    """A node's environment: unbuffered output, and a Python traceback of every thread on stderr if it
    crashes (faulthandler: a segfault in the C layer then shows where the Python code was)."""
    return dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")

# the test prefixes of a default node
DEFAULT_RULES = (
    ("multicast", "multicast"),
    ("closest", "closest"),
    ("balanced", "balanced"),
)
# those of config/node.yaml (the oslo.messaging prefixes among them) plus the test prefixes
MESH_RULES = (
    ("openstack.org/om/rpc/multicast", "multicast"),
    ("openstack.org/om/rpc/unicast", "closest"),
    ("openstack.org/om/rpc/anycast", "balanced"),
    ("openstack.org/om/notify", "balanced"),
    ("multicast", "multicast"),
    ("closest", "closest"),
    ("balanced", "balanced"),
)

READY_RE = re.compile(r"^ready: node=(?P<node>\S+) pid=(?P<pid>\d+)\s*$")


def shipped_rules() -> tuple[tuple[str, str], ...]:
    """The address rules of config/node.yaml, exactly as shipped."""
    cfg = yaml.safe_load((REPO_ROOT / "config" / "node.yaml").read_text())
    return tuple((r["prefix"], r["distribution"]) for r in cfg["addresses"]["rules"])


@dataclass
class NodeProcess:
    """A running (or finished) node process."""

    node_id: str
    proc: subprocess.Popen
    url: str
    host: str
    port: int
    config_path: Path
    stderr_path: Path
    stdout_lines: list[str] = field(default_factory=list)
    stopped: bool = False             # stopped or killed on purpose: its end is not a failure

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


def node_config(node_id: str, *, rules: Sequence[tuple[str, str]] = DEFAULT_RULES,
                default_distribution: str = "balanced", link_capacity: int = 250, idle_timeout: float = 16,
                log_level: str = "info", extra: dict | None = None) -> dict:
    """A node's config: one client listener on 127.0.0.1 (a free port), the address ``rules``; the
    sections of ``extra`` replace those (a dict section is merged into the default one)."""
    cfg: dict[str, Any] = {
        "node": {"id": node_id, "link_capacity": link_capacity, "idle_timeout": idle_timeout,
                 "log_level": log_level},
        "listeners": [{"host": "127.0.0.1", "port": 0, "role": "normal"}],
        "addresses": {"default": default_distribution,
                      "rules": [{"prefix": p, "distribution": d} for p, d in rules]},
    }
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    return cfg


def _reader(stream: Any, q: queue.Queue) -> None:
    """Queue the node's stdout lines until it exits, then close the pipe (a pipe per node started, left
    open, is how the suite once ran out of descriptors select() can take)."""
    with stream:
        for line in iter(stream.readline, ""):
            q.put(line.rstrip("\n"))
    q.put(None)


def launch(cfg: dict, tmp: Path, index: int, prefix: Sequence[str] = ()) -> NodeProcess:
    """Write ``cfg`` to ``tmp`` and run the node (``prefix``: a command to run it under); return once it
    is ready, or fail the test with its output."""
    node_id = cfg["node"]["id"]
    cfg_path = tmp / f"node-{node_id}-{index}.yaml"
    err_path = tmp / f"node-{node_id}-{index}.stderr"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cmd = [*prefix, sys.executable, "-m", "router", "run", str(cfg_path)]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=REPO_ROOT, env=_node_env(), text=True,
                                start_new_session=True)
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
            line = q.get(timeout=left) if left > 0 else None
        except queue.Empty:
            line = None
        if line is None:
            break
        lines.append(line)
        m = LISTENING_RE.match(line)
        if m and m["scheme"] == "amqp" and url is None:
            url, host, port = m["url"], m["host"], int(m["port"])
        m = READY_RE.match(line)
        if m:
            ready = True
            if m["node"] != node_id or (not prefix and int(m["pid"]) != proc.pid):
                kill(proc)
                pytest.fail(f"node ready line {line!r} does not match node id {node_id!r} / pid {proc.pid}")
    node = NodeProcess(node_id, proc, url or "", host or "", port, cfg_path, err_path, lines)
    if not ready or url is None:
        rc = proc.poll()
        why = f"exited with code {rc}" if rc is not None else \
            f"no ready/listening line within {START_TIMEOUT:.0f}s"
        kill(proc)
        pytest.fail(f"node {node_id} did not start ({why}); stdout: {lines!r}\n"
                    f"config:\n{cfg_path.read_text()}\nstderr tail:\n{node.stderr_tail()}")
    return node


def spawn(cfg: dict, tmp: Path, index: int) -> NodeProcess:
    """Write ``cfg`` to ``tmp`` and start the node without waiting for it (start-up timing); its first
    listener must name its port. Its stdout goes to a file; :func:`stop` it as any other."""
    node_id = cfg["node"]["id"]
    cfg_path = tmp / f"node-{node_id}-{index}.yaml"
    err_path = tmp / f"node-{node_id}-{index}.stderr"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    host, port = cfg["listeners"][0]["host"], cfg["listeners"][0]["port"]
    with open(err_path, "wb") as err, open(tmp / f"node-{node_id}-{index}.stdout", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "router", "run", str(cfg_path)], stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL, cwd=REPO_ROOT, start_new_session=True,
                                env=_node_env())
    return NodeProcess(node_id, proc, f"amqp://{host}:{port}", host, port, cfg_path, err_path)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL a process (if it still runs) and reap it."""
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def kill9(node: NodeProcess) -> None:
    """SIGKILL a node on purpose (its end is then not counted as a failure)."""
    node.stopped = True
    os.kill(node.pid, signal.SIGKILL)
    node.proc.wait(5)


def stop(node: NodeProcess) -> list[str]:
    """SIGTERM the node (unless the test stopped it on purpose); return the problems found."""
    problems = []
    rc = node.proc.poll()
    if rc is not None and node.stopped:
        return problems
    if rc is not None:
        problems.append(f"node {node.node_id} (pid {node.pid}) died during the test with exit code {rc}")
        return problems
    node.stopped = True
    node.proc.send_signal(signal.SIGTERM)
    try:
        rc = node.proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill(node.proc)
        problems.append(f"node {node.node_id} did not stop within {STOP_TIMEOUT:.0f}s of SIGTERM")
        return problems
    if rc != 0:
        problems.append(f"node {node.node_id} exited with code {rc} after SIGTERM (expected 0)")
    return problems


def stop_all(nodes: Sequence[NodeProcess]) -> str | None:
    """Stop every node; None if all went well, else the problems and every node's stderr tail."""
    problems = [p for n in nodes for p in stop(n)]
    if not problems:
        return None
    tails = "\n".join(f"--- node {n.node_id} stderr tail:\n{n.stderr_tail()}" for n in nodes)
    return "; ".join(problems) + "\n" + tails


class NodeSet:
    """The nodes started for one test (or one package), in ``tmp``; :meth:`start` is the
    ``node_factory`` fixture."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.nodes: list[NodeProcess] = []

    def start(self, node_id: str = "A", *, link_capacity: int = 250, idle_timeout: float = 16,
              rules: Sequence[tuple[str, str]] = DEFAULT_RULES, default_distribution: str = "balanced",
              log_level: str = "info", extra: dict | None = None) -> NodeProcess:
        """Start a node (see :func:`node_config`) and return it once it is ready."""
        cfg = node_config(node_id, rules=rules, default_distribution=default_distribution,
                          link_capacity=link_capacity, idle_timeout=idle_timeout, log_level=log_level,
                          extra=extra)
        n = launch(cfg, self.tmp, len(self.nodes))
        self.nodes.append(n)
        return n

    def stop_all(self) -> str | None:
        """:func:`stop_all` of every node started here."""
        return stop_all(self.nodes)
