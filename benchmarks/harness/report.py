"""Reporting: Markdown tables in BENCHMARKS.md's shape (each figure with its command, date and machine),
and JSON results under benchmarks/results/."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.paths import REPO, RESULTS_DIR
from harness.sample import load_average


def fmt(v: float | None, spec: str = ".0f") -> str:
    """A number for a table, '–' when absent."""
    return "–" if v is None else format(v, spec)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A Markdown table; ``align`` has one letter per column, ``l`` or ``r`` (default: the first column
    left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def host_info() -> dict[str, Any]:
    """Where the numbers were measured."""
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next((x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines()
                    if x.startswith("model name")), "")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
            "python": platform.python_version(), "git_rev": rev.stdout.strip() or None,
            "load": [round(x, 2) for x in load_average()]}


def machine(load: bool = True) -> str:
    """The machine in a few words, for a table's row: ``2 × Intel Xeon ..., load 1.2`` (``load``: with
    the 1-minute load average)."""
    h = host_info()
    text = f"{h['cpus']} × {h['cpu_model'] or 'CPU'}"
    return f"{text}, load {h['load'][0]:.1f}" if load else text


def command_line() -> str:
    """How this script was invoked, as a shell command (paths relative to the working directory)."""
    exe = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable
    argv = [os.path.relpath(sys.argv[0]) if os.path.isabs(sys.argv[0]) else sys.argv[0], *sys.argv[1:]]
    return shlex.join([exe, *argv])


def stamp() -> str:
    """UTC time for file names: 20261202-034501."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def save_result(kind: str, data: dict[str, Any], label: str = "") -> Path:
    """Write ``benchmarks/results/<stamp>-<kind>[-label].json`` with the command, UTC date and host."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{stamp()}-{kind}{'-' + label if label else ''}.json"
    record = {"command": command_line(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "host": host_info(), **data}
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path
