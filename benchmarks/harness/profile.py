"""Profiling a running process with py-spy: flamegraphs and collapsed stacks, and the top functions by
self time from the collapsed file (aggregated over line numbers)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.paths import REPO, BenchError, python_exe
from harness.procs import spawn, stop_process, tail, wait_for_lines


def ensure_py_spy() -> Path:
    """py-spy from the virtualenv, pip-installed there if missing."""
    exe = Path(python_exe()).parent / "py-spy"
    if exe.exists():
        return exe
    found = shutil.which("py-spy")
    if found:
        return Path(found)
    print("installing py-spy into the virtualenv ...", flush=True)
    subprocess.run([python_exe(), "-m", "pip", "install", "-q", "py-spy"], check=True)
    if not exe.exists():
        raise BenchError("py-spy not found after pip install")
    return exe


@contextlib.contextmanager
def py_spy(pid: int, out: Path, fmt_name: str, a: Any, log_dir: Path) -> Iterator[None]:
    """Attach `py-spy record` to pid for the duration of the with-block; the file is written on exit.
    ``a``: the command line's ``profile_rate`` (samples/s) and ``native`` (also C frames)."""
    cmd = [str(ensure_py_spy()), "record", "--pid", str(pid), "--rate", str(a.profile_rate), "--format",
           fmt_name, "--full-filenames", "--output", str(out)] + (["--native"] if a.native else [])
    print("$ " + shlex.join(cmd), flush=True)
    proc, log, err = spawn(cmd, log_dir, f"py-spy-{fmt_name}")
    try:
        wait_for_lines("py-spy", proc, log, err, [r"py-spy> Sampling process"], 15)
        yield
    finally:
        stop_process(proc, signal.SIGINT, timeout=60)  # Ctrl-C: py-spy stops sampling and writes the file
    if not out.exists():
        raise BenchError(f"py-spy wrote no {out.name}:\n{tail(log)}\n{tail(err)}")


def short_path(path: str) -> str:
    """A file name relative to the repo, site-packages or the stdlib directory; else its base name."""
    for prefix in ("site-packages/", "dist-packages/", f"{REPO}/", f"python{sys.version_info[0]}."):
        i = path.find(prefix)
        if i >= 0:
            rest = path[i + len(prefix):]
            return rest.split("/", 1)[1] if prefix.startswith("python") and "/" in rest else rest
    return os.path.basename(path)


def split_frame(frame: str) -> str:
    """'handler (/repo/router/x.py:12)' -> 'handler (router/x.py)': aggregate over line numbers."""
    m = re.fullmatch(r"(.*) \((.*?)(?::\d+)?\)", frame)
    return f"{m.group(1)} ({short_path(m.group(2))})" if m else frame


def top_functions(collapsed: Path, n: int = 25) -> tuple[int, list[tuple[str, int, int]]]:
    """(total samples, [(function, self samples, inclusive samples)]) from a py-spy raw file."""
    self_c: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [split_frame(f) for f in stack.split(";")]
        k = int(count)
        total += k
        self_c[frames[-1]] += k
        for f in set(frames):
            incl_c[f] += k
    return total, [(f, c, incl_c[f]) for f, c in self_c.most_common(n)]


def top_table(total: int, top: list[tuple[str, int, int]]) -> str:
    """The top self-time functions as a Markdown table."""
    lines = ["| # | self % | incl % | function (file) |", "|---:|---:|---:|---|"]
    for i, (f, s, inc) in enumerate(top, 1):
        lines.append(f"| {i} | {100 * s / total:.1f} | {100 * inc / total:.1f} | `{f}` |")
    return "\n".join(lines)

