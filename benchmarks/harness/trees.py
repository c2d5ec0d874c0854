"""A git revision's tree, for before/after benchmarks (``--base REV``): extracted with ``git archive``
into a temporary directory, so the repository itself is never touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.paths import REPO


def extract(rev: str, into: Path) -> Path:
    """The tree of `rev` under `into` (via git archive; nothing in the repository changes). A tree with
    the compiled hot path (issue 21) gets it built there."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=REPO, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    builder = into / "router" / "adapter" / "hotpath_build.py"
    if builder.exists():
        subprocess.run([sys.executable, str(builder)], check=True, capture_output=True)
    return into
