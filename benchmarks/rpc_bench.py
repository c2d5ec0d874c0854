#!/usr/bin/env python3
"""Benchmark router.rpc: call latency (p50/p99) and calls/s through one node and across the four-node mesh.

Scenarios (--scenarios, default both):
  one-node   a single node; RPC server and caller both attached to it.
  four-node  topologies/four-node.yaml's full mesh (every node linked to every other one, cost 1) on free
             ports; the caller on C, the server on B (one inter-router hop each way).

Each scenario starts its own nodes the way `meshrouter mesh up` does (router.meshctl: one
`python -m router run` per node, own session, logs in a temp directory), waits until every node reaches
every other one, and stops them afterwards. The RPC server is a separate process (this script with
--serve) running router.rpc.RpcServer (echo handler, --workers threads); the caller is an
router.rpc.RpcClient in this process. Address: openstack.org/om/rpc/anycast/bench/echo (balanced), 64-byte
string bodies.

Modes per scenario:
  sequential  one thread, --calls calls one after the other (after --warmup calls).
  concurrent  --threads threads sharing the one client (one connection), --calls calls in total.

Reported per row (median over --repeat runs): calls/s, latency p50 and p99 in µs (per run, over its
calls), and CPU time per call (user + sys from /proc, over the measured calls) of the nodes, of this
process (the client) and of the server process. On a 2-core machine the nodes, the server and the
caller share the cores: do not benchmark while tests run, and look at the spread (every run is kept in
benchmarks/results/<stamp>-rpc.json, and in --json FILE).

Examples:
  .venv/bin/python benchmarks/rpc_bench.py
  .venv/bin/python benchmarks/rpc_bench.py --scenarios one-node --calls 5000 --repeat 5
  .venv/bin/python benchmarks/rpc_bench.py --workers 0 --json /tmp/rpc.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO / "benchmarks", REPO):  # the harness; router/ is the repo's
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from harness import mesh as hm  # noqa: E402
from harness.paths import REPO, BenchError  # noqa: E402,F401 (oslo_bench imports BenchError from here)
from harness.report import fmt, save_result  # noqa: E402
from harness.sample import cpu_seconds  # noqa: E402
from harness.sample import median as med  # noqa: E402
from harness.sample import nearest_rank as percentile  # noqa: E402

from router.rpc import RpcClient, RpcServer  # noqa: E402

ADDRESS = "openstack.org/om/rpc/anycast/bench/echo"
SCENARIOS = {"one-node": ("A", "A"), "four-node": ("B", "C")}    # scenario -> (server node, caller node)
BODY = "x" * 64


# ---------------------------------------------------------------------------------------------- meshes


# ---------------------------------------------------------------------------------------------- server


def wait_for_stop() -> None:
    """Block until stdin closes or SIGTERM arrives (a benchmark's helper process; also oslo_bench.py)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stop.wait()


def serve(url: str, address: str, workers: int) -> int:
    """--serve: run an echo RpcServer until stdin closes or SIGTERM."""
    server = RpcServer(url, address, lambda body, props: body, workers=workers)
    print("ready", flush=True)
    wait_for_stop()
    server.stop(timeout=2.0)
    return 0


@contextlib.contextmanager
def ready_child(cmd: list[str], what: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``cmd`` (in its own session) until it prints "ready"; end it on exit: stdin closed, then
    SIGKILL of its process group after 10 s (also oslo_bench.py)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise BenchError(f"{what} did not start (got {line!r}, exit code {proc.poll()})")
        yield proc
    finally:
        with contextlib.suppress(Exception):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def server_process(url: str, workers: int):
    """The echo RpcServer in a child process (a context manager)."""
    return ready_child([sys.executable, __file__, "--serve", url, "--workers", str(workers)], "RPC server")


# ---------------------------------------------------------------------------------------------- measuring


@contextlib.contextmanager
def running(scenario: str, tmp: Path) -> Iterator[hm.Mesh]:
    """The scenario's nodes (one node, or the four-node full mesh; topologies/four-node.yaml's settings)
    on free ports, converged; stopped on the way out."""
    topo = hm.single_topology() if scenario == "one-node" else hm.four_node_topology()
    with hm.running_mesh(topo, tmp) as mesh:
        mesh.start()
        mesh.wait_converged(30)
        yield mesh


def run_calls(call: Callable[[int], object], calls: int, threads: int) -> dict[str, Any]:
    """``calls`` calls of ``call(thread index)`` spread over ``threads`` threads; latencies in µs, wall time
    (also used by oslo_bench.py)."""
    per_thread = [calls // threads + (1 if i < calls % threads else 0) for i in range(threads)]
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []
    barrier = threading.Barrier(threads + 1)

    def worker(i: int) -> None:
        out = latencies[i]
        barrier.wait()
        for _ in range(per_thread[i]):
            t0 = time.perf_counter()
            try:
                call(i)
            except Exception as exc:       # counted, never hidden
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            out.append((time.perf_counter() - t0) * 1e6)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    lat = sorted(x for part in latencies for x in part)
    return {"calls": len(lat), "errors": len(errors), "first_errors": errors[:3], "wall_s": wall,
            "calls_per_s": len(lat) / wall if wall > 0 else 0.0,
            "p50_us": percentile(lat, 50) if lat else None, "p99_us": percentile(lat, 99) if lat else None}


def measure(scenario: str, a: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """One run of a scenario: both modes on one mesh."""
    server_node, caller_node = SCENARIOS[scenario]
    results = []
    with running(scenario, tmp) as mesh, server_process(mesh.url(server_node), a.workers) as server:
        with RpcClient(mesh.url(caller_node), timeout=30) as client:
            client.call(ADDRESS, BODY, timeout=30)   # waits until the address is known at the caller's node
            for _ in range(a.warmup):
                client.call(ADDRESS, BODY)
            for mode, threads in (("sequential", 1), ("concurrent", a.threads)):
                cpu0, server0, client0 = mesh.cpu_seconds(), cpu_seconds(server.pid), cpu_seconds(os.getpid())
                r = run_calls(lambda _i: client.call(ADDRESS, BODY, timeout=30), a.calls, threads)
                cpu = mesh.cpu_seconds() - cpu0
                server_cpu = cpu_seconds(server.pid) - server0
                client_cpu = cpu_seconds(os.getpid()) - client0
                mesh.check_alive()
                r.update(scenario=scenario, mode=mode, threads=threads,
                         node_cpu_us_per_call=cpu / r["calls"] * 1e6 if r["calls"] else None,
                         server_cpu_us_per_call=server_cpu / r["calls"] * 1e6 if r["calls"] else None,
                         client_cpu_us_per_call=client_cpu / r["calls"] * 1e6 if r["calls"] else None)
                results.append(r)
                print(f"  {scenario} {mode:10s} {r['calls']} calls: {r['calls_per_s']:.0f} calls/s, "
                      f"p50 {r['p50_us']:.0f} µs, p99 {r['p99_us']:.0f} µs, errors {r['errors']}", flush=True)
    return results


def table(runs: list[dict[str, Any]], a: argparse.Namespace) -> str:
    lines = ["| scenario | mode | threads | calls/s | p50 µs | p99 µs | node CPU µs/call "
             "| client CPU µs/call | server CPU µs/call | runs | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for scenario in a.scenarios:
        for mode in ("sequential", "concurrent"):
            rs = [r for r in runs if r["scenario"] == scenario and r["mode"] == mode]
            if not rs:
                continue
            cells = [scenario, mode, rs[0]["threads"], fmt(med([r["calls_per_s"] for r in rs])),
                     fmt(med([r["p50_us"] for r in rs])), fmt(med([r["p99_us"] for r in rs])),
                     fmt(med([r["node_cpu_us_per_call"] for r in rs])),
                     fmt(med([r.get("client_cpu_us_per_call") for r in rs])),
                     fmt(med([r.get("server_cpu_us_per_call") for r in rs])), len(rs),
                     sum(r["errors"] for r in rs)]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: one-node,four-node")
    p.add_argument("--calls", type=int, default=3000, help="measured calls per mode and run (default 3000)")
    p.add_argument("--warmup", type=int, default=200, help="calls before measuring (default 200)")
    p.add_argument("--threads", type=int, default=8, help="callers in the concurrent mode (default 8)")
    p.add_argument("--workers", type=int, default=8, help="RpcServer worker threads; 0 = run the handler on "
                   "the server's event loop (default 8, the library default)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs per scenario, each on a fresh mesh (default 3)")
    p.add_argument("--json", type=Path, help="also write every run's results to this file")
    p.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve is None:
        a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
        unknown = [s for s in a.scenarios if s not in SCENARIOS]
        if unknown:
            p.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.serve is not None:
        return serve(a.serve, ADDRESS, a.workers)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rpc_bench-") as tmp:
        try:
            for scenario in a.scenarios:
                for i in range(a.repeat):
                    print(f"{scenario}: run {i + 1}/{a.repeat}", flush=True)
                    runs.extend(measure(scenario, a, Path(tmp)))
        except BenchError as exc:
            print(f"rpc_bench: {exc}", file=sys.stderr)
            return 1
    print()
    print(table(runs, a))
    print()
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    print(f"settings: {a.calls} calls per mode, {a.warmup} warm-up, {a.threads} concurrent callers, "
          f"server workers {a.workers}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    record = {"settings": {k: str(v) for k, v in vars(a).items()}, "runs": runs}
    if a.json:
        a.json.write_text(json.dumps(record, indent=1))
    print(f"Results: {save_result('rpc', record).relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
