#!/usr/bin/env python3
"""Soak: mixed RPC, multicast and broker traffic through the four-node mesh, RSS sampled every second.

The mesh is topologies/four-node.yaml's (every node linked to every other one, its address rules), on
free ports, with the default control-plane timers; node A also runs the RabbitMQ gateway (broker on
127.0.0.1:5672, guest/guest) for one notification address, ``direction: both``. The traffic, all with
router.rpc clients in threads of this process:

* RPC: echo servers on A and D (``openstack.org/om/rpc/anycast/soak/echo``, balanced); callers on B and C,
  each ``--rpc-rate`` calls/s;
* multicast: a client on D fans out ``--multicast-rate`` messages/s to ``multicast/soak/news``, consumed
  by servers on A, B and C (each gets every message);
* broker: a notifier on C sends ``--notify-rate`` notifications/s to the gateway's address; a listener
  on B runs 20 s, stops for 10 s, and so on: while it is away the gateway stores the notifications in
  RabbitMQ, and feeds them back when it returns.

Every second: the RSS of each node (/proc/PID/status VmRSS) and the traffic counters. At the end:
benchmarks/results/<timestamp>-soak.json (samples, counters, errors), <timestamp>-soak.png (RSS per node
over time, and the traffic rates), and a Markdown table on stdout: RSS at the start, after the warm-up
and at the end, and the trend (least-squares slope after the warm-up, MiB per hour) per node.

    .venv/bin/python benchmarks/soak.py --minutes 10
    .venv/bin/python benchmarks/soak.py --minutes 1 --label check

Everything started is stopped at the end (also on Ctrl-C); the broker queue is deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO / "benchmarks", REPO):  # the harness; router/ is the repo's
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import yaml  # noqa: E402
from harness.paths import BenchError  # noqa: E402
from harness.procs import free_ports, start_node  # noqa: E402
from harness.sample import rss_bytes as rss  # noqa: E402
from harness.tally import Tally  # noqa: E402

from router.rpc import RpcClient, RpcServer  # noqa: E402
from router.rpc.notify import NotificationListener  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
TOPOLOGY = REPO / "topologies" / "four-node.yaml"
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
ECHO = "openstack.org/om/rpc/anycast/soak/echo"
NEWS = "multicast/soak/news"
MIB = 1024 * 1024


# ------------------------------------------------------------------------------------------------ nodes


@dataclass
class Node:
    node_id: str
    proc: subprocess.Popen
    url: str
    stderr: Path


@dataclass
class Mesh:
    """The four nodes (A with the broker gateway), started in topology order."""

    run_dir: Path
    notify_address: str
    nodes: dict[str, Node] = field(default_factory=dict)

    def start(self) -> None:
        topo = yaml.safe_load(TOPOLOGY.read_text())
        names = list(topo["nodes"])
        edges = [(e["from"], e["to"], e["cost"]) for e in topo["edges"]]
        listeners = {to for _, to, _ in edges}
        ports = iter(free_ports(len(names) + len(listeners)))
        client_port = {n: next(ports) for n in names}
        ir_port = {n: next(ports) for n in names if n in listeners}
        order: list[str] = []
        while len(order) < len(names):
            order += [n for n in names if n not in order and all(t in order for f, t, _ in edges if f == n)]
        for n in order:
            cfg: dict[str, Any] = {
                "node": {"id": n, "link_capacity": 250, "idle_timeout": 16, "log_level": "info"},
                "listeners": [{"host": "127.0.0.1", "port": client_port[n], "role": "normal"}]
                + ([{"host": "127.0.0.1", "port": ir_port[n], "role": "inter-router", "cost": 1}]
                   if n in ir_port else []),
                "connectors": [{"host": "127.0.0.1", "port": ir_port[t], "cost": c}
                               for f, t, c in edges if f == n],
                "addresses": topo["addresses"],
            }
            if n == "A":
                bridged = {"address": self.notify_address, "semantics": "anycast", "direction": "both",
                           "durable": True}
                cfg["brokers"] = [{"name": "rabbit", "url": RABBIT_URL, "heartbeat": 10,
                                   "confirm_window": 250, "addresses": [bridged]}]
            path = self.run_dir / f"{n}.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            try:
                node = start_node(path, self.run_dir, n, 20)
            except BenchError as exc:
                raise SystemExit(f"soak: {exc}") from None
            self.nodes[n] = Node(n, node.proc, node.url, node.stderr_log)

    def check(self) -> None:
        for n in self.nodes.values():
            if n.proc.poll() is not None:
                raise RuntimeError(f"node {n.node_id} exited with {n.proc.returncode}: "
                                   f"{n.stderr.read_text()[-2000:]}")

    def stop(self) -> dict[str, int | None]:
        for n in self.nodes.values():
            if n.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(n.proc.pid, signal.SIGTERM)
        codes = {}
        for n in self.nodes.values():
            try:
                codes[n.node_id] = n.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(n.proc.pid, signal.SIGKILL)
                codes[n.node_id] = n.proc.wait(5)
        return codes


# ---------------------------------------------------------------------------------------------- traffic


class Traffic(Tally):
    """The client side of the soak: threads that each run one kind of traffic at a paced rate."""

    def __init__(self, mesh: Mesh, rpc_rate: float, multicast_rate: float, notify_rate: float) -> None:
        super().__init__()
        self.mesh = mesh
        self.rates = {"rpc": rpc_rate, "multicast": multicast_rate, "notify": notify_rate}
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.closers: list[Any] = []
        self.listener: NotificationListener | None = None

    def start(self) -> None:
        url = {n: node.url for n, node in self.mesh.nodes.items()}
        for n in ("A", "D"):
            self.closers.append(RpcServer(url[n], ECHO, lambda body, props, n=n: f"{n}:{body}",
                                          name=f"echo-{n}"))
        for n in ("A", "B", "C"):
            self.closers.append(RpcServer(url[n], NEWS, lambda body, props, n=n: self.count(f"news@{n}"),
                                          name=f"news-{n}"))
        self._wait_route(url["B"])
        for n in ("B", "C"):
            self._thread(self._rpc, url[n], n)
        self._thread(self._multicast, url["D"])
        self._thread(self._notify, url["C"])
        self._thread(self._listener_cycle, url["B"])

    def _thread(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True, name=fn.__name__)
        t.start()
        self.threads.append(t)

    def _wait_route(self, url: str) -> None:
        deadline = time.monotonic() + 30
        with RpcClient(url, timeout=2) as c:
            while True:
                try:
                    c.call(ECHO, "hello")
                    return
                except Exception as exc:            # not converged yet
                    if time.monotonic() > deadline:
                        raise SystemExit(f"soak: no RPC route through the mesh after 30 s: {exc}") from None

    def _paced(self, rate: float):
        """Yield at ``rate`` per second until stopped."""
        period = 1.0 / rate
        t = time.monotonic()
        while not self.stop.is_set():
            yield
            t += period
            delay = t - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)
            elif delay < -1.0:
                t = time.monotonic()           # fell behind: do not burst to catch up

    def _rpc(self, url: str, name: str) -> None:
        with RpcClient(url, timeout=10, name=f"caller-{name}") as c:
            i = 0
            for _ in self._paced(self.rates["rpc"]):
                i += 1
                try:
                    c.call(ECHO, f"{name}-{i}")
                    self.count("rpc_ok")
                except Exception as exc:
                    self.error("rpc", exc)

    def _multicast(self, url: str) -> None:
        with RpcClient(url, timeout=10, name="fanout-D") as c:
            for _ in self._paced(self.rates["multicast"]):
                try:
                    c.fanout(NEWS, "news")
                    self.count("multicast_sent")
                except Exception as exc:
                    self.error("multicast", exc)

    def _notify(self, url: str) -> None:
        with RpcClient(url, timeout=30, name="notifier-C") as c:
            for _ in self._paced(self.rates["notify"]):
                try:
                    c.notify(self.mesh.notify_address, "soak.tick", {"t": time.time()})
                    self.count("notify_sent")
                except Exception as exc:
                    self.error("notify", exc)

    def _listener_cycle(self, url: str) -> None:
        while not self.stop.is_set():
            try:
                self.listener = NotificationListener(url, self.mesh.notify_address,
                                                     lambda n: self.count("notify_received"),
                                                     name="listener-B")
            except Exception as exc:
                self.error("listener", exc)
            self.stop.wait(20)
            if self.listener is not None:
                self.listener.stop()
                self.listener = None
            self.stop.wait(10)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(40)
        for c in self.closers:
            with contextlib.suppress(Exception):
                c.stop()


# -------------------------------------------------------------------------------------------- reporting


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes) points, in MiB per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mx) * (v - my) for t, v in points) / var * 3600 / MIB


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    t = [s["t"] / 60 for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=[3, 2])
    for node in result["nodes"]:
        ax1.plot(t, [s["rss"][node] / MIB for s in samples], label=f"node {node}")
    ax1.axvline(result["warmup_s"] / 60, color="grey", linestyle=":", label="end of warm-up")
    ax1.set_ylabel("RSS (MiB)")
    ax1.set_title(f"soak: four-node mesh, {result['minutes']:g} min of mixed traffic ({result['label']})")
    ax1.legend(loc="lower right", ncol=3, fontsize="small")
    ax1.grid(alpha=0.3)
    keys = {"rpc_ok": "RPC calls", "multicast_sent": "multicast sent", "notify_sent": "notifications sent",
            "notify_received": "notifications received"}
    for key, label in keys.items():
        rate = [0.0] + [(b["counts"].get(key, 0) - a["counts"].get(key, 0)) / max(b["t"] - a["t"], 1e-9)
                        for a, b in zip(samples, samples[1:], strict=False)]
        ax2.plot(t, rate, label=label, linewidth=0.8)
    ax2.set_ylabel("per second")
    ax2.set_xlabel("minutes")
    ax2.legend(loc="upper right", ncol=2, fontsize="small")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(result: dict[str, Any]) -> str:
    lines = ["| node | RSS start MiB | after warm-up MiB | end MiB | max MiB | trend after warm-up MiB/h |",
             "|---|---|---|---|---|---|"]
    for node, s in result["rss_summary"].items():
        lines.append(f"| {node} | {s['start'] / MIB:.1f} | {s['warm'] / MIB:.1f} | {s['end'] / MIB:.1f} | "
                     f"{s['max'] / MIB:.1f} | {s['slope_mib_per_h']:+.2f} |")
    c = result["counts"]
    lines.append("")
    lines.append(f"Traffic: {c.get('rpc_ok', 0)} RPC calls, {c.get('multicast_sent', 0)} multicast messages "
                 f"({sum(v for k, v in c.items() if k.startswith('news@'))} copies received), "
                 f"{c.get('notify_sent', 0)} notifications sent / {c.get('notify_received', 0)} received "
                 f"/ {result['stored_in_broker_at_end']} still stored in RabbitMQ at the end; "
                 f"errors: {result['errors'] or 'none'}.")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the traffic runs (default 10)")
    ap.add_argument("--rpc-rate", type=float, default=40.0, help="calls/s per caller (2 callers)")
    ap.add_argument("--multicast-rate", type=float, default=40.0, help="fan-outs/s (3 receivers each)")
    ap.add_argument("--notify-rate", type=float, default=20.0,
                    help="notifications/s through the broker address")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds excluded from the trend (default: 60, or 20%% of shorter runs)")
    ap.add_argument("--label", default="soak")
    a = ap.parse_args(argv)
    duration = a.minutes * 60
    warmup = a.warmup if a.warmup is not None else min(60.0, duration * 0.2)
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=3).close()
    except OSError as exc:
        print(f"soak: RabbitMQ is not reachable on 127.0.0.1:5672 ({exc}): run scripts/ensure-rabbitmq.sh",
              file=sys.stderr)
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(tempfile.mkdtemp(prefix="soak-"))
    mesh = Mesh(run_dir, f"openstack.org/om/notify/soak-{os.getpid()}.info")
    traffic: Traffic | None = None
    samples: list[dict[str, Any]] = []
    failure = None
    try:
        mesh.start()
        urls = ", ".join(f"{n}={node.url}" for n, node in mesh.nodes.items())
        print(f"soak: mesh up ({urls}); logs in {run_dir}", flush=True)
        traffic = Traffic(mesh, a.rpc_rate, a.multicast_rate, a.notify_rate)
        traffic.start()
        t0 = time.monotonic()
        next_report = 60.0
        while True:
            now = time.monotonic() - t0
            mesh.check()
            samples.append({"t": round(now, 3),
                            "rss": {n: rss(node.proc.pid) for n, node in mesh.nodes.items()},
                            "counts": traffic.snapshot()})
            if now >= next_report:
                next_report += 60.0
                r = samples[-1]["rss"]
                print(f"soak: {now / 60:.0f} min: RSS " + " ".join(f"{n}={v / MIB:.1f}" for n, v in r.items())
                      + f" MiB; {samples[-1]['counts']}", flush=True)
            if now >= duration:
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - now)))
    except KeyboardInterrupt:
        failure = "interrupted"
    except RuntimeError as exc:
        failure = str(exc)
    finally:
        if traffic is not None:
            traffic.finish()
        codes = mesh.stop()
        stored = None
        with contextlib.suppress(Exception):
            import pika

            conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
            ch = conn.channel()
            stored = ch.queue_declare(mesh.notify_address, passive=True).method.message_count
            ch.queue_delete(mesh.notify_address)
            ch.queue_delete(mesh.notify_address + ".bridge-lock")
            conn.close()
    if not samples:
        print(f"soak: no samples ({failure})", file=sys.stderr)
        return 1
    nodes = list(mesh.nodes)
    summary = {}
    for n in nodes:
        points = [(s["t"], s["rss"][n]) for s in samples]
        after = [(t, v) for t, v in points if t >= warmup] or points
        summary[n] = {"start": points[0][1], "warm": after[0][1], "end": points[-1][1],
                      "max": max(v for _, v in points), "slope_mib_per_h": round(slope_per_hour(after), 3)}
    result = {"label": a.label, "minutes": a.minutes, "warmup_s": warmup, "nodes": nodes,
              "rates": {"rpc_per_caller": a.rpc_rate, "multicast": a.multicast_rate, "notify": a.notify_rate},
              "command": " ".join([Path(sys.executable).name, *sys.argv]), "failure": failure,
              "exit_codes": codes, "counts": samples[-1]["counts"], "stored_in_broker_at_end": stored,
              "errors": dict(traffic.errors) if traffic else {}, "rss_summary": summary, "samples": samples}
    base = RESULTS / f"{stamp}-{a.label}"
    Path(f"{base}.json").write_text(json.dumps(result, indent=1))
    plot(result, Path(f"{base}.png"))
    print(markdown(result))
    print(f"\nsoak: {len(samples)} samples; {base}.json, {base}.png; node exit codes {codes}")
    bad = {n: c for n, c in codes.items() if c != 0}
    if failure or bad:
        print(f"soak: FAILED: {failure or ''} {bad or ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
