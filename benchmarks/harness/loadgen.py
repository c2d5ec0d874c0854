"""The C load generator of the shared harness (amqpbench, built into benchmarks/build/) and its
orchestrator run_bench.py: building it, one-shot runs, long-running clients, and run_bench.py runs
watched by a watchdog that stops them when the router under test dies."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.paths import BUILD_DIR, SHARED_HARNESS, BenchError
from harness.procs import kill_group


def ensure_client(harness: Path = SHARED_HARNESS) -> Path:
    """Build the C load generator into benchmarks/build/ if missing or older than its sources."""
    out = BUILD_DIR / "amqpbench"
    sources = [harness / "amqpbench.c", harness / "build.sh"]
    for s in sources:
        if not s.exists():
            raise BenchError(f"harness file not found: {s} (use --harness DIR)")
    if out.exists() and out.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
        return out
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    print(f"building {out} ...", flush=True)
    r = subprocess.run(["sh", str(harness / "build.sh"), str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"building amqpbench failed (is libqpid-proton11-dev installed?):\n"
                         f"{r.stdout}{r.stderr}")
    return out


def run_amqpbench(exe: Path, *args: str) -> tuple[dict, float]:
    """Run one amqpbench to its end; returns its JSON result and its own CPU seconds."""
    proc = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"amqpbench {' '.join(args)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return json.loads(lines[-1]), usage.ru_utime + usage.ru_stime


@dataclass
class Client:
    """One long-running amqpbench process (own session, so its whole group can be killed)."""

    name: str
    proc: subprocess.Popen[str]

    def wait_ready(self, timeout: float) -> None:
        """Wait for its READY line (receivers: link attached)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise BenchError(f"{self.name} exited before READY: {self.stderr_text()}")
            if line.strip() == "READY":
                return
        raise BenchError(f"{self.name}: no READY after {timeout:.0f} s")

    def stderr_text(self) -> str:
        """What it wrote on stderr (after it exited)."""
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            return (self.proc.communicate(timeout=2)[1] or "").strip()[-500:]
        return ""

    def result(self, timeout: float) -> dict[str, Any]:
        """Its JSON result line; after timeout it is asked to stop (SIGTERM: it prints what it has)."""
        timed_out = False
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                out, err = self.proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                kill_group(self.proc.pid)
                out, err = self.proc.communicate()
        lines = [x for x in (out or "").splitlines() if x.startswith("{")]
        if not lines:
            raise BenchError(f"{self.name}: no result (rc={self.proc.returncode}): "
                             f"{(err or '').strip()[-500:]}")
        r: dict[str, Any] = json.loads(lines[-1])
        r["rc"], r["timed_out"] = self.proc.returncode, timed_out
        if (err or "").strip():
            r["stderr"] = err.strip()[-300:]
        return r

    def stop(self) -> None:
        """Kill it and its group if it still runs."""
        if self.proc.poll() is None:
            kill_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            self.proc.communicate(timeout=2)


def start_client(binary: Path, mode: str, url: str, args: list[str], name: str) -> Client:
    """Start `amqpbench MODE --url URL ARGS...`."""
    cmd = [str(binary), mode, "--url", url, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    return Client(name, proc)


@contextlib.contextmanager
def clients() -> Iterator[list[Client]]:
    """A list to put clients in; every one still running is killed on the way out."""
    made: list[Client] = []
    try:
        yield made
    finally:
        for c in made:
            c.stop()


def run_bench_command(send_url: str, recv_url: str, label: str, workloads: str, repeat: int, out: Path,
                      pids: list[int] | None = None, extra: list[str] | None = None,
                      harness: Path = SHARED_HARNESS) -> list[str]:
    """The shared run_bench.py command line for one target (``pids``: the routers to sample)."""
    cmd = [sys.executable, str(harness / "run_bench.py"), "--send-url", send_url, "--recv-url", recv_url,
           "--label", label, "--workloads", workloads, "--repeat", str(repeat), "--out", str(out)]
    if pids:
        cmd += ["--pids", ",".join(map(str, pids))]
    return cmd + list(extra or [])


def run_harness(cmd: list[str], client: Path, alive: Callable[[], bool]) -> dict:
    """Run run_bench.py, echo its progress, stop it if the router dies; return its JSON results."""
    out = Path(cmd[cmd.index("--out") + 1])
    env = dict(os.environ, AMQPBENCH=str(client))
    print("$ " + shlex.join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    stop, router_died = threading.Event(), threading.Event()

    def watchdog() -> None:
        while not stop.wait(0.5):
            if not alive():
                router_died.set()
                kill_group(proc.pid)
                return

    watcher = threading.Thread(target=watchdog, daemon=True)
    watcher.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print("  " + line, end="", flush=True)
        proc.wait()
    finally:
        stop.set()
        watcher.join()
        kill_group(proc.pid)  # also clients run_bench.py left behind after a failed run
    if router_died.is_set():
        raise BenchError("the router exited during the benchmark")
    if proc.returncode != 0 or not out.exists():
        raise BenchError(f"run_bench.py failed with exit code {proc.returncode}")
    return json.loads(out.read_text())
