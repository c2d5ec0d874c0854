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
* ``node-presettled``, ``ingress-presettled``, ``egress-presettled``, ``transit-presettled``: as those
  paths, the messages sent pre-settled;
* ``node-rpc``: sequential RPC calls through M (``amqpbench rpc-client``, concurrency 1, and
  ``rpc-server``): instructions per call (request and reply).

    .venv/bin/python benchmarks/instr_ab.py --base 79417eb [--paths node,transit] [--count 20000]

Writes benchmarks/results/<timestamp>-instr-ab.json and prints one line per path with the ratio B/A.
With ``--idle-s S`` the measured node is first counted idle for S seconds (timers, HELLOs: a rate); the
count per message is then given net of that rate over the traffic's duration. Under callgrind a message
takes ~50x longer than at full speed, so timer work weighs ~50x more per message than it does for real,
and more on a node with peers (HELLOs every 0.5 s here) than on a node alone.
Without ``--base`` only the working tree is measured, and each path is compared with the single-node
hop (issue 21: a transit or egress hop should cost no more than ``node``). ``--keep DIR`` copies each
run's callgrind file there (``callgrind_annotate --inclusive=yes DIR/<file>``).
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

from harness.loadgen import run_amqpbench  # noqa: E402
from harness.procs import free_port, wait_ready_line  # noqa: E402
from harness.procs import peer_node_config as node_config  # noqa: E402
from harness.trees import extract  # noqa: E402

AMQPBENCH = BENCH_DIR / "build" / "amqpbench"
PATHS = ("node", "ingress", "egress", "transit", "node-presettled", "ingress-presettled", "egress-presettled",
         "transit-presettled", "node-rpc")
ADDRESS = "balanced/instr"


CALLGRIND_SLOWDOWN = 50     # a message takes ~50x longer under callgrind than at full speed


def scale_read_turns(cfg: Path, tree: Path, a: argparse.Namespace) -> None:
    """The read turns (router/node/server.py) judge a client's reads by their CPU time: scale their
    thresholds by the slowdown, so that a read counts as heavy under callgrind when it would at full speed.
    At full speed none of these runs' reads do (readsDeferred stays 0 over 200,000 messages); unscaled,
    callgrind alone made them heavy and the single-node hop paid ~1,500 instructions per message for
    deferring them. Trees from before `node.heavy_read` run unscaled (compare them with
    `--no-scale-read-turns`)."""
    model = (tree / "router" / "config" / "model.py").read_text()
    if not getattr(a, "scale_read_turns", True) or "heavy_read" not in model:
        return
    data = yaml.safe_load(cfg.read_text())
    data["node"].update(heavy_read=0.001 * CALLGRIND_SLOWDOWN, read_budget=0.005 * CALLGRIND_SLOWDOWN)
    cfg.write_text(yaml.safe_dump(data))


def one_round(tree: Path, path: str, a: argparse.Namespace) -> float:
    """Instructions the measured node M executed per message on `path`, with the code of `tree`."""
    name, presettled = path, path.endswith("-presettled")
    path = path.removesuffix("-presettled")
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
                # the neighbours run as slowly as M (under callgrind too, counting into nothing), so that
                # M's batches are what they are at full speed, where all nodes run at one speed
                slowed = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] \
                    if getattr(a, "slow_neighbours", False) else []
                if slowed:
                    scale_read_turns(cfg, tree, a)
                procs[n] = subprocess.Popen([*slowed, sys.executable, "-m", "router", "run", str(cfg)],
                                            cwd=tree, env=env, stdout=open(tmp / f"{n}.out", "w"),
                                            stderr=subprocess.STDOUT)
                wait_ready_line(procs[n], tmp / f"{n}.out", 180 if slowed else 30)
            cfg = node_config(tmp, "M", ports["M"][0], None, [ports[n][1] for n in others])
            scale_read_turns(cfg, tree, a)
            # callgrind counts each byte a `rep movsb` moves as an instruction, and glibc's memcpy uses it
            # above a few KB: large copies (socket batches) would weigh ~30x what they cost. With the
            # threshold out of reach, memcpy copies with vector moves, counted about as they run.
            env_m = {**env, "GLIBC_TUNABLES": "glibc.cpu.x86_rep_movsb_threshold=4294967295"}
            procs["M"] = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                           f"--callgrind-out-file={out}", sys.executable, "-m", "router",
                                           "run", str(cfg)], cwd=tree, env=env_m,
                                          stdout=open(tmp / "M.out", "w"), stderr=subprocess.STDOUT)
            wait_ready_line(procs["M"], tmp / "M.out", 180)
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
                if presettled:
                    sender += ["--presettled", "--linger-ms", "200"]
            run_amqpbench(AMQPBENCH, *sender, "--count", str(a.warmup))
            control = ["callgrind_control", "-i", "on", str(procs["M"].pid)]
            if a.idle_s:                          # the same node with no traffic: its timers' rate
                subprocess.run(control, check=True, capture_output=True)
                time.sleep(a.idle_s)
                subprocess.run([*control[:1], "-d", control[-1]], check=True, capture_output=True)
            subprocess.run(control, check=True, capture_output=True)
            started = time.monotonic()
            run_amqpbench(AMQPBENCH, *sender, "--count", str(a.count))
            if presettled:
                # a pre-settled sender is done once it has sent, while M (slowed by callgrind) still
                # works through what its neighbour's socket holds: count until M is idle again
                wait_idle(procs["M"].pid)
            took = time.monotonic() - started
            subprocess.run([*control[:1], "-d", control[-1]], check=True, capture_output=True)
            subprocess.run([*control[:2], "off", control[-1]], check=True, capture_output=True)
        finally:
            for who, proc in procs.items():
                if who == "recv":
                    proc.kill()
                else:
                    proc.terminate()
            for proc in procs.values():
                proc.wait(120)
        dumps = sorted(tmp.glob("callgrind.out.*"), key=lambda f: int(f.name.rsplit(".", 1)[1]))
        if len(dumps) != (2 if a.idle_s else 1):
            raise SystemExit(f"expected callgrind dumps, got {[f.name for f in dumps]}:\n"
                             f"{(tmp / 'M.out').read_text()[-1500:]}")
        traffic = _total(dumps[-1])
        if a.keep is not None:
            a.keep.mkdir(parents=True, exist_ok=True)
            label = "tree" if tree == REPO else "base"
            n = len(list(a.keep.glob(f"callgrind-{name}-{label}-*.out")))
            (a.keep / f"callgrind-{name}-{label}-{n + 1}.out").write_bytes(dumps[-1].read_bytes())
        raw = traffic / a.count
        if not a.idle_s:
            return raw
        idle_rate = _total(dumps[0]) / a.idle_s
        net = (traffic - idle_rate * took) / a.count
        print(f"  {name}: {raw:,.0f} instructions/msg, {took:.1f} s under callgrind; timers alone "
              f"{idle_rate / 1e6:.2f} M instructions/s -> {net:,.0f} net of them", flush=True)
        return net


def wait_idle(pid: int, window: float = 0.5, busy: float = 0.1) -> None:
    """Return once process `pid` used less than `busy` of a CPU over `window` seconds."""
    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    before = cpu()
    while True:
        time.sleep(window)
        now = cpu()
        if now - before < busy * window:
            return
        before = now


def _total(dump: Path) -> int:
    """The instruction count of one callgrind dump (its `summary:` or `totals:` line)."""
    m = re.search(r"^(?:summary|totals): (\d+)", dump.read_text(errors="replace"), re.M)
    if m is None:
        raise SystemExit(f"no instruction total in {dump}")
    return int(m.group(1))


def hops_only(paths: list[str], a: argparse.Namespace) -> int:
    """Measure the working tree alone: instructions per message of each hop kind, and each against `node`."""
    counts: dict[str, list[float]] = {p: [] for p in paths}
    for i in range(a.rounds):
        for path in paths:
            counts[path].append(one_round(REPO, path, a))
            print(f"{path} round {i + 1}: {counts[path][-1]:,.0f} instructions/msg", flush=True)
    low = {p: min(c) for p, c in counts.items()}
    for path in paths:
        vs = f" ({low[path] / low['node']:.2f}x node)" if "node" in low else ""
        print(f"{path:8} {low[path]:,.0f} instructions/msg (lowest of {a.rounds}){vs}", flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-instr-hops.json"
    summary = {"count": a.count, "rounds": a.rounds, "lowest": low, "runs": counts}
    out.write_text(json.dumps(summary, indent=2))
    print(f"Results: {out.relative_to(REPO)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=None,
                    help="git revision A (e.g. a commit before the change); none: the working tree alone")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, from {', '.join(PATHS)}")
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--idle-s", type=float, default=0.0,
                    help="first count the idle node for this long; report instructions per message net of "
                         "its timers' rate over the traffic's duration (under callgrind a message takes "
                         "~50x longer, so timers weigh ~50x more per message than at full speed)")
    ap.add_argument("--scale-read-turns", action=argparse.BooleanOptionalAction, default=True,
                    help="scale node.heavy_read and node.read_budget by callgrind's slowdown (trees that "
                         "have them), so that reads count as heavy as they would at full speed")
    ap.add_argument("--slow-neighbours", action=argparse.BooleanOptionalAction, default=False,
                    help="run M's neighbours (X, Y) under callgrind too (counting into nothing), so that all "
                         "nodes run at one speed; tried for issue 21: it did not bring M's batches on a "
                         "transit hop closer to their size at full speed (BENCHMARKS.md)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy each run's callgrind file into this directory")
    a = ap.parse_args()
    paths = [p for p in a.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        ap.error(f"unknown paths: {', '.join(sorted(unknown))}")
    if not AMQPBENCH.exists():
        raise SystemExit("build the load generator first: benchmarks/node_bench.py builds benchmarks/build/")
    if a.base is None:
        return hops_only(paths, a)
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
