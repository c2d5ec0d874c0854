#!/usr/bin/env python3
"""The memory ceiling (issue 33, point 2): slow consumers, fast producers, one node with a budget.

One node with ``node.memory_limit`` ``--limit-mib``. ``--consumers`` slow consumers (one address each,
``--prefetch`` credit, a session window of ``--consumer-window-kib``, each sleeping ``--consumer-delay-ms``
per message, in ``--procs`` processes) and as
many fast producers (pre-settled ``--size``-byte messages as fast as their credit allows, in ``--procs``
processes) for ``--seconds``; a canary RPC (caller and echo server on the same node, another address, a
process of its own) at ``--canary-rate`` calls/s throughout. Measured: the node's RSS (sampled every
0.2 s: at the start, peak), its peak of buffered bytes, the producers it held (management: most seen at
once, sampled every second; credit top-ups refused),
the messages sent and received per address once the consumers drained (lost, duplicated, out of order),
and the canary's p50 / p99 / max while loaded.

    .venv/bin/python benchmarks/memory_bench.py
    .venv/bin/python benchmarks/memory_bench.py --consumers 20 --seconds 10 --limit-mib 32
    .venv/bin/python benchmarks/memory_bench.py --nice-load 10    # the load's processes yield to the node

Prints a Markdown summary and writes benchmarks/results/<timestamp>-memory.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
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
from harness.canary import CanaryProcess  # noqa: E402
from harness.procs import free_ports  # noqa: E402
from harness.sample import rss_bytes as rss  # noqa: E402

from router.management.client import ManagementClient  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
MIB = 1024 * 1024
ADDR = "closest/memory/{}"
CANARY = "closest/memory-canary"


# ---------------------------------------------------------------------------------------------- clients
def _producers_main(url: str, addresses: list[str], size: int, seconds: float, pipe: Any) -> None:
    """Pre-settled messages to each address as fast as the node's credit allows, for `seconds`."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import AtMostOnce, Container

    class Producers(MessagingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.sent = {a: 0 for a in addresses}
            self.body = b"x" * size
            self.stop_at = 0.0

        def on_start(self, event: Any) -> None:
            conn = event.container.connect(url)
            make = event.container.create_sender
            self.senders = {make(conn, a, options=AtMostOnce()): a for a in addresses}
            self.stop_at = time.monotonic() + seconds
            event.container.schedule(seconds + 0.1, self)

        def on_sendable(self, event: Any) -> None:
            s = event.sender
            a = self.senders[s]
            while s.credit > 0 and time.monotonic() < self.stop_at:
                n = self.sent[a]
                s.send(Message(body=self.body, properties={"seq": n}))
                self.sent[a] = n + 1

        def on_timer_task(self, event: Any) -> None:
            # close once every message is on the wire (pre-settled: a close would lose what still waits)
            if any(s.queued or s.session.outgoing_bytes for s in self.senders):
                event.container.schedule(0.1, self)
                return
            for s in self.senders:
                s.connection.close()
                break

    h = Producers()
    Container(h).run()
    pipe.send(h.sent)


def _consumers_main(url: str, addresses: list[str], prefetch: int, delay: float, window: int,
                    pipe: Any) -> None:
    """Receivers that take `delay` seconds per message; they stop when told, once idle for 2 s."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Consumers(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=prefetch)
            self.got = {a: 0 for a in addresses}
            self.disorder = {a: 0 for a in addresses}
            self.last = time.monotonic()
            self.stopping = False

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(url)
            for a in addresses:
                # a session of its own with a small window: what the consumer has not taken waits in the
                # node (Proton's default window would let this process read everything ahead)
                ssn = self.conn.session()
                ssn.incoming_capacity = window
                ssn.open()
                event.container.create_receiver(ssn, a)
            event.container.schedule(0.5, self)

        def on_message(self, event: Any) -> None:
            a = event.receiver.source.address
            seq = event.message.properties["seq"]
            if seq != self.got[a]:
                self.disorder[a] += 1
            self.got[a] += 1
            self.last = time.monotonic()
            if delay and not self.stopping:
                time.sleep(delay)

        def on_timer_task(self, event: Any) -> None:
            if pipe.poll():
                pipe.recv()
                self.stopping = True
            if self.stopping and time.monotonic() - self.last > 2.0:
                self.conn.close()
                return
            event.container.schedule(0.5, self)

    h = Consumers()
    Container(h).run()
    pipe.send({"got": h.got, "disorder": h.disorder})


# ------------------------------------------------------------------------------------------------- node
def start_node(tmp: Path, limit: int) -> tuple[subprocess.Popen, str, Path]:
    port = free_ports(1)[0]
    cfg = {"node": {"id": "M", "link_capacity": 250, "idle_timeout": 0, "log_level": "info",
                    "memory_limit": limit},
           "listeners": [{"host": "127.0.0.1", "port": port, "role": "normal"}],
           "addresses": {"default": "balanced", "rules": [{"prefix": "closest", "distribution": "closest"}]}}
    path = tmp / "M.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out, err = tmp / "M.stdout", tmp / "M.stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "router", "run", str(path)], stdout=o, stderr=e,
                                stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True)
    deadline = time.monotonic() + 20
    while "ready: node=M" not in out.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"memory_bench: the node did not start: {err.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, f"amqp://127.0.0.1:{port}", err


def node_figures(url: str) -> dict[str, Any]:
    with ManagementClient(url, timeout=10) as m:
        return m.query_dicts("node", ["bufferedBytes", "bufferedPeak", "heldProducers", "creditHolds",
                                      "memoryLimit", "droppedPresettledDeliveries"])[0]


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, False

    def run(self) -> None:
        while not self.stop:
            with contextlib.suppress(OSError, RuntimeError):
                self.peak = max(self.peak, rss(self.pid))
            time.sleep(0.2)


def _split(items: list[str], n: int) -> list[list[str]]:
    return [items[i::n] for i in range(n) if items[i::n]]


# ------------------------------------------------------------------------------------------------- main
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--consumers", type=int, default=200)
    p.add_argument("--procs", type=int, default=2, help="processes for the consumers, and for the producers")
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--limit-mib", type=int, default=64)
    p.add_argument("--prefetch", type=int, default=100000)
    p.add_argument("--consumer-delay-ms", type=float, default=1.0)
    p.add_argument("--consumer-window-kib", type=int, default=64, help="each consumer's session window")
    p.add_argument("--canary-rate", type=float, default=50.0)
    p.add_argument("--nice-load", type=int, default=0, metavar="N",
                   help="run the producer and consumer processes at niceness N (the node, the canary at 0): "
                        "clients on other machines, as far as two shared cores can show it")
    p.add_argument("--label", default="")
    args = p.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    addresses = [ADDR.format(i) for i in range(args.consumers)]
    ctx = multiprocessing.get_context("spawn")
    out: dict[str, Any] = {"args": vars(args), "load": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        proc, url, err = start_node(Path(tmp), args.limit_mib * MIB)
        canary = None
        try:
            out["rss_start_mib"] = rss(proc.pid) / MIB
            canary = CanaryProcess(url, url, CANARY, args.canary_rate, "M")
            consumers = []
            for group in _split(addresses, args.procs):
                mine, theirs = ctx.Pipe()
                cp = ctx.Process(target=_consumers_main, args=(url, group, args.prefetch,
                                                               args.consumer_delay_ms / 1000,
                                                               args.consumer_window_kib * 1024, theirs))
                cp.start()
                os.setpriority(os.PRIO_PROCESS, cp.pid, args.nice_load)
                consumers.append((cp, mine))
            time.sleep(2.0)
            sampler = RssSampler(proc.pid)
            sampler.start()
            t0 = time.monotonic()
            producers = []
            for group in _split(addresses, args.procs):
                mine, theirs = ctx.Pipe()
                pp = ctx.Process(target=_producers_main, args=(url, group, args.size, args.seconds, theirs))
                pp.start()
                os.setpriority(os.PRIO_PROCESS, pp.pid, args.nice_load)
                producers.append((pp, mine))
            held_max = 0
            while time.monotonic() < t0 + args.seconds:
                time.sleep(1.0)
                with contextlib.suppress(Exception):
                    held_max = max(held_max, node_figures(url)["heldProducers"])
            out["held_max"] = held_max
            sent: dict[str, int] = {}
            for pp, pipe in producers:
                if not pipe.poll(600):
                    raise SystemExit("memory_bench: a producer process did not report")
                sent.update(pipe.recv())
                pp.join(10)
            t_load = time.monotonic()
            out["canary"] = canary.window(t0, t_load)
            for _cp, pipe in consumers:
                pipe.send("stop")
            got: dict[str, int] = {}
            disorder = 0
            for cp, pipe in consumers:
                r = pipe.recv() if pipe.poll(600) else {"got": {}, "disorder": {}}
                got.update(r["got"])
                disorder += sum(r["disorder"].values())
                cp.join(10)
            out["drain_s"] = time.monotonic() - t_load
            sampler.stop = True
            out["rss_peak_mib"] = sampler.peak / MIB
            out["after"] = node_figures(url)
            out["sent"], out["received"] = sum(sent.values()), sum(got.values())
            out["per_address"] = {a: [sent.get(a, 0), got.get(a, 0)] for a in addresses}
            out["lost"] = sum(max(0, sent.get(a, 0) - got.get(a, 0)) for a in addresses)
            out["extra"] = sum(max(0, got.get(a, 0) - sent.get(a, 0)) for a in addresses)
            out["out_of_order"] = disorder
            out["load_s"] = t_load - t0
        finally:
            if canary is not None:
                canary.stop()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{stamp}-memory{'-' + args.label if args.label else ''}.json"
    path.write_text(json.dumps(out, indent=2))
    lim = args.limit_mib
    c = out["canary"]
    u = out["after"]
    rows = [
        ("node RSS: start / peak", f"{out['rss_start_mib']:.0f} / {out['rss_peak_mib']:.0f} MiB",
         f"< {lim} MiB + 100 MB"),
        ("buffered peak; producers held at once (most seen), credit top-ups refused",
         f"{u['bufferedPeak'] / MIB:.1f} MiB; {out['held_max']}, {u['creditHolds']}", f"budget {lim} MiB"),
        (f"messages sent / received ({args.size} B, {out['load_s']:.0f} s, "
         f"drained in {out['drain_s']:.0f} s)",
         f"{out['sent']} / {out['received']}; lost {out['lost']}, extra {out['extra']}, "
         f"out of order {out['out_of_order']}", "0 lost"),
        ("canary RPC under load: p50 / p99 / max",
         f"{c.get('p50_ms', 0):.2f} / {c.get('p99_ms', 0):.1f} / {c.get('max_ms', 0):.1f} ms "
         f"({c['calls']} calls, {c['errors']} errors)", "p99 ≤ 20 ms"),
    ]
    print("| measure | value | goal |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    nice = f"; producers and consumers at niceness {args.nice_load}" if args.nice_load else ""
    print(f"\n(load {out['load'][0]:.2f}{nice}; details: {path.relative_to(REPO)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
