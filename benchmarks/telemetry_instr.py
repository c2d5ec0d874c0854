#!/usr/bin/env python3
"""Telemetry's cost on the mesh path, counted in instructions (deterministic, unlike this VM's timings).

Two nodes, A and B (B dials A). B runs under ``valgrind --tool=callgrind`` with collection off until the
mesh is up and warm; then ``--count`` unsettled messages go from a producer on one node to a consumer on
the other, and callgrind counts the instructions B executed. B's telemetry writer process is not under
valgrind (not counted). Each variant (telemetry off / on) is run ``--rounds`` times, alternated.

    .venv/bin/python benchmarks/telemetry_instr.py [--count 20000] [--rounds 2] [--direction a-to-b]

``a-to-b``: B forwards from its inter-router link to a client (the consumer is on B);
``b-to-a``: B forwards from a client to its inter-router link (the producer is on B).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from harness.loadgen import run_amqpbench  # noqa: E402
from harness.procs import free_port, peer_node_config, wait_ready_line  # noqa: E402

AMQPBENCH = BENCH_DIR / "build" / "amqpbench"


def config(tmp: Path, node: str, client: int, inter: int | None, dial: int | None, tel: bool) -> Path:
    """The node's config; ``tel``: with telemetry into tmp/telemetry."""
    extra = {"telemetry": {"dir": str(tmp / "telemetry")}} if tel else None
    return peer_node_config(tmp, node, client, inter, [] if dial is None else [dial], extra)


def one_round(tel: bool, a: argparse.Namespace) -> float:
    """Instructions B executed per message."""
    with tempfile.TemporaryDirectory(prefix="telemetry_instr-") as tmpdir:
        tmp = Path(tmpdir)
        pa, pa_inter, pb = free_port(), free_port(), free_port()
        node_a = subprocess.Popen([sys.executable, "-m", "router", "run",
                                   str(config(tmp, "A", pa, pa_inter, None, tel))],
                                  cwd=REPO, stdout=open(tmp / "A.out", "w"), stderr=subprocess.STDOUT)
        out = tmp / "callgrind.out"
        node_b = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                   f"--callgrind-out-file={out}", sys.executable, "-m", "router", "run",
                                   str(config(tmp, "B", pb, None, pa_inter, tel))],
                                  cwd=REPO, stdout=open(tmp / "B.out", "w"), stderr=subprocess.STDOUT)
        recv = None
        try:
            wait_ready_line(node_a, tmp / "A.out", 30)
            wait_ready_line(node_b, tmp / "B.out", 180)
            src, dst = (pa, pb) if a.direction == "a-to-b" else (pb, pa)
            address = "balanced/instr"
            recv = subprocess.Popen([str(AMQPBENCH), "recv", "--url", f"amqp://127.0.0.1:{dst}", "--addr",
                                     address, "--count", str(a.warmup + a.count), "--credit", "250",
                                     "--idle-s", "120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(3)                          # the consumer's address reaches the other node
            run_amqpbench(AMQPBENCH, "send", "--url", f"amqp://127.0.0.1:{src}", "--addr", address,
                          "--count", str(a.warmup), "--size", "100")
            subprocess.run(["callgrind_control", "-i", "on", str(node_b.pid)], check=True,
                           capture_output=True)
            run_amqpbench(AMQPBENCH, "send", "--url", f"amqp://127.0.0.1:{src}", "--addr", address,
                          "--count", str(a.count), "--size", "100")
            subprocess.run(["callgrind_control", "-i", "off", str(node_b.pid)], check=True,
                           capture_output=True)
        finally:
            if recv is not None:
                recv.kill()                        # every message was accepted: it has them all
            node_b.terminate()
            node_b.wait(120)
            node_a.terminate()
            node_a.wait(30)
        m = re.search(r"Collected : (\d+)", (tmp / "B.out").read_text(errors="replace"))
        if m is None:
            raise SystemExit(f"no instruction count from callgrind:\n{(tmp / 'B.out').read_text()[-1500:]}")
        total = int(m.group(1))
        if a.keep is not None:
            a.keep.mkdir(parents=True, exist_ok=True)
            (a.keep / f"callgrind-{'on' if tel else 'off'}.out").write_bytes(out.read_bytes())
        return total / a.count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--direction", choices=("a-to-b", "b-to-a"), default="a-to-b")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy B's callgrind files here (for callgrind_annotate)")

    a = ap.parse_args()
    if not AMQPBENCH.exists():
        raise SystemExit("build the load generator first: benchmarks/node_bench.py builds benchmarks/build/")
    runs: dict[bool, list[float]] = {False: [], True: []}
    for i in range(a.rounds):
        for tel in (False, True):
            runs[tel].append(one_round(tel, a))
            print(f"round {i + 1}: telemetry {'on ' if tel else 'off'} {runs[tel][-1]:,.0f} instructions/msg",
                  flush=True)
    off, on = min(runs[False]), min(runs[True])
    print(f"B ({a.direction}): off {off:,.0f}, on {on:,.0f} instructions per message: {on / off - 1:+.1%} "
          f"(lowest of {a.rounds} rounds each)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
