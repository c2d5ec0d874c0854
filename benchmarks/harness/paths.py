"""Where the benchmarks find things, and the one exception that ends a benchmark with a message."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "benchmarks"
BUILD_DIR = BENCH_DIR / "build"
RESULTS_DIR = BENCH_DIR / "results"
VENV_PY = REPO / ".venv" / "bin" / "python"
#: the shared, router-agnostic harness: the C load generator amqpbench.c and its orchestrator run_bench.py
SHARED_HARNESS = Path(os.environ.get("MESHROUTER_BENCH_HARNESS", "/work/shared/bench"))
#: qdrouterd's reference configs (single, chain3, mesh4) and where its build script installs it
QDR_CONFIGS = SHARED_HARNESS / "qdr"
QDR_PREFIX = Path(os.environ.get("MESHROUTER_QDR_PREFIX", "/tmp/anchors/qdr"))
HOST = "127.0.0.1"


class BenchError(Exception):
    """A failure that ends the benchmark with a one-line message."""


def python_exe() -> str:
    """The project's virtualenv interpreter if there is one, else the running interpreter."""
    return str(VENV_PY) if VENV_PY.exists() else sys.executable


def qdrouterd() -> Path | None:
    """The built qdrouterd binary (QDR_PREFIX/sbin/qdrouterd), or None when it is not built."""
    exe = QDR_PREFIX / "sbin" / "qdrouterd"
    return exe if exe.exists() else None
