#!/usr/bin/env python3
"""Control plane at scale (issue 18): the four-node mesh under an address storm and many connections.

The mesh is topologies/four-node.yaml's (every node linked to every other one), on free ports, with the
default control-plane timers (HELLO 1 s, a neighbour lost after 3 s) and ``idle_timeout: 0`` (the idle
connections of the benchmark send no heartbeats). A canary RPC stream (a caller on B, an echo server on
D, ``--canary-rate`` calls/s) runs throughout, in a process of its own (the storm's load is generated in
this one); with ``--canary-via-a`` a second one (a caller on C, an echo server on A, its own process too)
crosses the node of the storm. Measured:

* **storm**: ``--addresses`` receivers on unique addresses attached to A in one burst, over raw
  connections of 1,000 links each (a listener's default ``max_links``), every connection's ATTACHes
  written at the same moment; neighbour losses logged by any node; the time from the last ATTACH written
  until C routes every address (its SIGUSR1 state line counts the addresses with a remote destination,
  polled every 0.1 s; every node is one hop from A, and C is the one not on the canary's path, because
  each state line costs the polled node a pass over its addresses); canary p50/p99/max during the burst
  (from the first ATTACH until C routes everything, plus one second), and the slow calls by time;
* **stat**: ``meshrouter stat -l`` of A (the storm's links, paged), wall time and rows printed;
* **connections**: ``--connections`` idle client connections (AMQP header and Open, raw sockets) spread
  over the four nodes; RSS growth per connection of each node;
* **rounds**: three rounds of opening and closing ``--round-connections`` connections on node B; B's RSS
  after each round.

    .venv/bin/python benchmarks/scale_bench.py
    .venv/bin/python benchmarks/scale_bench.py --addresses 2000 --connections 2000 --round-connections 1000

Prints a Markdown summary and writes benchmarks/results/<timestamp>-scale.json.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO / "benchmarks", REPO):  # the harness; router/ is the repo's
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from harness.canary import ECHO, CanaryProcess  # noqa: E402,F401 (restart_bench.py, memory_bench.py import them here)
from harness.fournode import Mesh, Node  # noqa: E402,F401 (restart_bench.py imports Node here)
from harness.rawamqp import Drain, open_frames, storm_bytes  # noqa: E402
from harness.sample import cpu_seconds as _cpu  # noqa: E402
from harness.sample import rss_bytes as rss  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
ECHO_A = "openstack.org/om/rpc/anycast/scale/echo-a"
STORM = "balanced/storm/"
PER_CONNECTION = 1000       # a listener's default max_links (issue 17): the storm comes over many connections
KIB, MIB = 1024, 1024 * 1024


# -------------------------------------------------------------------------------------------- measures


def storm(mesh: Mesh, canaries: dict[str, CanaryProcess],
          n: int) -> tuple[dict[str, Any], list[socket.socket]]:
    """``n`` receivers attached to A at once over connections of PER_CONNECTION links, every connection's
    ATTACHes written at the same moment (one writer thread each)."""
    a, c = mesh.nodes["A"], mesh.nodes["C"]
    addresses = [f"{STORM}{i}" for i in range(n)]
    parts = [storm_bytes(addresses[i:i + PER_CONNECTION], f"storm-{i}") for i in range(0, n, PER_CONNECTION)]
    socks = []
    for head, _ in parts:
        sock = socket.create_connection(("127.0.0.1", a.port))
        sock.sendall(head)
        socks.append(sock)
    time.sleep(0.5)                         # connections open and sessions begun before the burst
    writers = [threading.Thread(target=sock.sendall, args=(attaches,), daemon=True)
               for sock, (_, attaches) in zip(socks, parts, strict=True)]
    drain = Drain(list(socks))
    drain.start()
    t0 = time.monotonic()
    for w in writers:
        w.start()
    for w in writers:
        w.join()                            # each returns once the node has read most of its part
    written = time.monotonic()
    routed = None
    deadline = written + 120
    while time.monotonic() < deadline:
        st = c.state()
        if st is not None and _remote_addresses(st) >= n:
            routed = time.monotonic()
            break
        time.sleep(0.1)                     # each state line costs D a pass over its addresses
    time.sleep(4.0)                          # one HELLO timeout more: a loss would be logged by now
    end = routed if routed is not None else time.monotonic()
    result = {"addresses": n, "write_s": written - t0,
              "routed_after_last_attach_s": None if routed is None else routed - written,
              "routed_after_first_attach_s": None if routed is None else routed - t0,
              "neighbour_losses": sum(len(v) for v in mesh.losses().values()), "lost": mesh.losses(),
              "canary_during_burst": canaries["B→D"].window(t0, end + 1.0),
              "canaries": {path: c.window(t0, end + 1.0) for path, c in canaries.items()}}
    return result, socks


def _remote_addresses(state: dict[str, Any]) -> int:
    """Addresses with a remote destination, from a state line (before issue 18 it held the table)."""
    table = state.get("addresses")
    if isinstance(table, dict):
        return sum(1 for a in table.values() if a.get("remote"))
    return state.get("remote_addresses", 0)


def stat_time(mesh: Mesh) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "router", "stat", "-l", "-b", mesh.nodes["A"].url,
                           "--timeout", "30"], capture_output=True, text=True, cwd=REPO)
    took = time.monotonic() - t0
    return {"seconds": took, "exit": proc.returncode, "rows": proc.stdout.count(STORM)}


def open_idle(port: int, count: int) -> list[socket.socket]:
    data = open_frames("idle")
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(data)
        socks.append(s)
    return socks


def settle(node: Node, connections: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = node.state()
        if st is not None and st.get("connections") == connections:
            return
        time.sleep(0.2)


def connections(mesh: Mesh, total: int) -> dict[str, Any]:
    per = total // len(mesh.nodes)
    before = {n: rss(node.proc.pid) for n, node in mesh.nodes.items()}
    base = {n: (node.state() or {}).get("connections", 0) for n, node in mesh.nodes.items()}
    socks: list[socket.socket] = []
    for node in mesh.nodes.values():
        socks += open_idle(node.port, per)
    drain = Drain(socks)
    drain.start()
    for n, node in mesh.nodes.items():
        settle(node, base[n] + per)
    time.sleep(2.0)
    after = {n: rss(node.proc.pid) for n, node in mesh.nodes.items()}
    t0 = {n: _cpu(node.proc.pid) for n, node in mesh.nodes.items()}
    time.sleep(5.0)
    idle_cpu = {n: (_cpu(node.proc.pid) - t0[n]) / 5.0 for n, node in mesh.nodes.items()}
    drain.stop = True
    drain.join()
    for s in socks:
        s.close()
    return {"per_node": per, "rss_per_connection_kib": {n: (after[n] - before[n]) / per / KIB for n in after},
            "idle_cpu_share": idle_cpu}


def rounds(mesh: Mesh, count: int) -> dict[str, Any]:
    b = mesh.nodes["B"]
    base = (b.state() or {}).get("connections", 0)
    samples = [rss(b.proc.pid)]
    for _ in range(3):
        socks = open_idle(b.port, count)
        drain = Drain(socks)
        drain.start()
        settle(b, base + count)
        drain.stop = True
        drain.join()
        for s in socks:
            s.close()
        settle(b, base)
        time.sleep(1.0)
        samples.append(rss(b.proc.pid))
    return {"connections": count, "rss_mib": [x / MIB for x in samples]}


# ------------------------------------------------------------------------------------------------- main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--addresses", type=int, default=20000)
    p.add_argument("--connections", type=int, default=10000)
    p.add_argument("--round-connections", type=int, default=5000)
    p.add_argument("--canary-rate", type=float, default=50.0)
    p.add_argument("--label", default="")
    p.add_argument("--logs", help="copy each node's stderr log into this directory")
    p.add_argument("--canary-via-a", action="store_true", help="a second canary, C -> A (the storm's node)")
    p.add_argument("--storm-only", action="store_true", help="measure the storm only (no stat, connections)")
    args = p.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        mesh = Mesh(Path(tmp))
        canaries: dict[str, CanaryProcess] = {}
        paths = [("B→D", "B", "D", ECHO)] + ([("C→A", "C", "A", ECHO_A)] if args.canary_via_a else [])
        try:
            mesh.start()
            for path, caller, callee, address in paths:
                canaries[path] = CanaryProcess(mesh.nodes[caller].url, mesh.nodes[callee].url, address,
                                               args.canary_rate, callee)
            time.sleep(2.0)
            out["canary_before"] = canaries["B→D"].window(0, time.monotonic())
            out["storm"], storm_socks = storm(mesh, canaries, args.addresses)
            if not args.storm_only:
                out["stat"] = stat_time(mesh)
            for sock in storm_socks:
                sock.close()
            if not args.storm_only:
                out["connections"] = connections(mesh, args.connections)
                out["rounds"] = rounds(mesh, args.round_connections)
            out["losses_total"] = sum(len(v) for v in mesh.losses().values())
        finally:
            for canary in canaries.values():
                canary.stop()
            mesh.stop()
            if args.logs:
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                for n, node in mesh.nodes.items():
                    (Path(args.logs) / f"{n}.stderr").write_bytes(node.stderr.read_bytes())
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{stamp}-scale{'-' + args.label if args.label else ''}.json"
    path.write_text(json.dumps(out, indent=2))
    s = out["storm"]
    rows = [
        ("neighbour losses (storm of {} receivers at A, whole run)".format(s["addresses"]),
         str(out["losses_total"]), "0"),
        ("C routes every address: after the last / the first ATTACH written",
         f"{_num(s['routed_after_last_attach_s'])} / {_num(s['routed_after_first_attach_s'])} s", "≤ 1 s"),
    ]
    for route, cb in s["canaries"].items():
        rows.append((f"canary RPC {route} during the burst: p50 / p99 / max",
                     f"{_num(cb.get('p50_ms'))} / {_num(cb.get('p99_ms'))} / {_num(cb.get('max_ms'))} ms "
                     f"({cb['calls']} calls, {cb['errors']} errors)", "p99 ≤ 20 ms"))
    if not args.storm_only:
        rows += _other_rows(out)
    print("| measure | value | goal |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n(details: {path.relative_to(REPO)})")
    return 0


def _other_rows(out: dict[str, Any]) -> list[tuple[str, str, str]]:
    c, r = out["connections"], out["rounds"]
    return [
        (f"`stat -l` of {out['stat']['rows']} links", f"{out['stat']['seconds']:.2f} s", "≤ 2 s"),
        (f"RSS per idle connection ({c['per_node']} per node)",
         ", ".join(f"{n} {v:.1f}" for n, v in c["rss_per_connection_kib"].items()) + " KiB", "≤ 20 KiB"),
        ("idle CPU with them", ", ".join(f"{n} {100 * v:.1f}%" for n, v in c["idle_cpu_share"].items()), ""),
        (f"B's RSS: start, after 3 rounds of {r['connections']} connections",
         " → ".join(f"{x:.0f}" for x in r["rss_mib"]) + " MiB", "no growth after round 1"),
    ]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
