#!/usr/bin/env python3
"""Soak with restarts (issue 33, point 6): mixed traffic through the four-node mesh, one node killed (kill -9)
and started again every ``--cycle`` seconds, for ``--minutes`` (default 60; meant to run for a day too).

The mesh is topologies/four-node.yaml's (every node linked to every other one) on fixed free ports, with
the default control-plane timers. The victim (``--victim``, default A) is killed at the end of each cycle
and started again from the same config; its clients come back (servers recreated as soon as it is up).
The traffic, router.rpc clients and test clients in threads of this process:

* **RPC**: callers on B and C at ``--rpc-rate`` calls/s each to an echo address served on A and D;
* **ledger** (unsettled casts, each with a unique id, counted by the servers that got it):
  ``survivors``: B → servers on C and D (not through the victim); ``via-victim``: C → servers on A and D
  (what is in flight to A when it dies comes back RELEASED / MODIFIED and is sent again: at-least-once,
  so a copy A's server handled but whose ACCEPTED died with A is a duplicate, counted apart);
* **large**: 1 MiB casts from D to a server on B, each checked against its SHA-256;
* **multicast**: fan-outs from D to servers on A, B and C;
* **pre-settled floods**: every 10 s a burst of ``--flood`` pre-settled 100-byte messages from C to
  ``multicast/soak/flood``, received on B and D (every copy counted);
* **churn**: a client every 0.5 s on a node taken in turn (A, B, C, D): connect, three calls, close.

Per cycle: each node's RSS before the kill, the victim's restart time and the time until a call through
it works again, the errors each flow saw. At the end (traffic stopped, 10 s to drain): lost (acknowledged,
never received), duplicated, unconfirmed (the send failed: the connection died), and every node's
deliveries in flight (management). Writes benchmarks/results/<timestamp>-soak-cycle.json and prints a
Markdown summary.

    .venv/bin/python benchmarks/soak_cycle.py                       # 1 hour, a kill every 5 minutes
    .venv/bin/python benchmarks/soak_cycle.py --minutes 20 --cycle 300
    .venv/bin/python benchmarks/soak_cycle.py --minutes 3 --cycle 60 --label check
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for p in (str(REPO), str(REPO / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

import yaml  # noqa: E402
from soak_traffic import ECHO_VICTIM, LEDGERS, Traffic  # noqa: E402
from storm_bench import MIB, NodeRun  # noqa: E402

from tests.support.ports import free_ports  # noqa: E402
from tests.support.state import node_state  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
TOPOLOGY = REPO / "topologies" / "four-node.yaml"


class Mesh:
    """The four nodes on fixed ports, restartable one by one."""

    def __init__(self, run_dir: Path) -> None:
        topo = yaml.safe_load(TOPOLOGY.read_text())
        self.names = list(topo["nodes"])
        edges = [(e["from"], e["to"], e["cost"]) for e in topo["edges"]]
        ports = iter(free_ports(2 * len(self.names)))
        client = {n: next(ports) for n in self.names}
        ir = {n: next(ports) for n in self.names}
        self.url = {n: f"amqp://127.0.0.1:{client[n]}" for n in self.names}
        self.nodes: dict[str, NodeRun] = {}
        order: list[str] = []
        while len(order) < len(self.names):
            order += [n for n in self.names
                      if n not in order and all(t in order for f, t, _ in edges if f == n)]
        self.order = order
        for n in order:
            cfg = {"node": {"id": n, "link_capacity": 250, "idle_timeout": 16, "log_level": "info"},
                   "listeners": [{"host": "127.0.0.1", "port": client[n], "role": "normal"},
                                 {"host": "127.0.0.1", "port": ir[n], "role": "inter-router", "cost": 1}],
                   "connectors": [{"host": "127.0.0.1", "port": ir[t], "cost": c}
                                  for f, t, c in edges if f == n],
                   "addresses": topo["addresses"]}
            self.nodes[n] = NodeRun(n, cfg, run_dir)
            self.nodes[n].url = self.url[n]

    def start(self) -> None:
        for n in self.order:
            self.nodes[n].start()

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def rss_mib(self) -> dict[str, float]:
        return {n: round(node.rss() / MIB, 1) for n, node in self.nodes.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--cycle", type=float, default=300.0, help="seconds between kills")
    p.add_argument("--victim", default="A")
    p.add_argument("--rpc-rate", type=float, default=20.0, help="calls (and casts, fan-outs) per second")
    p.add_argument("--flood", type=int, default=5000, help="pre-settled messages per burst (every 10 s)")
    p.add_argument("--label", default="")
    args = p.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"args": vars(args), "cycles": [], "load_before": os.getloadavg(),
                           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="soak-cycle-") as tmp:
        mesh = Mesh(Path(tmp))
        traffic = Traffic(mesh, args.victim, args.rpc_rate, args.flood)
        try:
            mesh.start()
            traffic.start()
            t_end = time.monotonic() + 60 * args.minutes
            cycle = 0
            while time.monotonic() < t_end:
                wait = min(args.cycle, t_end - time.monotonic())
                if traffic.stop.wait(wait):
                    break
                cycle += 1
                row: dict[str, Any] = {"cycle": cycle, "load": os.getloadavg()[0],
                                       "rss_mib": mesh.rss_mib(), "errors_so_far": dict(traffic.errors),
                                       "counts": dict(traffic.counts)}
                if time.monotonic() >= t_end:
                    out["cycles"].append(row)
                    break
                victim = mesh.nodes[args.victim]
                killed = victim.kill9()
                traffic.drop_servers(args.victim)
                ready = victim.start()
                traffic.serve(args.victim)
                row["restart_s"] = round(ready - killed, 2)
                back = traffic.wait_call(mesh.url["C"], ECHO_VICTIM, 60)
                row["routable_again_s"] = round(back + ready - killed, 2)
                out["cycles"].append(row)
                print(json.dumps({k: v for k, v in row.items() if k not in ("counts", "errors_so_far")}),
                      flush=True)
            traffic.finish()
            time.sleep(10.0)                     # the last outcomes and copies arrive
            states = {n: node_state(node) for n, node in mesh.nodes.items()}
            out["end"] = {"rss_mib": mesh.rss_mib(),
                          "in_flight": {n: st.in_flight for n, st in states.items()},
                          "dropped_presettled": {n: st.node.get("droppedPresettledDeliveries")
                                                 for n, st in states.items()}}
        finally:
            traffic.stop.set()
            for n in mesh.names:
                traffic.drop_servers(n)
            mesh.stop()
    ledgers = {}
    for flow in LEDGERS:
        got = traffic.received[flow]
        acked, unconfirmed = traffic.acked[flow], traffic.unconfirmed[flow]
        ledgers[flow] = {"acked": len(acked), "lost": len(acked - set(got)),
                         "duplicated": sum(c - 1 for c in got.values() if c > 1),
                         "unconfirmed": len(unconfirmed),
                         "unconfirmed_received": len(unconfirmed & set(got))}
    news = {n: {"got": len(seen), "duplicated": sum(c - 1 for c in seen.values() if c > 1)}
            for n, seen in traffic.news_seen.items() if seen}
    out.update(ledgers=ledgers, counts=dict(traffic.counts), errors=dict(traffic.errors), multicast=news,
               flood={"sent": traffic.flood_sent, "got": dict(traffic.flood_got)},
               load_after=os.getloadavg())
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{stamp}-soak-cycle{'-' + args.label if args.label else ''}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    _print(out, path)
    return 0


def _print(out: dict[str, Any], path: Path) -> None:
    a = out["args"]
    print(f"\n{a['minutes']:g} min, {a['victim']} killed every {a['cycle']:g} s, "
          f"load {out['load_before'][0]:.1f} → {out['load_after'][0]:.1f}")
    print("| cycle | RSS MiB " + " ".join(out["cycles"][0]["rss_mib"]) + " | restart s | routable again s |")
    print("|---|---|---|---|")
    for r in out["cycles"]:
        rss = " / ".join(f"{v:.0f}" for v in r["rss_mib"].values())
        print(f"| {r['cycle']} | {rss} | {r.get('restart_s', '-')} | {r.get('routable_again_s', '-')} |")
    for flow, led in out["ledgers"].items():
        print(f"ledger {flow}: {led}")
    print(f"flood: {out['flood']}; multicast: {out['multicast']}; counts: {out['counts']}")
    print(f"errors: {out['errors']}")
    print(f"end: {out.get('end')}")
    print(f"(details: {path.relative_to(REPO)})")


if __name__ == "__main__":
    sys.exit(main())
