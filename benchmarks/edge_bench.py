#!/usr/bin/env python3
"""Edge mode with real processes (issue 31, point 7): 3 interiors and N edge nodes (default 200).

Interiors I0..I2 are fully meshed, each with a `role: edge` listener; edge k has uplinks to I(k mod 3)
(cost 1) and I(k+1 mod 3) (cost 2, its standby). One test process holds a client connection to every
edge: a consumer on `closest/srv/E<k>` (an echo-less "server": it accepts) and an anonymous sender.
Measured, in order:

* **start**: seconds until every edge routes through its cheapest uplink;
* **memory**: each interior's RSS growth from before the edges to after, per edge connection it holds
  (active and standby);
* **reach**: every edge sends one message to every other edge's consumer (N x (N-1) deliveries); the
  outcomes at the senders and the messages received;
* **new address**: targeted senders on every other edge wait for a consumer that then attaches on one
  edge; seconds until the last of them gets credit (routable from all others);
* **idle CPU**: CPU seconds of all N+3 processes over `--idle` seconds with nothing to do, as % of one core;
* **failover**: a producer on an edge of I0 streams to a consumer on an edge of I1 (RELEASED / MODIFIED
  are sent again); I0 is killed mid-stream; each of I0's edges logs the uplink it moves to (its log line's
  time minus the kill's); the stream's audit (ids never accepted: lost).

    .venv/bin/python benchmarks/edge_bench.py                # 200 edges
    .venv/bin/python benchmarks/edge_bench.py --edges 50

Prints a Markdown summary and writes benchmarks/results/<timestamp>-edge.json.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.clients import ACCEPTED, Client, make_message, outcome_name  # noqa: E402
from tests.support.edges import state_line  # noqa: E402
from tests.support.nodes import MESH_RULES, NodeProcess, kill9, spawn, stop  # noqa: E402
from tests.support.ports import free_ports  # noqa: E402
from tests.support.traffic import stream_across_a_kill  # noqa: E402
from tests.support.waiting import close_all, pump, pump_for, wait_until  # noqa: E402

MOVED_RE = re.compile(r"^(\S+ \S+) INFO router.node.edges: edge traffic goes through interior (\S+)")
HZ = os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wait_ready(nodes: list[NodeProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for n in nodes:
        out = n.stderr_path.with_suffix(".stdout")
        while "ready:" not in (out.read_text(errors="replace") if out.exists() else ""):
            if n.proc.poll() is not None:
                raise SystemExit(f"{n.node_id} exited: {n.stderr_tail()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{n.node_id} not ready within {timeout}s")
            time.sleep(0.05)


def base(node_id: str, port: int, idle: float) -> dict:
    return {"node": {"id": node_id, "idle_timeout": idle},
            "listeners": [{"host": "127.0.0.1", "port": port}],
            "addresses": {"default": "balanced",
                          "rules": [{"prefix": p, "distribution": d} for p, d in MESH_RULES]}}


def start(args, tmp: Path) -> tuple[list[NodeProcess], list[NodeProcess], list[int]]:
    ni = args.interiors
    ports = free_ports(3 * ni + args.edges)
    client, inter, edge_ports = ports[:ni], ports[ni:2 * ni], ports[2 * ni:3 * ni]
    interiors = []
    for i in range(ni):
        cfg = base(f"I{i}", client[i], args.idle_timeout)
        cfg["listeners"] += [{"host": "127.0.0.1", "port": inter[i], "role": "inter-router"},
                             {"host": "127.0.0.1", "port": edge_ports[i], "role": "edge"}]
        cfg["connectors"] = [{"host": "127.0.0.1", "port": inter[j]} for j in range(i)]
        cfg["router"] = {"hello_interval": 0.5, "hello_max_age": 1.5, "ra_interval_flux": 1.0}
        interiors.append(spawn(cfg, tmp, i))
    wait_ready(interiors, 60)
    wait_until(lambda: all(len(state_line(n)["mesh"]["reachable"]) == ni - 1 for n in interiors), 30,
               "interiors converged")
    return interiors, [], [*edge_ports, *ports[3 * ni:]]


def start_edges(args, tmp: Path, ports: list[int]) -> list[NodeProcess]:
    ni = args.interiors
    edge_ports, client = ports[:ni], ports[ni:]
    edges = []
    for k in range(args.edges):
        cfg = base(f"E{k}", client[k], args.idle_timeout)
        cfg["router"] = {"mode": "edge"}
        cfg["uplinks"] = [{"host": "127.0.0.1", "port": edge_ports[k % ni], "cost": 1},
                          {"host": "127.0.0.1", "port": edge_ports[(k + 1) % ni], "cost": 2}]
        edges.append(spawn(cfg, tmp, 100 + k))
        if k % args.batch == args.batch - 1:
            wait_ready(edges[-args.batch:], 120)
    wait_ready(edges, 120)
    return edges


def uplinks(edges: list[NodeProcess]) -> dict[str, str | None]:
    return {e.node_id: state_line(e, 10)["edge"]["uplink"] for e in edges}


def stream(s, rx, kill, total: int, kill_after: int, deadline: float = 60.0) -> dict:
    """Send `total` ids from `s` (resending RELEASED / MODIFIED) while `rx` accepts; `kill()` once
    `kill_after` reached `rx` (tests.support.traffic.stream_across_a_kill, as the failover test)."""
    st = stream_across_a_kill(s, rx, kill, total, kill_after, deadline)
    outcomes = Counter(outcome_name(x) for states in st.per_id.values() for x in states)
    accepted = {mid for mid, states in st.per_id.items() if ACCEPTED in states}
    return {"ids": total, "accepted_ids": len(accepted), "lost": total - len(accepted),
            "outcomes": dict(outcomes), "received": len(rx.received)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=200)
    ap.add_argument("--interiors", type=int, default=3)
    ap.add_argument("--batch", type=int, default=20, help="edges started at once")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of the idle CPU measurement")
    ap.add_argument("--idle-timeout", type=float, default=16.0, help="every node's idle_timeout")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    args = ap.parse_args()
    faulthandler.register(signal.SIGUSR2, all_threads=True)     # kill -USR2 <pid>: where it waits
    tmp = Path(tempfile.mkdtemp(prefix="edge-bench-"))
    result: dict = {"edges": args.edges, "interiors": args.interiors, "load_before": os.getloadavg()}
    nodes: list[NodeProcess] = []
    try:
        t0 = time.monotonic()
        interiors, _, ports = start(args, tmp)
        nodes += interiors
        time.sleep(1.0)
        rss0 = {n.node_id: rss(n.pid) for n in interiors}
        edges = start_edges(args, tmp, ports)
        nodes += edges
        want = {e.node_id: f"I{int(e.node_id[1:]) % args.interiors}" for e in edges}
        wait_until(lambda: uplinks(edges) == want, 120, "every edge on its cheapest uplink")
        result["start_s"] = round(time.monotonic() - t0, 1)
        time.sleep(2.0)
        per_conn = {}
        for n in interiors:
            conns = state_line(n)["edge"]["edges"]
            grown = (rss(n.pid) - rss0[n.node_id]) / 1024
            per_conn[n.node_id] = {"edge_connections": conns, "rss_growth_kib": round(grown),
                                   "kib_per_edge_connection": round(grown / conns, 1)}
        result["memory"] = per_conn
        print(f"started {args.edges} edges in {result['start_s']} s; memory {per_conn}", flush=True)

        # reach: every edge to every other edge's consumer
        clients = {}
        for e in edges:
            clients[e.node_id] = Client(e.url)
        print(f"{len(clients)} clients connected", flush=True)
        rx = {k: c.receiver(f"closest/srv/{k}", credit=args.edges + 10) for k, c in clients.items()}
        anon = {k: c.sender(None) for k, c in clients.items()}
        print("consumers and anonymous senders attached", flush=True)
        wait_until(lambda: all(state_line(n)["mesh"]["addresses"] >= args.edges * (args.interiors - 1)
                               // args.interiors for n in interiors), 30, "addresses known")
        pump_for(1.0)
        t = time.monotonic()
        trackers = []
        for src in clients:
            trackers += [anon[src].send(make_message(src, address=f"closest/srv/{dst}"))
                         for dst in clients if dst != src]
            pump(0.0)           # every client keeps talking (the nodes' idle timeout is 16 s)
        waiting = list(trackers)

        def settled() -> bool:         # pops the settled ones: the predicate stays cheap
            while waiting and waiting[-1].settled:
                waiting.pop()
            if waiting and waiting[0].settled:
                waiting[:] = [tr for tr in waiting if not tr.settled]
            return not waiting
        wait_until(settled, 600, "every delivery settled")
        outcomes = Counter(outcome_name(tr.state) for tr in trackers)
        received = sum(len(r.received) for r in rx.values())
        result["reach"] = {"deliveries": len(trackers), "outcomes": dict(outcomes), "received": received,
                           "seconds": round(time.monotonic() - t, 1)}
        print(f"reach: {result['reach']}", flush=True)

        # a new address, routable from every other edge
        names = list(clients)
        late = [clients[k].sender("closest/late", wait=False) for k in names[1:]]
        pump(1.0)
        assert all(s.credit == 0 for s in late), "credit before any consumer"
        t = time.monotonic()
        clients[names[0]].receiver("closest/late", credit=10, wait=False)
        got: dict[int, float] = {}

        def all_credit() -> bool:
            now = time.monotonic()
            for i, s in enumerate(late):
                if i not in got and s.credit > 0:
                    got[i] = now - t
            return len(got) == len(late)
        wait_until(all_credit, 30, "credit at every other edge")
        lat = sorted(got.values())
        result["new_address"] = {"senders": len(late), "median_s": round(statistics.median(lat), 3),
                                 "max_s": round(lat[-1], 3)}
        print(f"new address: {result['new_address']}", flush=True)

        # idle CPU
        pump_for(3.0)
        pids = [n.pid for n in nodes]
        c0, w0 = sum(cpu_ticks(p) for p in pids), time.monotonic()
        end = time.monotonic() + args.idle
        while time.monotonic() < end:
            pump(0.2)               # the clients answer heartbeats; they send nothing else
        c1, w1 = sum(cpu_ticks(p) for p in pids), time.monotonic()
        result["idle_cpu_pct_of_one_core"] = round((c1 - c0) / HZ / (w1 - w0) * 100, 1)
        result["load_idle"] = os.getloadavg()
        print(f"idle CPU: {result['idle_cpu_pct_of_one_core']}% of one core over {w1 - w0:.1f}s "
              f"(load {result['load_idle']})", flush=True)

        # failover: kill I0 mid-stream
        on_i0 = [e for e in edges if want[e.node_id] == "I0"]
        src, dst = on_i0[0].node_id, next(e.node_id for e in edges if want[e.node_id] == "I1")
        stream_rx = clients[dst].receiver("balanced/failover", credit=500, credit_window=500)
        s = clients[src].sender("balanced/failover")
        s.wait_credit(1, timeout=10)
        killed_at: list[float] = []

        def kill() -> None:
            killed_at.append(time.time())
            kill9(interiors[0])
        audit = stream(s, stream_rx, kill, 3000, 500)
        pump_for(2.0)
        moves = []
        for e in on_i0:
            for line in e.stderr_path.read_text(errors="replace").splitlines():
                m = MOVED_RE.match(line)
                if m and m[2] != "I0":
                    at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    if at >= killed_at[0] - 0.01:
                        moves.append(at - killed_at[0])
                        break
        moves.sort()
        result["failover"] = {"edges_on_killed_interior": len(on_i0), "moved": len(moves),
                              "median_s": round(statistics.median(moves), 3) if moves else None,
                              "max_s": round(moves[-1], 3) if moves else None, "stream": audit}
        print(f"failover: {result['failover']}", flush=True)
    finally:
        close_all()
        for n in nodes:
            if n.proc.poll() is None:
                stop(n)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    out = REPO / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{time.strftime('%Y%m%d-%H%M%S')}-edge.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
