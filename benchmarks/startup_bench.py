#!/usr/bin/env python3
"""Start-up time of a node (issue 21 point 4): from exec until its listener answers an AMQP Open.

Each run spawns a node (``python -m router run CONFIG``, or the installed ``meshrouter run`` entry point
with ``--entry cli``) on a free port and, from the moment of the spawn, tries to connect every
millisecond; once connected it sends the AMQP protocol header and an Open frame and waits for the node's
Open. Ready = spawn -> the node's Open read; also the node's CPU seconds by then (/proc), which the VM's
load moves much less than the wall time.

    .venv/bin/python benchmarks/startup_bench.py [--runs 10] [--entry module|cli] [--base main]

``--base REV`` runs the node from git revision REV instead of the working tree. The tree's modules are
byte-compiled first (``compileall``, as an installation does: with PYTHONDONTWRITEBYTECODE set, a node
would otherwise compile ~110 modules at every start, ~0.1 s here). Prints every run and the
median, with the load average; the four-node mesh's convergence is measured by
``benchmarks/mesh_bench.py --scenarios convergence``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from harness.procs import free_port  # noqa: E402
from harness.report import markdown_table, save_result  # noqa: E402
from harness.sample import cpu_seconds  # noqa: E402
from harness.trees import extract  # noqa: E402

REPO = BENCH_DIR.parent
HEADER = b"AMQP\x00\x01\x00\x00"
_OPEN_FIELDS = b"\xa1\x05probe"         # container-id "probe"
_OPEN_BODY = b"\x00\x53\x10\xc0" + bytes([len(_OPEN_FIELDS) + 1, 1]) + _OPEN_FIELDS
OPEN_FRAME = (8 + len(_OPEN_BODY)).to_bytes(4, "big") + b"\x02\x00\x00\x00" + _OPEN_BODY


def answers_open(port: int, deadline: float) -> float:
    """Connect (retrying every ms), say header + Open, wait for the node's Open: the time it came."""
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the node never accepted a connection") from None
            time.sleep(0.001)
    with sock:
        sock.sendall(HEADER + OPEN_FRAME)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit(f"the node closed the connection; read {data!r}")
            data += chunk
            # header, then the first frame: an Open (performative 0x10) once its bytes are all here
            if len(data) >= 16 and data[:8] == HEADER:
                size = int.from_bytes(data[8:12], "big")
                if len(data) >= 8 + size:
                    if b"\x00\x53\x10" not in data[8:8 + size]:
                        raise SystemExit(f"the node's first frame is not an Open: {data[8:8 + size]!r}")
                    return time.monotonic()


def one_run(tree: Path, entry: str, tmp: Path) -> tuple[float, float]:
    """Seconds from the spawn until the node's Open was read, and the node's CPU seconds by then (wall
    time moves with the load of the VM; the CPU a start-up takes much less)."""
    port = free_port()
    cfg = tmp / "node.yaml"
    cfg.write_text(yaml.safe_dump({"node": {"id": "S"},
                                   "listeners": [{"host": "127.0.0.1", "port": port, "role": "normal"}]}))
    if entry == "cli":
        cmd = [str(Path(sys.executable).parent / "meshrouter"), "run", str(cfg)]
    else:
        cmd = [sys.executable, "-m", "router", "run", str(cfg)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        took = answers_open(port, t0 + 30) - t0
        return took, cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--entry", choices=("module", "cli"), default="module")
    ap.add_argument("--base", default=None, help="run the node from this git revision")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not byte-compile the tree first (with --base and PYTHONDONTWRITEBYTECODE=1: "
                         "every start compiles the modules)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-") as tmpdir:
        tmp = Path(tmpdir)
        if a.base:
            (tmp / "tree").mkdir()
            tree = extract(a.base, tmp / "tree")
        else:
            tree = REPO
        if not a.no_compile:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "router")], check=True,
                           stdout=subprocess.DEVNULL)
        opened = []
        cpu = []
        loads = []
        for i in range(a.runs):
            o, c = one_run(tree, a.entry, tmp)
            opened.append(o)
            cpu.append(c)
            loads.append(os.getloadavg()[0])
            print(f"run {i + 1}: Open answered {o * 1e3:6.1f} ms after exec, {c * 1e3:.0f} ms of CPU "
                  f"(load {loads[-1]:.2f})", flush=True)
    compiled = "not byte-compiled" if a.no_compile else "byte-compiled"
    print(f"{a.entry} from {a.base or 'the working tree'} ({compiled}): "
          f"median {statistics.median(opened) * 1e3:.1f} ms, "
          f"min {min(opened) * 1e3:.1f}, max {max(opened) * 1e3:.1f} over {a.runs} runs; "
          f"CPU median {statistics.median(cpu) * 1e3:.0f} ms; "
          f"load {min(loads):.2f}-{max(loads):.2f}")
    print()
    print(markdown_table(
        ["start-up", "runs", "exec -> Open answered, median ms", "min–max ms", "node CPU by then, median ms",
         "load"],
        [[f"`{a.entry}` ({compiled})", a.runs, f"{statistics.median(opened) * 1e3:.0f}",
          f"{min(opened) * 1e3:.0f}–{max(opened) * 1e3:.0f}", f"{statistics.median(cpu) * 1e3:.0f}",
          f"{min(loads):.1f}–{max(loads):.1f}"]]))
    path = save_result("startup", {"entry": a.entry, "base": a.base, "compiled": not a.no_compile,
                                   "open_s": opened, "cpu_s": cpu, "load": loads})
    print(f"\nResults: {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
