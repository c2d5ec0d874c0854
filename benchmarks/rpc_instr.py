#!/usr/bin/env python3
"""Instructions per call of router.rpc's client and server at a git revision (A) against the working tree (B).

Wall-clock latency on this shared 2-vCPU VM moves with the other sessions' load; instruction counts do
not. One node (from the working tree) runs normally; for each tree, an echo ``RpcServer`` process and an
``RpcClient`` process (both that tree's router.rpc, public API only) run under
``valgrind --tool=callgrind`` with collection off. The client makes ``--warmup`` calls, then collection is
switched on in both processes for ``--count`` sequential calls (64-byte string bodies, the address and
server of benchmarks/rpc_bench.py) and off again. Each tree is run ``--rounds`` times, alternated; the
lowest count per process is kept. Everything each process executed counts: the caller thread, the event
loop, the server's workers, Python itself and Proton-C.

    .venv/bin/python benchmarks/rpc_instr.py --base 6c7760a [--count 500] [--rounds 2]

Prints one line per round and the ratio B/A per process; writes benchmarks/results/<time>-rpc-instr.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(REPO))

from harness.trees import extract  # noqa: E402
from rpc_bench import ADDRESS, BODY, running  # noqa: E402

HELPER = '''
import sys
from router.rpc import RpcClient, RpcServer
role, url, address = sys.argv[1], sys.argv[2], sys.argv[3]
if role == "serve":
    server = RpcServer(url, address, lambda body, props: body, workers=int(sys.argv[4]))
    print("ready", flush=True)
    sys.stdin.read()
    server.stop(timeout=5.0)
else:
    count, warmup, body = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    with RpcClient(url, timeout=120) as client:
        for _ in range(warmup):
            client.call(address, body)
        print("warm", flush=True)
        sys.stdin.readline()
        for _ in range(count):
            client.call(address, body)
        print("done", flush=True)
        sys.stdin.readline()
'''


def callgrind(tree: Path, out: Path, log: Path, args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                             f"--callgrind-out-file={out}", sys.executable, *args], cwd=tree, env=env,
                            text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=open(log, "w"))


def expect(proc: subprocess.Popen[str], word: str, what: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != word:
        raise SystemExit(f"{what}: expected {word!r}, got {line!r} (exit code {proc.poll()})")


def collected(log: Path) -> int:
    m = re.search(r"Collected : (\d+)", log.read_text(errors="replace"))
    if m is None:
        raise SystemExit(f"no instruction count from callgrind:\n{log.read_text(errors='replace')[-1500:]}")
    return int(m.group(1))


def one_round(tree: Path, url: str, tmp: Path, a: argparse.Namespace) -> dict[str, float]:
    helper = tmp / "rpc_instr_helper.py"
    helper.write_text(HELPER)
    logs = {"server": tmp / "server.log", "client": tmp / "client.log"}
    server = callgrind(tree, tmp / "server.cg", logs["server"],
                       [str(helper), "serve", url, ADDRESS, str(a.workers)])
    client = None
    try:
        expect(server, "ready", "server")
        client = callgrind(tree, tmp / "client.cg", logs["client"],
                           [str(helper), "call", url, ADDRESS, str(a.count), str(a.warmup), BODY])
        expect(client, "warm", "client")
        for p in (server, client):
            subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True, capture_output=True)
        assert client.stdin is not None
        client.stdin.write("go\n")
        client.stdin.flush()
        expect(client, "done", "client")
        for p in (server, client):
            subprocess.run(["callgrind_control", "-i", "off", str(p.pid)], check=True, capture_output=True)
        client.stdin.write("exit\n")
        client.stdin.flush()
        client.wait(300)
    finally:
        for p in (client, server):
            if p is None:
                continue
            try:
                assert p.stdin is not None
                p.stdin.close()
            except OSError:
                pass
        for p in (client, server):
            if p is not None:
                try:
                    p.wait(300)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    if a.keep is not None:
        a.keep.mkdir(parents=True, exist_ok=True)
        label = "base" if tree != REPO else "tree"
        for name in ("server", "client"):
            (a.keep / f"callgrind-{label}-{name}.out").write_bytes((tmp / f"{name}.cg").read_bytes())
    return {name: collected(log) / a.count for name, log in logs.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision A (e.g. a commit before the change)")
    ap.add_argument("--count", type=int, default=500, help="measured sequential calls (default 500)")
    ap.add_argument("--warmup", type=int, default=100, help="calls before measuring (default 100)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=8, help="RpcServer worker threads (default 8)")
    ap.add_argument("--keep", type=Path, help="copy the callgrind files here (for callgrind_annotate)")
    ap.add_argument("--tree-only", action="store_true", help="measure the working tree only (no base)")
    a = ap.parse_args()
    counts: dict[str, dict[str, list[float]]] = {"base": {"client": [], "server": []},
                                                 "tree": {"client": [], "server": []}}
    with tempfile.TemporaryDirectory(prefix="rpc-instr-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "base").mkdir()
        base = extract(a.base, tmp / "base")
        with running("one-node", tmp) as mesh:
            url = mesh.url("A")
            for i in range(a.rounds):
                for label, tree in (("base", base), ("tree", REPO))[1 if a.tree_only else 0:]:
                    r = one_round(tree, url, tmp, a)
                    for k, v in r.items():
                        counts[label][k].append(v)
                    print(f"round {i + 1}: {label:4} client {r['client']:,.0f}, server {r['server']:,.0f} "
                          "instructions/call", flush=True)
    rows = {}
    for proc in ("client", "server"):
        if a.tree_only:
            rows[proc] = {"tree": min(counts["tree"][proc])}
            continue
        lo_a, lo_b = min(counts["base"][proc]), min(counts["tree"][proc])
        rows[proc] = {"base": lo_a, "tree": lo_b, "ratio": lo_b / lo_a}
        print(f"{proc}: base {lo_a:,.0f}, working tree {lo_b:,.0f} instructions/call ({lo_b / lo_a:.2f}x)")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-rpc-instr.json"
    out.write_text(json.dumps({"base": a.base, "count": a.count, "warmup": a.warmup, "rounds": a.rounds,
                               "workers": a.workers, "rows": rows, "runs": counts}, indent=2))
    print(f"Results: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
