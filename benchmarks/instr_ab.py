#!/usr/bin/env python3
"""Instructions per message of a node at a git revision (A) against the working tree (B), with callgrind.

Timings on this 2-vCPU VM move by several percent from run to run; instruction counts do not (the same
binary, inputs and environment give the same count). For each path, the measured node runs under
``valgrind --tool=callgrind`` with collection off until it is warm; then ``--count`` unsettled 100-byte
messages go through it and callgrind counts what it executed. Each (path, tree) is run ``--rounds``
times, alternated, and the lowest count is kept.

Paths (the measured node is M; the C load generator of ../shared/bench sends and receives):

* ``node``: producer and consumer on M (one node, client to client);
* ``ingress``: producer on M, consumer on its neighbour (M forwards client -> inter-router);
* ``egress``: producer on the neighbour, consumer on M (inter-router -> client);
* ``transit``: chain X - M - Y, producer on X, consumer on Y (inter-router -> inter-router);
* ``node-presettled``: as ``node``, the messages sent pre-settled;
* ``node-rpc``: sequential RPC calls through M (``amqpbench rpc-client``, concurrency 1, and
  ``rpc-server``): instructions per call (request and reply).

    .venv/bin/python benchmarks/instr_ab.py --base 79417eb [--paths node,transit] [--count 20000]

Writes benchmarks/results/<timestamp>-instr-ab.json and prints one line per path with the ratio B/A.
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

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
sys.path.insert(0, str(BENCH_DIR))

from code_ab import extract  # noqa: E402
from gateway_bench import run_amqpbench  # noqa: E402
from node_bench import free_port  # noqa: E402

AMQPBENCH = BENCH_DIR / "build" / "amqpbench"
PATHS = ("node", "ingress", "egress", "transit", "node-presettled", "node-rpc")
ADDRESS = "balanced/instr"


def node_config(tmp: Path, node: str, client: int, inter: int | None, dial: list[int]) -> Path:
    data: dict = {"node": {"id": node},
                  "listeners": [{"host": "127.0.0.1", "port": client, "role": "normal"}],
                  "router": {"hello_interval": 0.5, "hello_max_age": 1.5, "ra_interval_flux": 1.0}}
    if inter is not None:
        data["listeners"].append({"host": "127.0.0.1", "port": inter, "role": "inter-router"})
    if dial:
        data["connectors"] = [{"host": "127.0.0.1", "port": port} for port in dial]
    path = tmp / f"{node}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def wait_ready(proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while "ready: node=" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"node did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


def one_round(tree: Path, path: str, a: argparse.Namespace) -> float:
    """Instructions the measured node M executed per message on `path`, with the code of `tree`."""
    with tempfile.TemporaryDirectory(prefix="instr-ab-") as tmpdir:
        tmp = Path(tmpdir)
        ports = {n: (free_port(), free_port()) for n in "XMY"}     # (client, inter-router)
        # who runs: M always; X for ingress/egress (its neighbour), X and Y for transit
        others = {"ingress": "X", "egress": "X", "transit": "XY"}.get(path, "")
        procs: dict[str, subprocess.Popen] = {}
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        out = tmp / "callgrind.out"
        try:
            for n in others:
                cfg = node_config(tmp, n, ports[n][0], ports[n][1], [])
                procs[n] = subprocess.Popen([sys.executable, "-m", "router", "run", str(cfg)], cwd=tree,
                                            env=env, stdout=open(tmp / f"{n}.out", "w"),
                                            stderr=subprocess.STDOUT)
                wait_ready(procs[n], tmp / f"{n}.out", 30)
            cfg = node_config(tmp, "M", ports["M"][0], None, [ports[n][1] for n in others])
            procs["M"] = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                           f"--callgrind-out-file={out}", sys.executable, "-m", "router",
                                           "run", str(cfg)], cwd=tree, env=env,
                                          stdout=open(tmp / "M.out", "w"), stderr=subprocess.STDOUT)
            wait_ready(procs["M"], tmp / "M.out", 180)
            src = {"ingress": "M", "egress": "X", "transit": "X"}.get(path, "M")
            dst = {"ingress": "X", "egress": "M", "transit": "Y"}.get(path, "M")
            mode = ["rpc-server", "--credit", "250"] if path == "node-rpc" else \
                ["recv", "--count", str(a.warmup + a.count), "--credit", "250", "--idle-s", "300"]
            recv = subprocess.Popen([str(AMQPBENCH), mode[0], "--url", f"amqp://127.0.0.1:{ports[dst][0]}",
                                     "--addr", ADDRESS, *mode[1:]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs["recv"] = recv
            time.sleep(3 if others else 1)       # the consumer's address reaches the other nodes
            url = f"amqp://127.0.0.1:{ports[src][0]}"
            if path == "node-rpc":
                sender = ["rpc-client", "--url", url, "--addr", ADDRESS, "--warmup", "0",
                          "--concurrency", "1"]
            else:
                sender = ["send", "--url", url, "--addr", ADDRESS, "--size", "100"]
                if path == "node-presettled":
                    sender += ["--presettled", "--linger-ms", "200"]
            run_amqpbench(AMQPBENCH, *sender, "--count", str(a.warmup))
            subprocess.run(["callgrind_control", "-i", "on", str(procs["M"].pid)], check=True,
                           capture_output=True)
            run_amqpbench(AMQPBENCH, *sender, "--count", str(a.count))
            subprocess.run(["callgrind_control", "-i", "off", str(procs["M"].pid)], check=True,
                           capture_output=True)
        finally:
            for name, proc in procs.items():
                if name == "recv":
                    proc.kill()
                else:
                    proc.terminate()
            for proc in procs.values():
                proc.wait(120)
        m = re.search(r"Collected : (\d+)", (tmp / "M.out").read_text(errors="replace"))
        if m is None:
            raise SystemExit(f"no instruction count from callgrind:\n{(tmp / 'M.out').read_text()[-1500:]}")
        return int(m.group(1)) / a.count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision A (e.g. a commit before the change)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, from {', '.join(PATHS)}")
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    paths = [p for p in a.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        ap.error(f"unknown paths: {', '.join(sorted(unknown))}")
    if not AMQPBENCH.exists():
        raise SystemExit("build the load generator first: benchmarks/node_bench.py builds benchmarks/build/")
    rows = []
    with tempfile.TemporaryDirectory(prefix="instr-ab-base-") as tmp:
        base = extract(a.base, Path(tmp))
        for path in paths:
            counts: dict[str, list[float]] = {"base": [], "tree": []}
            for i in range(a.rounds):
                for label, tree in (("base", base), ("tree", REPO)):
                    counts[label].append(one_round(tree, path, a))
                    print(f"{path} round {i + 1}: {label:4} {counts[label][-1]:,.0f} instructions/msg",
                          flush=True)
            lo_a, lo_b = min(counts["base"]), min(counts["tree"])
            rows.append({"path": path, "base": lo_a, "tree": lo_b, "ratio": lo_b / lo_a, "runs": counts})
            print(f"{path}: base {lo_a:,.0f}, working tree {lo_b:,.0f} instructions/msg: "
                  f"{lo_b / lo_a - 1:+.1%}", flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-instr-ab.json"
    out.write_text(json.dumps({"base": a.base, "count": a.count, "rounds": a.rounds, "rows": rows}, indent=2))
    print(f"Results: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
