"""The shared C load generator (``amqpbench``, ../shared/bench) as a test client.

:func:`amqpbench` returns the built binary: ``$AMQPBENCH`` if set, else benchmarks/build/amqpbench (where
the benchmarks build it), built from the harness's ``amqpbench.c`` when missing or older than it and
Proton-C's development files (Debian's libqpid-proton11-dev) are installed. Without them the test is
skipped, saying what to install. :class:`Run` starts one ``send`` or ``recv`` and reads its ``READY``
line and its one JSON result line.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.nodes import REPO_ROOT

HARNESS_DIRS = [Path(p) for p in (os.environ.get("MESHROUTER_BENCH_HARNESS"),) if p] + [
    REPO_ROOT.parent / "shared" / "bench", Path("/work/shared/bench")]
BUILT = REPO_ROOT / "benchmarks" / "build" / "amqpbench"
PROACTOR_HEADER = Path("/usr/include/proton/proactor.h")


def amqpbench() -> Path:
    """The load generator's binary, built if needed and possible; skips the test otherwise."""
    env = os.environ.get("AMQPBENCH")
    if env:
        if not os.access(env, os.X_OK):
            pytest.skip(f"AMQPBENCH={env} is not an executable")
        return Path(env)
    source = next((d / "amqpbench.c" for d in HARNESS_DIRS if (d / "amqpbench.c").exists()), None)
    if BUILT.exists() and (source is None or BUILT.stat().st_mtime >= source.stat().st_mtime):
        return BUILT
    if source is None:
        pytest.skip("the C load generator is not built and its source (../shared/bench/amqpbench.c) is not "
                    "here: set AMQPBENCH or MESHROUTER_BENCH_HARNESS")
    if not PROACTOR_HEADER.exists() or shutil.which("gcc") is None:
        pytest.skip("the C load generator is not built and cannot be: it needs gcc and Proton-C's "
                    "development files (WITH_BENCH=1 bash scripts/system-deps.sh: libqpid-proton11-dev)")
    BUILT.parent.mkdir(parents=True, exist_ok=True)
    tmp = BUILT.with_name(f"amqpbench.{os.getpid()}.tmp")
    r = subprocess.run(["sh", str(source.parent / "build.sh"), str(tmp)], capture_output=True, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        pytest.fail(f"building the C load generator failed:\n{r.stdout}{r.stderr}")
    os.replace(tmp, BUILT)          # atomic: a concurrent run sees the old binary or the new one
    return BUILT


class Run:
    """One amqpbench process (``mode``: send or recv) with its arguments; stdout read on demand."""

    def __init__(self, exe: Path, mode: str, url: str, *args: str) -> None:
        self.cmd = [str(exe), mode, "--url", url, *args]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait for its READY line (its links are attached)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""     # amqpbench flushes READY on its own line
        if line.strip() != "READY":
            self.kill()
            pytest.fail(f"{' '.join(self.cmd)}: no READY line (got {line!r}); "
                        f"stderr: {self.proc.stderr.read()}")

    def result(self, timeout: float = 60.0) -> dict:
        """Its JSON result once it has exited (killed and failed after ``timeout``)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{' '.join(self.cmd)} did not finish within {timeout:.0f} s")
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if self.proc.returncode != 0 or not lines:
            pytest.fail(f"{' '.join(self.cmd)} exited {self.proc.returncode}; stdout {out!r}; stderr {err!r}")
        return json.loads(lines[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
