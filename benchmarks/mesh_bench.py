#!/usr/bin/env python3
"""Benchmark meshes of meshrouter nodes: multi-hop throughput, RPC latency, convergence and reroute time.

Every scenario starts its own mesh the way `meshrouter mesh up` does (router.meshctl: one
`python -m router run` per node, own session, logs in a run directory), from a topology generated with
free ports (the shipped topologies' ports may be in use by someone else), and stops it afterwards.
Throughput and RPC use the shared C load generator (/work/shared/bench: amqpbench driven by
run_bench.py, built into benchmarks/build/ as node_bench.py does).

Scenarios (--scenarios, default all):
  chain        3-node chain A - B - C (topologies/chain.yaml's shape): sender on A, receiver on C
               (two inter-router hops, through B); run_bench.py throughput, unsettled and pre-settled.
  four-node    topologies/four-node.yaml's full mesh: sender / RPC caller on C, receiver / RPC server
               on B (one inter-router hop); run_bench.py throughput and rpc (sequential) [and rpc-conc].
  convergence  four-node mesh started from nothing: seconds from the first node spawn until an amqpbench
               sender on C gets credit for an address whose amqpbench receiver attached to B as soon as
               B accepted connections. A fresh mesh per run.
  reroute      diamond A-B 1, B-D 1, A-C 5, C-D 5: a paced unsettled stream (amqpbench send --rate) from
               A to D crosses B; B is killed with SIGKILL mid-stream; reroute = time from the kill until
               the first delivery after the gap arrives at D (now through C). The receiver on D is a
               python-qpid-proton Container (in a thread here) that timestamps every arrival. Audit:
               outcomes at the sender (amqpbench counts them, it does not resend) and message ids at D
               (duplicates, missing). A fresh mesh per run.

Examples:
  .venv/bin/python benchmarks/mesh_bench.py                                   # everything, 5 runs each
  .venv/bin/python benchmarks/mesh_bench.py --scenarios chain --repeat 3 --count 100000
  .venv/bin/python benchmarks/mesh_bench.py --scenarios reroute --reroute-rate 5000
  .venv/bin/python benchmarks/mesh_bench.py --scenarios chain --profile       # + py-spy of every chain node

Results: benchmarks/results/<timestamp>-<label>.json and a Markdown summary on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for _path in (BENCH_DIR, BENCH_DIR.parent):  # node_bench.py is a sibling script; router/ is the repo's
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import node_bench as nb  # noqa: E402
from harness import mesh as hm  # noqa: E402
from harness.loadgen import Client, clients, start_client  # noqa: E402,F401
from harness.mesh import Mesh, running_mesh, shipped_settings  # noqa: E402,F401
from harness.paths import HOST, REPO, BenchError  # noqa: E402,F401
from harness.procs import free_ports  # noqa: E402,F401
from harness.report import fmt  # noqa: E402
from harness.sample import median as med  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

from router.meshctl.topology import Topology  # noqa: E402

SCENARIOS = ("chain", "four-node", "convergence", "reroute")
POLL = 0.002           # s between connection attempts while waiting for a port (convergence resolution)
TARGETS = {"chain_msgs_per_s": 30000.0, "convergence_s": 0.5, "reroute_s": 0.1}

Edge = hm.Edge


def _overrides(a: argparse.Namespace) -> dict[str, Any]:
    """The topology settings the command line overrides."""
    return {"hello_interval": a.hello_interval, "link_capacity": a.link_capacity, "telemetry": a.telemetry}


def make_topology(name: str, nodes: Sequence[str], edges: Sequence[Edge], settings: dict[str, Any],
                  a: argparse.Namespace) -> Topology:
    """:func:`harness.mesh.make_topology` with --hello-interval, --link-capacity and --telemetry."""
    return hm.make_topology(name, nodes, edges, settings, **_overrides(a))


def chain_topology(a: argparse.Namespace) -> Topology:
    return hm.chain_topology(**_overrides(a))


def four_node_topology(a: argparse.Namespace) -> Topology:
    return hm.four_node_topology(**_overrides(a))


def diamond_topology(a: argparse.Namespace) -> Topology:
    return hm.diamond_topology(**_overrides(a))


# ------------------------------------------------------------------------------------------ topologies


# ---------------------------------------------------------------------------------------------- meshes


# ----------------------------------------------------------------------------------------- amqpbench


def wait_port(port: int, deadline: float, mesh: Mesh) -> float:
    """Poll until HOST:port accepts a TCP connection; return the time.time() it did."""
    while True:
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return time.time()
        except OSError:
            pass
        mesh.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"port {port} does not accept connections")
        time.sleep(POLL)


# ------------------------------------------------------------------------------------------ statistics


def spread(values: Sequence[float | None], spec: str) -> str:
    """'min–max' of the values that are not None."""
    vals = [v for v in values if v is not None]
    return f"{format(min(vals), spec)}–{format(max(vals), spec)}" if vals else "–"


def node_cpu(run: dict[str, Any], names: dict[str, str], messages: int) -> dict[str, dict[str, float | None]]:
    """Per node: CPU % of one core over the active interval and CPU µs per message, from run_bench's
    sampler (names: pid -> node id)."""
    out: dict[str, dict[str, float | None]] = {}
    for pid, p in (run.get("router", {}).get("procs") or {}).items():
        cpu = p.get("cpu_s")
        per_msg = None if cpu is None or messages <= 0 else 1e6 * cpu / messages
        out[names.get(pid, pid)] = {"cpu_pct": p.get("cpu_pct"), "us_per_msg": per_msg}
    return out


# ---------------------------------------------------------------------------- run_bench.py scenarios


def harness(a: argparse.Namespace, client: Path, mesh: Mesh, send: str, recv: str, label: str,
            workloads: str, tmp: Path) -> dict[str, Any]:
    """run_bench.py against the mesh: senders / RPC callers on node `send`, receivers / servers on `recv`,
    CPU sampled for every node."""
    out = tmp / f"{label}.json"
    cmd = [sys.executable, str(a.harness / "run_bench.py"), "--send-url", mesh.url(send),
           "--recv-url", mesh.url(recv), "--label", label, "--workloads", workloads,
           "--repeat", str(a.repeat), "--pids", ",".join(map(str, mesh.pids())), "--out", str(out),
           "--count", str(a.count), "--rpc-count", str(a.rpc_count), *shlex.split(a.bench_args)]
    res = nb.run_harness(cmd, client, mesh.alive)
    res["command"] = shlex.join(cmd)
    return res


def summarize_harness(res: dict[str, Any], mesh: Mesh) -> dict[str, Any]:
    """Medians per workload plus per-node CPU (median over runs) and the runs' spread."""
    names = {str(p.pid): n for n, p in mesh.children.items()}
    summary: dict[str, Any] = {}
    for w, runs in res["runs"].items():
        ok = [r for r in runs if "error" not in r]
        key = {"throughput": "msgs_per_s", "throughput-presettled": "msgs_per_s", "rpc": "p50_us",
               "rpc-conc": "calls_per_s"}.get(w, "msgs_per_s")
        row: dict[str, Any] = {"ok_runs": len(ok), "runs": len(runs), "key": key,
                               "values": [r.get(key) for r in ok], "median": med([r.get(key) for r in ok])}
        if w.startswith("rpc"):
            row["p50_us"] = med([r["p50_us"] for r in ok])
            row["p99_us"] = med([r["p99_us"] for r in ok])
            row["calls_per_s"] = med([r["calls_per_s"] for r in ok])
            row["p50_values"] = [r["p50_us"] for r in ok]
        if w.startswith("throughput"):
            row["missing"] = sum(r["missing"] for r in ok)
            row["released"] = sum(r.get("released", 0) for r in ok)
            row["msgs_per_s"] = med([r["msgs_per_s"] for r in ok])
        per_node: dict[str, dict[str, list[float | None]]] = {}
        for r in ok:
            msgs = int(r["received"]) if w.startswith("throughput") else 2 * (int(r["completed"]) + 100)
            for node, v in node_cpu(r, names, msgs).items():
                d = per_node.setdefault(node, {"cpu_pct": [], "us_per_msg": []})
                d["cpu_pct"].append(v["cpu_pct"])
                d["us_per_msg"].append(v["us_per_msg"])
        row["nodes"] = {n: {"cpu_pct": med(d["cpu_pct"]), "us_per_msg": med(d["us_per_msg"])}
                        for n, d in sorted(per_node.items())}
        row["errors"] = [r["error"].splitlines()[0][:120] for r in runs if "error" in r]
        summary[w] = row
    return summary


def scenario_chain(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Chain A - B - C: throughput A -> C, unsettled and pre-settled."""
    topo = chain_topology(a)
    with running_mesh(topo, tmp, keep) as mesh:
        mesh.start()
        conv = mesh.wait_converged()
        print(f"chain: up, converged (state poll) {conv:.2f} s after ready; "
              f"A={mesh.url('A')} C={mesh.url('C')}", flush=True)
        res = harness(a, client, mesh, "A", "C", "chain", a.chain_workloads, tmp)
        out: dict[str, Any] = {"topology": "chain", "send": "A", "recv": "C", "harness": res,
                               "summary": summarize_harness(res, mesh)}
        if a.profile:
            out["profile"] = profile_chain(a, client, mesh, tmp)
    return out


def scenario_four_node(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Four-node full mesh: throughput and RPC from C to B."""
    topo = four_node_topology(a)
    with running_mesh(topo, tmp, keep) as mesh:
        mesh.start()
        mesh.wait_converged()
        print(f"four-node: up; C={mesh.url('C')} B={mesh.url('B')}", flush=True)
        res = harness(a, client, mesh, "C", "B", "four-node", a.four_node_workloads, tmp)
        return {"topology": "four-node", "send": "C", "recv": "B", "harness": res,
                "summary": summarize_harness(res, mesh)}


def profile_chain(a: argparse.Namespace, client: Path, mesh: Mesh, tmp: Path) -> dict[str, Any]:
    """One extra unsettled throughput run with py-spy attached to every chain node (raw collapsed stacks
    in benchmarks/results/); returns each node's top functions by self time."""
    nb.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    opts = argparse.Namespace(profile_rate=a.profile_rate, native=a.native)
    outs = {n: nb.RESULTS_DIR / f"{a.stem}-chain-{n}.collapsed.txt" for n in mesh.topology.node_ids}
    with contextlib.ExitStack() as stack:
        for n, path in outs.items():
            stack.enter_context(nb.py_spy(mesh.pid(n), path, "raw", opts, tmp))
        cmd = [sys.executable, str(a.harness / "run_bench.py"), "--send-url", mesh.url("A"),
               "--recv-url", mesh.url("C"), "--label", "chain-profile", "--workloads", "throughput",
               "--repeat", "1", "--count", str(a.count), "--out", str(tmp / "chain-profile.json")]
        res = nb.run_harness(cmd, client, mesh.alive)
    rate = res["median"].get("throughput", {}).get("msgs_per_s")
    prof: dict[str, Any] = {"msgs_per_s_under_profiler": rate}
    for n, path in outs.items():
        total, top = nb.top_functions(path, 15)
        prof[n] = {"file": str(path.relative_to(REPO)), "samples": total,
                   "top_self": [{"function": f, "self_pct": round(100 * s / total, 1),
                                 "incl_pct": round(100 * i / total, 1)} for f, s, i in top] if total else []}
    return prof


# ------------------------------------------------------------------------------------------ convergence


def convergence_run(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path],
                    i: int) -> dict[str, Any]:
    """One fresh four-node mesh: seconds from the first spawn until a sender on C has credit for an
    address served by a receiver on B (attached as soon as B accepts connections)."""
    addr = f"conv/{i}"
    topo = four_node_topology(a)
    with running_mesh(topo, tmp, keep) as mesh, clients() as cl:
        t0 = mesh.start()
        deadline = time.monotonic() + a.convergence_timeout
        t_b = wait_port(mesh.port("B"), deadline, mesh)
        rcv = start_client(client, "recv", mesh.url("B"), ["--addr", addr, "--count", "1", "--credit", "10",
                                                           "--idle-s", "1", "--start-timeout-s",
                                                           str(a.convergence_timeout)], "receiver on B")
        cl.append(rcv)
        t_c = wait_port(mesh.port("C"), deadline, mesh)
        snd = start_client(client, "send", mesh.url("C"), ["--addr", addr, "--count", "1"], "sender on C")
        cl.append(snd)
        rcv.wait_ready(a.convergence_timeout)
        t_rcv_ready = time.time()
        sr = snd.result(a.convergence_timeout)
        rr = rcv.result(5)
        ready = ready_times(mesh, t0)
    if sr["timed_out"] or not sr.get("t_start"):
        raise BenchError(f"convergence run {i + 1}: the sender on C got no credit in "
                         f"{a.convergence_timeout:.0f} s: {sr}")
    delivered = (rr["t_first"] - t0) if rr.get("received") else None
    return {"credit_s": sr["t_start"] - t0, "delivered_s": delivered,
            "b_accepts_s": t_b - t0, "c_accepts_s": t_c - t0, "receiver_attached_s": t_rcv_ready - t0,
            "ready_s": ready, "last_ready_s": max(ready.values()) if ready else None,
            "credit_after_ready_s": sr["t_start"] - t0 - max(ready.values()) if ready else None,
            "outcome": {k: sr[k] for k in ("accepted", "released", "modified", "rejected")},
            "received": rr.get("received")}


def ready_times(mesh: Mesh, t0: float) -> dict[str, float]:
    """Seconds from the first spawn until each node's stdout got its ready line (file mtime)."""
    out = {}
    for n in mesh.topology.node_ids:
        with contextlib.suppress(OSError):
            out[n] = mesh.stdout(n).stat().st_mtime - t0
    return out


def scenario_convergence(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Repeat convergence_run on fresh meshes."""
    runs = []
    for i in range(a.repeat):
        try:
            r = convergence_run(a, client, tmp, keep, i)
        except BenchError as e:
            r = {"error": str(e)}
        runs.append(r)
        print(f"[convergence] #{i + 1}: " + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                                        for k, v in r.items() if k != "ready_s"}), flush=True)
        time.sleep(0.5)
    ok = [r for r in runs if "error" not in r]
    summary = {k: med([r[k] for r in ok]) for k in ("credit_s", "delivered_s", "b_accepts_s", "c_accepts_s",
                                                    "receiver_attached_s", "last_ready_s",
                                                    "credit_after_ready_s")}
    summary.update(ok_runs=len(ok), runs=len(runs), credit_values=[r["credit_s"] for r in ok])
    return {"topology": "four-node", "sender": "C", "receiver": "B", "runs": runs, "summary": summary}


# ---------------------------------------------------------------------------------------------- reroute


class GapReceiver(MessagingHandler):  # type: ignore[misc]
    """A python-qpid-proton receiver (Container in a thread) that records the arrival time and id of
    every message: the reroute gap needs every arrival, not only amqpbench's longest gap (the rate-paced
    amqpbench sender leaves a gap of up to 100 ms after its first message, which would hide it)."""

    def __init__(self, url: str, address: str, count: int, idle_s: float) -> None:
        super().__init__(prefetch=1000, auto_accept=True)
        self.url, self.address, self.count, self.idle_s = url, address, count, idle_s
        self.arrivals: list[tuple[float, int | None]] = []
        self.unique: set[int] = set()
        self.attached = threading.Event()
        self.done = threading.Event()
        self.error: str | None = None
        self._conn: Any = None
        self._thread = threading.Thread(target=self._run, name="gap-receiver", daemon=True)

    def start(self) -> None:
        """Run the Container in a background thread."""
        self._thread.start()

    def _run(self) -> None:
        try:
            Container(self).run()
        except Exception as e:  # report in the main thread
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.done.set()
            self.attached.set()

    def on_start(self, event: Any) -> None:
        """Connect, attach the receiver, start the idle timer."""
        self._conn = event.container.connect(self.url, reconnect=False)
        event.container.create_receiver(self._conn, self.address)
        event.container.schedule(0.1, self)

    def on_link_opened(self, event: Any) -> None:
        """The router attached our receiver."""
        self.attached.set()

    def on_message(self, event: Any) -> None:
        """Record arrival time and message id; stop once every id arrived."""
        mid = event.message.id
        mid = int(mid) if isinstance(mid, int) else None
        self.arrivals.append((time.time(), mid))
        if mid is not None:
            self.unique.add(mid)
        if len(self.unique) >= self.count:
            self._close()

    def on_timer_task(self, event: Any) -> None:
        """Stop after idle_s without a message (once something arrived)."""
        if self.done.is_set() or self._conn is None:
            return
        if self.arrivals and time.time() - self.arrivals[-1][0] > self.idle_s:
            self._close()
        elif self._conn.state & self._conn.LOCAL_ACTIVE:
            event.container.schedule(0.1, self)

    def on_transport_error(self, event: Any) -> None:
        """The connection to D failed."""
        cond = event.transport.condition
        self.error = f"transport error: {cond.name if cond else '?'}: {cond.description if cond else ''}"

    def _close(self) -> None:
        if self._conn is not None and self._conn.state & self._conn.LOCAL_ACTIVE:
            self._conn.close()

    def stop(self, timeout: float) -> None:
        """Wait for the receiver to finish (idle or complete), at most timeout s."""
        self.done.wait(timeout)

    def gap_after(self, t_kill: float, window: float) -> dict[str, Any]:
        """The interruption caused by a kill at t_kill. Deliveries that B had already written reach D's
        consumer at most a few ms after the kill, so the last one through B arrives before
        t_kill + window; the kill's gap is the longest inter-arrival gap that starts before then and
        ends after t_kill. reroute_s = end of that gap - t_kill (the first delivery through C);
        gap_s = its length; longest_gap_after_s = the longest gap anywhere after the kill (noise)."""
        times = sorted(t for t, _ in self.arrivals)
        after = [i for i in range(1, len(times)) if times[i] > t_kill]
        out: dict[str, Any] = {"reroute_s": None, "gap_s": None, "longest_gap_after_s": None,
                               "received_after_kill": len(after)}
        if not after:
            return out
        out["longest_gap_after_s"] = max(times[i] - times[i - 1] for i in after)
        near = [i for i in after if times[i - 1] <= t_kill + window]
        if near:
            i = max(near, key=lambda j: times[j] - times[j - 1])
            out["reroute_s"], out["gap_s"] = times[i] - t_kill, times[i] - times[i - 1]
        return out


def reroute_run(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path], i: int) -> dict[str, Any]:
    """One fresh diamond: paced unsettled stream A -> D through B, SIGKILL B mid-stream; the gap at D
    and the audit."""
    addr = f"reroute/{i}"
    count = int(a.reroute_rate * a.reroute_duration)
    topo = diamond_topology(a)
    rcv: GapReceiver | None = None
    with running_mesh(topo, tmp, keep) as mesh, clients() as cl:
        mesh.start()
        mesh.wait_converged()
        route_wait = mesh.wait_route("A", "D", "B")
        rcv = GapReceiver(mesh.url("D"), addr, count, a.reroute_idle)
        rcv.start()
        if not rcv.attached.wait(30) or rcv.error:
            raise BenchError(f"receiver on D not attached: {rcv.error}")
        mesh.wait_converged(address=(addr, "D"))
        snd = start_client(client, "send", mesh.url("A"),
                           ["--addr", addr, "--count", str(count), "--rate", str(a.reroute_rate)],
                           "sender on A")
        cl.append(snd)
        time.sleep(a.reroute_kill_after)
        mesh.check_alive()
        t_kill = time.time()
        mesh.kill9("B")
        mesh.children["B"].wait(5)
        limit = a.reroute_duration + a.reroute_idle + 30
        sr = snd.result(limit)
        rcv.stop(a.reroute_idle + 10)
        mesh.check_alive()
        after = mesh.state("A")["mesh"]
    if rcv.error:
        raise BenchError(f"receiver on D: {rcv.error}")
    gap = rcv.gap_after(t_kill, a.reroute_window)
    sent = sr.get("sent", 0)
    outcomes = {k: sr.get(k, 0) for k in ("accepted", "released", "modified", "rejected", "other")}
    settled = sum(outcomes.values())
    received = len(rcv.arrivals)
    unique = len(rcv.unique)
    duplicates = received - unique
    accepted_ok = outcomes["accepted"] <= unique <= outcomes["accepted"] + outcomes["modified"]
    times = [t for t, _ in rcv.arrivals]
    before = sum(1 for t in times if t <= t_kill)
    # how far behind the paced schedule D was when B died: if the mesh could not keep up with the rate,
    # arrivals after the kill are a backlog and the gap is not the reroute's alone
    lag = None
    if sr.get("t_start"):
        lag = min(count, a.reroute_rate * (t_kill - sr["t_start"])) / a.reroute_rate - before / a.reroute_rate
    return {
        **gap,
        "lag_at_kill_s": lag,
        "backlogged": lag is not None and lag > a.reroute_window,
        "received_before_kill": before,
        "last_receive_after_kill_s": (max(times) - t_kill) if times else None,
        "sent": sent, **outcomes, "unsettled": sent - settled,
        "received": received, "duplicates": duplicates, "missing": count - unique,
        "count": count, "audit_ok": settled == sent and duplicates == 0 and accepted_ok,
        "sender_timed_out": sr["timed_out"], "a_next_hop_d_after": after["next_hops"].get("D"),
        "rerouted": gap["reroute_s"] is not None,
        "route_wait_s": route_wait,
    }


def scenario_reroute(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Repeat reroute_run on fresh diamonds."""
    runs = []
    for i in range(a.repeat):
        try:
            r = reroute_run(a, client, tmp, keep, i)
        except BenchError as e:
            r = {"error": str(e)}
        runs.append(r)
        print(f"[reroute] #{i + 1}: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                                    for k, v in r.items()}), flush=True)
        time.sleep(0.5)
    ok = [r for r in runs if "error" not in r]
    summary: dict[str, Any] = {k: med([r[k] for r in ok])
                               for k in ("reroute_s", "gap_s", "longest_gap_after_s", "lag_at_kill_s")}
    summary["reroute_values"] = [r["reroute_s"] for r in ok]
    for k in ("sent", "accepted", "released", "modified", "rejected", "other", "unsettled", "received",
              "duplicates", "missing"):
        summary[k] = sum(r[k] or 0 for r in ok)
    summary.update(ok_runs=len(ok), runs=len(runs), audit_ok=sum(r["audit_ok"] for r in ok),
                   rerouted=sum(r["rerouted"] for r in ok), backlogged=sum(r["backlogged"] for r in ok))
    return {"topology": "diamond A-B 1, B-D 1, A-C 5, C-D 5", "runs": runs, "summary": summary,
            "rate": a.reroute_rate}


# ---------------------------------------------------------------------------------------------- report


def markdown(a: argparse.Namespace, res: dict[str, Any]) -> str:
    """The summary tables for BENCHMARKS.md."""
    lines: list[str] = []
    thr = [("chain", "A → C (2 hops, via B)", w) for w in ("throughput", "throughput-presettled")]
    thr += [("four-node", "C → B (1 hop)", w)
            for w in ("throughput", "throughput-presettled", "rpc", "rpc-conc")]
    rows = [(s, path, w, res[s]["summary"][w]) for s, path, w in thr
            if s in res and "summary" in res[s] and w in res[s]["summary"]]
    if rows:
        lines += ["| mesh | path | workload | median | runs (min–max) | RPC p50 / p99 µs | CPU % per node "
                  "| CPU µs/msg per node | runs ok | notes |",
                  "|---|---|---|---:|---|---|---|---|---:|---|"]
        for s, path, w, r in rows:
            if w.startswith("rpc"):
                rate = f"{r['calls_per_s']:,.0f} calls/s" if r.get("calls_per_s") else "–"
                vals = spread(r["p50_values"], ",.0f") + " µs p50"
                lat = f"{fmt(r.get('p50_us'), ',.0f')} / {fmt(r.get('p99_us'), ',.0f')}"
            else:
                rate = f"{r['median']:,.0f} msg/s" if r.get("median") else "–"
                vals = spread(r["values"], ",.0f")
                lat = "–"
            cpu = " ".join(f"{n} {fmt(v['cpu_pct'], '.0f')}" for n, v in r["nodes"].items())
            us = " ".join(f"{n} {fmt(v['us_per_msg'], '.1f')}" for n, v in r["nodes"].items())
            notes = []
            if r.get("missing"):
                notes.append(f"missing {r['missing']:,}")
            if r.get("released"):
                notes.append(f"released {r['released']:,}")
            notes += [f"error: {e}" for e in r["errors"]]
            lines.append(f"| {s} | {path} | {w} | {rate} | {vals} | {lat} | {cpu} | {us} "
                         f"| {r['ok_runs']}/{r['runs']} | {'; '.join(notes)} |")
        lines.append("")
    if "convergence" in res:
        c = res["convergence"]["summary"]
        lines += ["| convergence (four-node, fresh mesh per run) | median s | runs |", "|---|---:|---|"]
        vals = " ".join(f"{v:.2f}" for v in c["credit_values"])
        lines.append(f"| spawn → sender on C has credit (receiver on B) | {fmt(c['credit_s'], '.2f')} "
                     f"| {vals} ({c['ok_runs']}/{c['runs']} ok) |")
        lines.append(f"| spawn → message delivered on B | {fmt(c['delivered_s'], '.2f')} | |")
        lines.append(f"| spawn → last node's ready line | {fmt(c['last_ready_s'], '.2f')} | |")
        lines.append(f"| last node's ready line → sender on C has credit | "
                     f"{fmt(c['credit_after_ready_s'], '.2f')} | |")
        lines.append(f"| spawn → B / C accept connections | {fmt(c['b_accepts_s'], '.2f')} / "
                     f"{fmt(c['c_accepts_s'], '.2f')} | |")
        lines.append("")
    if "reroute" in res:
        r = res["reroute"]["summary"]

        def ms(v: float | None) -> str:
            return fmt(None if v is None else 1000 * v, ".0f")

        vals = " ".join(ms(v) for v in r["reroute_values"])
        head = f"reroute (diamond, {a.reroute_rate:g} msg/s unsettled A → D, kill -9 B)"
        lines += [f"| {head} | median | runs |",
                  "|---|---:|---|",
                  f"| kill → first delivery at D via C | {ms(r['reroute_s'])} ms "
                  f"| {vals} ms ({r['rerouted']}/{r['runs']} rerouted) |",
                  f"| gap in arrivals at D across the kill | {ms(r['gap_s'])} ms | |",
                  f"| longest gap anywhere after the kill (noise) | {ms(r['longest_gap_after_s'])} ms | |",
                  f"| D behind the paced schedule at the kill | {ms(r['lag_at_kill_s'])} ms "
                  f"| {r['backlogged']} run(s) backlogged |",
                  f"| audit, all runs: sent / accepted / released / modified / rejected / unsettled "
                  f"| {r['sent']:,} / {r['accepted']:,} / {r['released']:,} / {r['modified']:,} / "
                  f"{r['rejected']:,} / {r['unsettled']:,} | |",
                  f"| audit, all runs: received at D / duplicates / missing ids | {r['received']:,} / "
                  f"{r['duplicates']:,} / {r['missing']:,} "
                  f"| audit consistent in {r['audit_ok']}/{r['ok_runs']} |",
                  ""]
    return "\n".join(lines)


def targets(res: dict[str, Any]) -> list[str]:
    """One line per target: measured median against it."""
    out = []
    if "chain" in res:
        v = res["chain"]["summary"].get("throughput", {}).get("median")
        out.append(f"chain unsettled >= {TARGETS['chain_msgs_per_s']:,.0f} msg/s: {fmt(v, ',.0f')} "
                   f"({'met' if v and v >= TARGETS['chain_msgs_per_s'] else 'missed'})")
    if "convergence" in res:
        v = res["convergence"]["summary"]["credit_s"]
        out.append(f"four-node converged <= {TARGETS['convergence_s']} s after start: {fmt(v, '.3f')} s "
                   f"({'met' if v is not None and v <= TARGETS['convergence_s'] else 'missed'})")
    if "reroute" in res:
        v = res["reroute"]["summary"]["reroute_s"]
        out.append(f"reroute <= {1000 * TARGETS['reroute_s']:.0f} ms: "
                   f"{fmt(None if v is None else 1000 * v, '.0f')} ms "
                   f"({'met' if v is not None and v <= TARGETS['reroute_s'] else 'missed'})")
    return out


# ------------------------------------------------------------------------------------------------ main


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help=f"comma separated, from {', '.join(SCENARIOS)} (default: all)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per measurement; medians are reported")
    ap.add_argument("--count", type=int, default=200000, help="messages per throughput run")
    ap.add_argument("--rpc-count", type=int, default=5000, help="sequential calls per rpc run")
    ap.add_argument("--chain-workloads", default="throughput,throughput-presettled",
                    help="run_bench.py workloads A -> C in the chain "
                         "(default throughput,throughput-presettled)")
    ap.add_argument("--four-node-workloads", default="throughput,rpc",
                    help="run_bench.py workloads C -> B in the four-node mesh (default throughput,rpc; "
                         "also throughput-presettled, rpc-conc)")
    ap.add_argument("--bench-args", default="", help='extra run_bench.py options, e.g. "--settle-s 1"')
    ap.add_argument("--hello-interval", type=float, default=None,
                    help="override router.hello_interval (and hello_max_age = 3x) of every node; default: "
                         "the shipped topologies' settings (node defaults)")
    ap.add_argument("--link-capacity", type=int, default=None,
                    help="override link_capacity of every node (default: the node default, 250)")
    ap.add_argument("--telemetry", type=Path, default=None,
                    help="every node writes telemetry into this directory (what it costs: compare runs)")
    ap.add_argument("--convergence-timeout", type=float, default=30.0,
                    help="give up a convergence run after S s")
    ap.add_argument("--reroute-rate", type=float, default=2000.0, help="msg/s of the paced A -> D stream")
    ap.add_argument("--reroute-duration", type=float, default=3.0,
                    help="seconds of stream at that rate (count = rate x duration)")
    ap.add_argument("--reroute-kill-after", type=float, default=1.0,
                    help="seconds after the sender starts at which B is killed")
    ap.add_argument("--reroute-window", type=float, default=0.05,
                    help="the kill's gap must start within S s after the kill (default 0.05); a run whose "
                         "receiver was more than S s behind the paced schedule is flagged as backlogged")
    ap.add_argument("--reroute-idle", type=float, default=5.0,
                    help="the receiver on D stops after this many seconds without a message")
    ap.add_argument("--profile", action="store_true",
                    help="chain: one extra throughput run with py-spy on every node (needs py-spy)")
    ap.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="py-spy --native")
    ap.add_argument("--label", default="mesh", help="name of the result file")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep every mesh's run directory (node configs, stdout, stderr logs) under /tmp")
    ap.add_argument("--harness", type=Path, default=nb.DEFAULT_HARNESS,
                    help="directory holding run_bench.py, amqpbench.c and build.sh")
    a = ap.parse_args(argv)
    a.scenario_list = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    unknown = [s for s in a.scenario_list if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenarios: {', '.join(unknown)}")
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    if a.reroute_kill_after >= a.reroute_duration:
        ap.error("--reroute-kill-after must be shorter than --reroute-duration")
    return a


def run(a: argparse.Namespace) -> int:
    """Every chosen scenario, each with its own mesh, everything stopped on the way out."""
    client = nb.ensure_client(a.harness)
    a.stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', a.label)}"
    record: dict[str, Any] = {"label": a.label, "command": nb.command_line(), "host": nb.host_info(),
                              "load_before": os.getloadavg(), "results": {}}
    funcs = {"chain": scenario_chain, "four-node": scenario_four_node, "convergence": scenario_convergence,
             "reroute": scenario_reroute}
    keep: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix="mesh_bench-"))
    try:
        for s in a.scenario_list:
            print(f"== {s}", flush=True)
            t = time.monotonic()
            load = os.getloadavg()[0]
            try:
                record["results"][s] = funcs[s](a, client, tmp, keep)
            except nb.BenchError as e:
                print(f"mesh_bench: {s} failed: {e}", file=sys.stderr, flush=True)
                record["results"][s] = {"error": str(e)}
            record["results"][s]["load_1min"] = [load, os.getloadavg()[0]]
            print(f"== {s} done in {time.monotonic() - t:.0f} s (1-min load average {load:.2f} before, "
                  f"{os.getloadavg()[0]:.2f} after)", flush=True)
    finally:
        if a.keep_logs:
            print(f"run directories with the nodes' configs and logs kept in {tmp}", flush=True)
        elif keep:
            print(f"kept run directories with logs: {', '.join(map(str, keep))}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    record["load_after"] = os.getloadavg()
    good = {k: v for k, v in record["results"].items() if "error" not in v}
    record["markdown"] = markdown(a, good)
    record["targets"] = targets(good)
    nb.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = nb.RESULTS_DIR / f"{a.stem}.json"
    out.write_text(json.dumps(record, indent=1, default=str))
    print()
    print(record["markdown"])
    for line in record["targets"]:
        print("target: " + line)
    for k, v in record["results"].items():
        print(f"{k}: 1-min load average {v['load_1min'][0]:.2f} before, {v['load_1min'][1]:.2f} after")
    prof = good.get("chain", {}).get("profile")
    if prof:
        print(f"\nprofile (py-spy, chain throughput, {prof['msgs_per_s_under_profiler']} msg/s under it):")
        for n in ("A", "B", "C"):
            top = ", ".join(f"{t['function']} {t['self_pct']}%" for t in prof[n]["top_self"][:8])
            print(f"  {n} ({prof[n]['samples']} samples, {prof[n]['file']}): {top}")
    print(f"\nCommand: {record['command']}\nLoad average before/after: "
          f"{' '.join(f'{x:.2f}' for x in record['load_before'])} / "
          f"{' '.join(f'{x:.2f}' for x in record['load_after'])}\nResults: {out.relative_to(REPO)}")
    failed = [k for k, v in record["results"].items() if "error" in v]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: Ctrl-C and SIGTERM stop everything we started, then exit."""
    a = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run(a)
    except nb.BenchError as e:
        print(f"mesh_bench: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mesh_bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
