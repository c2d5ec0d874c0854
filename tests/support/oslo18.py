"""oslo.messaging 18.3.1 for the tests: its venv (.venv-oslo18, built by scripts/oslo18-venv.sh when missing
or stale) and :class:`Agent`, an oslo 18.3.1 process (tests/oslo18/agent.py) driven with JSON commands.

The main venv runs oslo.messaging 14.9.3 and its own ``amqp`` driver in-process (tests/oslo); an agent runs
meshrouter's driver for 18.3.1, so a test can put both on one mesh.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.nodes import REPO_ROOT

VENV = REPO_ROOT / ".venv-oslo18"
PYTHON = VENV / "bin" / "python"
AGENT = REPO_ROOT / "tests" / "oslo18" / "agent.py"
_built: list[str] = []          # "" once built in this session, or the reason it cannot be


def ensure_venv() -> Path:
    """The venv's interpreter; builds the venv first if needed (once per test session). Fails the test
    with the builder's message when it cannot be built."""
    if not _built:
        t0 = time.monotonic()
        done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "oslo18-venv.sh")], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=900)
        _built.append("" if done.returncode == 0 else (done.stderr or done.stdout)[-3000:])
        if done.returncode == 0 and time.monotonic() - t0 > 5:
            print(f"built {VENV} in {time.monotonic() - t0:.0f} s")
    if _built[0]:
        pytest.fail(f"{VENV} (oslo.messaging 18.3.1) could not be built: {_built[0]}", pytrace=False)
    return PYTHON


def node_url(node, user: str | None = None, password: str | None = None) -> str:
    """The transport URL of one node (empty virtual host)."""
    creds = f"{user}:{password}@" if user else ""
    return f"amqp://{creds}{node.host}:{node.port}/"


class NotifyCollector:
    """An oslo notification endpoint (info, error) for the main venv's listeners: what it got, in order."""

    def __init__(self) -> None:
        self.got: queue.Queue = queue.Queue()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self.got.put(("info", publisher_id, event_type, payload))

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self.got.put(("error", publisher_id, event_type, payload))


class AgentError(AssertionError):
    pass


class Agent:
    """One oslo.messaging 18.3.1 process. ``cmd(name, **args)`` runs a command and returns its answer
    (raises :class:`AgentError` if it failed, unless ``check=False``); ``event(...)`` waits for a
    ``busy`` line (an endpoint method started)."""

    def __init__(self, tmp: Path, name: str = "agent") -> None:
        python = ensure_venv()
        self.name = name
        self.err_path = tmp / f"oslo18-{name}.stderr"
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([str(python), str(AGENT)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE,
                                         stderr=err, cwd=tmp, text=True, start_new_session=True,
                                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        self._ids = itertools.count(1)
        self._answers: dict[int, Any] = {}
        self._cond = threading.Condition()
        self.events: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"oslo18-{name}", daemon=True)
        self._reader.start()
        self.event(lambda e: e.get("event") == "ready", 60, "the agent to start")

    def _read(self) -> None:
        for line in iter(self.proc.stdout.readline, ""):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "event" in obj:
                self.events.put(obj)
            else:
                with self._cond:
                    self._answers[obj.get("id")] = obj
                    self._cond.notify_all()
        with self._cond:
            self._answers[None] = {"ok": False, "exc": "AgentDied", "error": "the agent exited"}
            self._cond.notify_all()

    def stderr_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.err_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"<{e}>"

    def cmd(self, cmd: str, wait_s: float = 90, check: bool = True, **args: Any) -> dict:
        i = next(self._ids)
        self.proc.stdin.write(json.dumps({"id": i, "cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + wait_s
        with self._cond:
            while i not in self._answers and None not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AgentError(f"agent {self.name}: no answer to {cmd} {args} within {wait_s} s; "
                                     f"stderr:\n{self.stderr_tail()}")
                self._cond.wait(left)
            out = self._answers.pop(i, None) or self._answers[None]
        if check and not out.get("ok"):
            raise AgentError(f"agent {self.name}: {cmd} {args} failed: {out.get('exc')}: {out.get('error')}\n"
                             f"{out.get('trace', '')}\nstderr:\n{self.stderr_tail()}")
        return out

    def event(self, pred, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                e = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AgentError(f"agent {self.name}: no event for {what} within {timeout} s (exit "
                                 f"{self.proc.poll()}); stderr:\n{self.stderr_tail()}") from None
            if pred(e):
                return e

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)

    def close(self) -> list[str]:
        """Clean up every oslo object, check no thread is left, end the process; the problems found."""
        problems = []
        if self.proc.poll() is None:
            try:
                out = self.cmd("cleanup", wait_s=30, check=False)
                if not out.get("ok"):
                    problems.append(f"agent {self.name} cleanup: {out.get('error')}")
                elif out.get("threads"):
                    time.sleep(1.5)
                    again = self.cmd("cleanup", wait_s=30, check=False).get("threads")
                    if again:
                        problems.append(f"agent {self.name}: threads left behind: {again}")
                self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (AgentError, OSError, subprocess.TimeoutExpired) as e:
                problems.append(f"agent {self.name} did not end cleanly: {e}")
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return problems
