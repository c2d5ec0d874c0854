"""Node processes: start one detached, tell whether a pid is still that node, stop a set of them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

STOP_TIMEOUT = 10.0
READY_PREFIX = "ready: node="


def spawn(config: Path, stdout: Path, stderr: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m router run CONFIG`` in its own session, with its output going to files."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "router", "run", str(config.resolve())],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                start_new_session=True, close_fds=True)
    return proc


def _reap(pid: int) -> int | None:
    """Collect a child of ours that has exited: its exit status, else None (running, or not our child)."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def is_running(pid: int, config: Path | None = None) -> bool:
    """True while ``pid`` runs (not a zombie) and, where /proc tells, is the node started with ``config``."""
    if _reap(pid) is not None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return config is None
    proc = Path(f"/proc/{pid}")
    try:
        if proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        cmdline = proc.joinpath("cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return True                      # no /proc here: trust kill(pid, 0)
    if config is None:
        return True
    return os.fsencode(str(config.resolve())) in cmdline


def is_ready(stdout: Path) -> bool:
    """The node printed its ``ready:`` line (its signal handlers are installed from then on)."""
    try:
        with open(stdout, "rb") as f:
            return any(line.startswith(READY_PREFIX.encode()) for line in f)
    except OSError:
        return False


def stop(pids: Mapping[str, int], timeout: float = STOP_TIMEOUT) -> dict[str, str]:
    """SIGTERM every pid, wait up to ``timeout`` s for all, SIGKILL the rest; node -> what happened."""
    result: dict[str, str] = {}
    for node_id, pid in pids.items():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        result[node_id] = "stopped"
    deadline = time.monotonic() + timeout
    left = dict(pids)
    while left and time.monotonic() < deadline:
        left = {n: p for n, p in left.items() if is_running(p)}
        if left:
            time.sleep(0.05)
    for node_id, pid in left.items():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        result[node_id] = "killed"
    deadline = time.monotonic() + 2.0
    while any(is_running(p) for p in left.values()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return result


def ports_in_use(host: str, ports: Iterable[tuple[int, str]]) -> list[str]:
    """The ``(port, label)`` pairs that cannot be bound on ``host`` now, as ``"port P (label)"``."""
    busy = []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port, label in ports:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                busy.append(f"port {port} ({label}): {exc.strerror or exc}")
    return busy
