#!/usr/bin/env python3
"""Restart of a busy node (issue 33, point 3): kill -9 of the node holding 10,000 clients and 20,000 addresses
in the four-node mesh, and its start again.

The mesh is topologies/four-node.yaml's on fixed free ports, default control-plane timers (HELLO 1 s, a
neighbour lost after 3 s), ``idle_timeout: 0`` (the raw clients send no heartbeats); A's client listener
takes ``max_connections`` 20,000 (``--backlog`` to set its accept queue). ``--processes`` processes of
tests.support.storm hold ``--clients`` clients on A with ``--links`` receivers each (unique addresses);
when A dies they redial at once, then every 0.1 s (±50%; ``--client-backoff 2``: 0.1, 0.2, 0.4 ... s, as
Proton's reconnect does). Canary RPC streams (B → D, D → C; each in its own process, ``--canary-rate``
calls/s) run throughout. A sender on B has ``--in-flight`` deliveries in
flight to a receiver on A that holds them unsettled. Measured, from the kill:

* A's restart (its ``ready:`` line), every client up again, C (not on a canary's path) routing every
  address again (its SIGUSR1 state line, polled every 0.2 s; counted only after it first dropped, so
  that routes to the dead instance do not count);
* the outcomes of the deliveries in flight (every one must come back RELEASED or MODIFIED);
* the canaries' p50 / p99 / max from the kill until everything is back, plus one second.

``--pin`` runs A and its clients' processes on the first CPU and everything else (B, C, D, the canaries,
this script) on the others, as if A and its clients had a host of their own: on one machine of two cores
the restarting node and ten redialing client processes otherwise take both cores from the other nodes.

    .venv/bin/python benchmarks/restart_bench.py
    .venv/bin/python benchmarks/restart_bench.py --clients 2000 --processes 4 --label small

Prints a Markdown table and writes benchmarks/results/<timestamp>-restart.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for p in (str(REPO), str(REPO / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

import yaml  # noqa: E402
from proton import Delivery  # noqa: E402
from scale_bench import ECHO, CanaryProcess, _remote_addresses  # noqa: E402
from storm_bench import NodeRun, collect  # noqa: E402

from router.meshctl.probe import StateReader  # noqa: E402
from tests.support.clients import Client  # noqa: E402
from tests.support.ports import free_ports  # noqa: E402
from tests.support.storm import StormProcess  # noqa: E402
from tests.support.waiting import pump  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
TOPOLOGY = REPO / "topologies" / "four-node.yaml"
ECHO_C = "openstack.org/om/rpc/anycast/restart/echo-c"
HELD = "balanced/restart/held"
TURNS = REPO / "benchmarks" / "harness" / "turns.py"


def mesh_configs(run_dir: Path, backlog: int | None, max_connections: int, turns_ms: float | None = None,
                 a_prefix: list[str] | None = None) -> tuple[dict[str, NodeRun], dict]:
    topo = yaml.safe_load(TOPOLOGY.read_text())
    names = list(topo["nodes"])
    edges = [(e["from"], e["to"], e["cost"]) for e in topo["edges"]]
    ports = iter(free_ports(2 * len(names)))
    client = {n: next(ports) for n in names}
    ir = {n: next(ports) for n in names}
    order: list[str] = []
    while len(order) < len(names):
        order += [n for n in names if n not in order and all(t in order for f, t, _ in edges if f == n)]
    nodes = {}
    for n in order:
        listener: dict[str, Any] = {"host": "127.0.0.1", "port": client[n], "role": "normal"}
        if n == "A":
            listener["max_connections"] = max_connections
            if backlog is not None:
                listener["backlog"] = backlog
        cfg = {"node": {"id": n, "link_capacity": 250, "idle_timeout": 0, "log_level": "info"},
               "listeners": [listener,
                             {"host": "127.0.0.1", "port": ir[n], "role": "inter-router", "cost": 1}],
               "connectors": [{"host": "127.0.0.1", "port": ir[t], "cost": c} for f, t, c in edges if f == n],
               "addresses": topo["addresses"]}
        launcher = None
        if turns_ms is not None and n != "A":        # the survivors' loop callbacks, timed
            launcher = [sys.executable, str(TURNS), str(run_dir / f"{n}-turns.json"), str(turns_ms), "--"]
        if n == "A" and a_prefix:
            launcher = [*a_prefix, sys.executable, "-m", "router"]
        nodes[n] = NodeRun(n, cfg, run_dir, launcher)
    return nodes, client


def remote_count(node: NodeRun, timeout: float = 2.0) -> int | None:
    """Addresses with a remote destination in a fresh SIGUSR1 state line of the node (None if none came)."""
    reader = StateReader(node.proc.pid, node.stderr)
    reader.skip_existing()
    if not reader.request():
        return None
    deadline = time.monotonic() + timeout
    while not reader.read():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)
    return None if reader.state is None else _remote_addresses(reader.state)


def _pump_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"restart_bench: timed out waiting for {what}")
        pump(0.05)


def _poll(node: NodeRun, samples: list[tuple[float, int]], done: threading.Event) -> None:
    """C's count of routed addresses every 0.2 s (a SIGUSR1 state line each)."""
    while not done.is_set():
        n = remote_count(node)
        if n is not None:
            samples.append((time.monotonic(), n))
        done.wait(0.2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=10000)
    p.add_argument("--processes", type=int, default=10)
    p.add_argument("--links", type=int, default=2)
    p.add_argument("--backlog", type=int)
    p.add_argument("--in-flight", type=int, default=200)
    p.add_argument("--canary-rate", type=float, default=50.0)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--label", default="")
    p.add_argument("--turns", type=float, metavar="MS",
                   help="time B's, C's and D's loop callbacks; report those of MS or more after the kill")
    p.add_argument("--profile", metavar="DIR", help="py-spy B, C and D for 4 s from the kill (raw stacks)")
    p.add_argument("--client-backoff", type=float, default=1.0, metavar="F",
                   help="A's clients wait F times longer after each refused dial (Proton's own: 2)")
    p.add_argument("--pin", action="store_true",
                   help="A and its clients on the first CPU, the rest on the others (see above)")
    args = p.parse_args()
    a_prefix = pin_a_apart() if args.pin else None
    RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"args": vars(args), "load_before": os.getloadavg(),
                           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    storms: list[StormProcess] = []
    canaries: dict[str, CanaryProcess] = {}
    addresses = args.clients // args.processes * args.processes * args.links
    with tempfile.TemporaryDirectory(prefix="restart-bench-") as tmp:
        nodes, client_port = mesh_configs(Path(tmp), args.backlog, 2 * args.clients, args.turns, a_prefix)
        url = {n: f"amqp://127.0.0.1:{port}" for n, port in client_port.items()}
        try:
            for node in nodes.values():
                node.start()
            canaries["B→D"] = CanaryProcess(url["B"], url["D"], ECHO, args.canary_rate, "D")
            canaries["D→C"] = CanaryProcess(url["D"], url["C"], ECHO_C, args.canary_rate, "C")
            time.sleep(2.0)
            base = remote_count(nodes["C"]) or 0
            per = args.clients // args.processes
            storms = [StormProcess(client_port["A"], per, args.links, name=f"r{i}", prefix=a_prefix,
                                   backoff=args.client_backoff)
                      for i in range(args.processes)]
            t = time.monotonic()
            for s in storms:
                s.go()
            first = collect(storms, args.timeout)
            if first is None:
                raise SystemExit("restart_bench: not every client came up on the fresh node")
            out["fresh_all_up_s"] = max(r["all_up"] for r in first) - t
            deadline = time.monotonic() + args.timeout
            while (remote_count(nodes["C"]) or 0) < base + addresses and time.monotonic() < deadline:
                time.sleep(0.2)
            out["fresh_routed_s"] = time.monotonic() - t
            # deliveries in flight through A: held unsettled by a receiver on A
            holder = Client(url["A"])
            rcv = holder.receiver(HELD, credit=args.in_flight, auto_accept=False)
            snd = Client(url["B"]).sender(HELD)
            _pump_until(lambda: snd.credit >= args.in_flight, 120, "credit toward A's held receiver")
            trackers = [snd.send(f"m{i}") for i in range(args.in_flight)]
            _pump_until(lambda: len(rcv.received) >= args.in_flight, 60, "the deliveries held on A")
            time.sleep(2.0)
            samples: list[tuple[float, int]] = []
            polling = threading.Event()
            poller = threading.Thread(target=_poll, args=(nodes["C"], samples, polling), daemon=True)
            poller.start()
            spies = [subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-r", "500",
                                       "-d", "4", "-f", "raw", "-o", str(Path(args.profile) / f"{n}.txt"),
                                       "-p", str(nodes[n].proc.pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for n in ("B", "C", "D")] if args.profile else []
            time.sleep(0.5 if spies else 0)
            t0 = nodes["A"].kill9()
            ready = nodes["A"].start()
            back = collect(storms, args.timeout)
            all_up = None if back is None else max(r["all_up"] for r in back)
            deadline = time.monotonic() + args.timeout
            dropped = routed = None
            full = base + addresses
            while routed is None and time.monotonic() < deadline:
                pump(0.05)
                dropped = next((t for t, n in list(samples) if t > t0 and n < full), None)
                if dropped is not None:
                    routed = next((t for t, n in list(samples) if t > dropped and n >= full), None)
            polling.set()
            for spy in spies:
                spy.wait(30)
            end = max(x for x in (all_up, routed, ready) if x is not None)
            for _ in range(100):
                pump(0.01)
            states = [t.state for t in trackers]
            out["restart"] = {
                "restart_s": ready - t0, "clients_back_s": None if all_up is None else all_up - t0,
                "clients_back_after_ready_s": None if all_up is None else all_up - ready,
                "c_dropped_s": None if dropped is None else dropped - t0,
                "c_routes_all_s": None if routed is None else routed - t0,
                "retransmitted": None if back is None else sum(r["retransmitted"] for r in back),
                "in_flight": {"sent": len(trackers), "settled": sum(1 for t in trackers if t.settled),
                              "released": states.count(Delivery.RELEASED),
                              "modified": states.count(Delivery.MODIFIED),
                              "other": sum(1 for s in states
                                           if s not in (Delivery.RELEASED, Delivery.MODIFIED))},
                "canaries": {k: c.window(t0, end + 1.0) for k, c in canaries.items()},
            }
            out["canaries_before"] = {k: c.window(0, t0) for k, c in canaries.items()}
        finally:
            for s in storms:
                s.close()
            for c in canaries.values():
                c.stop()
            for node in nodes.values():
                node.stop()
        if args.turns is not None and "restart" in out:
            out["turns"] = long_turns(Path(tmp), t0, end + 1.0)
    out["load_after"] = os.getloadavg()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{stamp}-restart{'-' + args.label if args.label else ''}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    r = out["restart"]
    print(f"{args.clients} clients x {args.links} links on A ({addresses} addresses), load "
          f"{out['load_before'][0]:.1f} → {out['load_after'][0]:.1f}"
          + (f"; A and its clients on CPU {a_prefix[-1]}, the rest on the others" if a_prefix else ""))
    print("| measure | value | goal |\n|---|---|---|")
    print(f"| fresh: all clients up / C routes all | {out['fresh_all_up_s']:.2f} / "
          f"{out['fresh_routed_s']:.2f} s | |")
    print(f"| kill -9 → A ready | {r['restart_s']:.2f} s | |")
    print(f"| kill -9 → every client back | {_f(r['clients_back_s'])} s ({r['retransmitted']} retransmitted) "
          "| ≤ 10 s |")
    print(f"| kill -9 → C routes every address (dropped at {_f(r['c_dropped_s'])} s) "
          f"| {_f(r['c_routes_all_s'])} s | ≤ 10 s |")
    fl = r["in_flight"]
    print(f"| deliveries in flight through A | {fl['sent']}: {fl['released']} RELEASED, "
          f"{fl['modified']} MODIFIED, {fl['other']} other, {fl['sent'] - fl['settled']} unsettled "
          "| all RELEASED/MODIFIED |")
    for k, c in r["canaries"].items():
        print(f"| canary {k} meanwhile p50 / p99 / max | {_f(c.get('p50_ms'))} / {_f(c.get('p99_ms'))} / "
              f"{_f(c.get('max_ms'))} ms ({c['calls']} calls, {c['errors']} errors) | p99 ≤ 20 ms |")
    for n, rows in out.get("turns", {}).items():
        print(f"| {n}'s callbacks of {args.turns:g} ms or more after the kill | {len(rows)}; longest: "
              + ", ".join(f"{w:.0f} ms ({c:.0f} CPU) {name.rsplit('.', 1)[-1]} at +{s:.2f} s"
                          for s, w, c, name in rows[:4]) + " | |")
    print(f"\n(details: {path.relative_to(REPO)})")
    return 0


def pin_a_apart() -> list[str]:
    """Keep this process (and so B, C, D and the canaries it starts) off the first CPU; the command prefix
    that runs A and its clients on it."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("restart_bench: --pin needs two CPUs at least")
    os.sched_setaffinity(0, cpus[1:])
    return ["taskset", "-c", str(cpus[0])]


def long_turns(run_dir: Path, start: float, end: float) -> dict[str, list]:
    """Each timed node's callbacks that began in [start, end]: (seconds after start, wall ms, CPU ms, name),
    longest first."""
    out = {}
    for f in sorted(run_dir.glob("*-turns.json")):
        rows = [(t - start, 1000 * w, 1000 * c, name) for t, w, c, name in json.loads(f.read_text())
                if start <= t <= end]
        out[f.name.split("-")[0]] = sorted(rows, key=lambda r: -r[1])
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
