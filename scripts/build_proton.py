#!/usr/bin/env python3
"""Install the pinned python-qpid-proton, built from its source with 1 KiB transport buffers (issue 33).

Proton-C 0.40's transport allocates 8 KiB of input buffer, 8 KiB of output buffer and 4 KiB of framed
output for every connection, and the first bytes of each touch them: ~16 KiB of an idle connection's
~20 KiB in a node. Built with 1 KiB each, an idle connection costs ~11 KiB (benchmarks/conn_memory_bench.py);
the node grows a busy connection's buffers back to 8 KiB (router/adapter/pnbuffers.py), so throughput is as
with the stock build. Nothing else changes: the two constants are replaced in the unpacked sdist, and the
script stops with a message if the source does not contain them exactly once.

    python scripts/build_proton.py              # into the interpreter running it (a venv's python)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: (file in the sdist, stock text, replacement)
PATCHES = (
    ("src/core/engine-internal.h", "#define PN_TRANSPORT_INITIAL_BUFFER_SIZE (8*1024)",
     "#define PN_TRANSPORT_INITIAL_BUFFER_SIZE (1024)  /* meshrouter: 8*1024 */"),
    ("src/core/transport.c", "transport->output_buffer = pn_buffer(4*1024);",
     "transport->output_buffer = pn_buffer(1024);  /* meshrouter: 4*1024 */"),
)


def pinned_version() -> str:
    """The python-qpid-proton version pyproject.toml pins."""
    text = (REPO / "pyproject.toml").read_text()
    found = re.search(r'"python-qpid-proton==([0-9][^"]*)"', text)
    if not found:
        raise SystemExit("build_proton: pyproject.toml pins no python-qpid-proton==VERSION")
    return found.group(1)


def patch(tree: Path) -> None:
    """Replace each stock constant in the unpacked source (exactly once each)."""
    for name, stock, mine in PATCHES:
        path = tree / name
        text = path.read_text()
        if text.count(stock) != 1:
            raise SystemExit(f"build_proton: {name} of this python-qpid-proton does not contain {stock!r} "
                             "exactly once; update scripts/build_proton.py for it")
        path.write_text(text.replace(stock, mine))


def main() -> int:
    version = pinned_version()
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="build-proton-") as tmp:
        subprocess.run(pip + ["download", "-q", "--no-deps", "--no-binary", "python-qpid-proton", "-d", tmp,
                              f"python-qpid-proton=={version}"], check=True)
        (sdist,) = Path(tmp).glob("python*qpid*proton-*.tar.gz")
        with tarfile.open(sdist) as tar:
            # the "data" filter where this Python has it (3.11.4+; Debian 12's 3.11.2 has not)
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(tmp, **safe)
        (tree,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        patch(tree)
        # --no-cache-dir: the built wheel must not stand in for the stock one in pip's cache
        subprocess.run(pip + ["install", "-q", "--no-cache-dir", "--force-reinstall",
                              str(tree)], check=True)
    print(f"build_proton: python-qpid-proton {version} installed with 1 KiB transport buffers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
