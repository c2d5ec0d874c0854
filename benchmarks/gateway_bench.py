#!/usr/bin/env python3
"""Throughput of the AMQP 0-9-1 gateway, next to pika talking to RabbitMQ directly.

Each round runs, on the same broker (127.0.0.1:5672, non-durable queues, ``--size``-byte bodies):

* ``pika publish``: pika's AsyncioConnection publishing with confirms, ``--window`` unconfirmed;
* ``pika consume``: pika consuming the same messages with manual acks, prefetch ``--window``;
* ``pika publish, gateway's message`` (``--same-message``, with ``--client c``): the same, with the
  0-9-1 properties the gateway makes of the C client's messages (message-id and the header that keeps
  its ulong type), which cost the broker more than the bare messages above;
* ``gateway publish``: an AMQP 1.0 producer -> node -> gateway -> RabbitMQ (each message settled
  ACCEPTED only on its basic.ack);
* ``gateway consume``: RabbitMQ -> gateway -> node -> an AMQP 1.0 consumer (basic.ack after ACCEPTED).

The gateway address has direction ``both``: with no consumer attached the producer's messages are
stored in the broker (the publish phase), then a consumer drains them (the consume phase).

The AMQP 1.0 clients are the shared C load generator (``--client c``, default: ``amqpbench send`` /
``recv``, built into benchmarks/build/ like node_bench.py does) or python-qpid-proton test clients
(``--client python``, which also measures per-message latency but is itself the bottleneck). CPU per
message is given for the node, the broker (beam.smp) and the client (pika or amqpbench). Rounds
alternate pika and gateway runs; the table shows medians over ``--repeat`` rounds.

  .venv/bin/python benchmarks/gateway_bench.py [--count 20000] [--size 256] [--window 250] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pika
import yaml
from pika.adapters.asyncio_connection import AsyncioConnection

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness.loadgen import run_amqpbench  # noqa: E402,F401 (the C clients below)
from harness.procs import start_node as harness_start_node  # noqa: E402
from harness.sample import cpu_seconds, nearest_rank  # noqa: E402

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN without values."""
    return nearest_rank(values, p) if values else float("nan")


def cpu(pid: int | None) -> float:
    """User + system CPU seconds of a process (0 when unknown)."""
    return 0.0 if pid is None else cpu_seconds(pid)


def broker_pid() -> int | None:
    r = subprocess.run(["pgrep", "-o", "beam.smp"], capture_output=True, text=True)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.strip() else None


class Meter:
    """CPU of the node, the broker and this process over one phase."""

    def __init__(self, node_pid: int | None, beam: int | None) -> None:
        self.pids = {"node": node_pid, "broker": beam}
        self.t0 = {k: cpu(p) for k, p in self.pids.items()}
        self.own0 = time.process_time()

    def done(self, count: int, client_cpu: float | None = None) -> dict[str, float]:
        out = {k: (cpu(p) - self.t0[k]) / count * 1e6 for k, p in self.pids.items() if p is not None}
        own = time.process_time() - self.own0 if client_cpu is None else client_cpu
        out["client"] = own / count * 1e6
        return out


# ---- pika directly ----------------------------------------------------------------------------------
def gateway_like(n: int) -> pika.BasicProperties:
    """The 0-9-1 properties the gateway publishes for amqpbench's messages (ulong message-id n)."""
    return pika.BasicProperties(delivery_mode=1, message_id=str(n),
                                headers={"x-amqp1-message-id-type": "ulong"})


async def pika_publish(queue: str, count: int, body: bytes, window: int,
                       props=None) -> tuple[float, list[float]]:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    lat: list[float] = []
    state = {"sent": 0, "acked": 0, "t": {}}

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        state["ch"] = ch
        ch.queue_declare(queue, durable=False, callback=lambda _f: ch.confirm_delivery(on_confirm,
                                                                                        callback=start))

    def start(_f):
        state["t0"] = time.perf_counter()
        fill()

    def fill():
        ch = state["ch"]
        while state["sent"] < count and state["sent"] - state["acked"] < window:
            state["sent"] += 1
            state["t"][state["sent"]] = time.perf_counter()
            p = pika.BasicProperties(delivery_mode=1) if props is None else props(state["sent"])
            ch.basic_publish("", queue, body, p, mandatory=True)

    def on_confirm(frame):
        m = frame.method
        now = time.perf_counter()
        tags = [t for t in state["t"] if t <= m.delivery_tag] if m.multiple else [m.delivery_tag]
        for t in tags:
            lat.append(now - state["t"].pop(t))
        state["acked"] += len(tags)
        if state["acked"] >= count:
            if not done.done():
                done.set_result(time.perf_counter() - state["t0"])
            state["conn"].close()
        else:
            fill()

    state["conn"] = AsyncioConnection(pika.URLParameters(URL), on_open_callback=on_open,
                                      custom_ioloop=loop)
    elapsed = await asyncio.wait_for(done, 300)
    await asyncio.sleep(0.1)
    return elapsed, lat


async def pika_consume(queue: str, count: int, window: int) -> float:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    state = {"n": 0}

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        ch.basic_qos(prefetch_count=window, callback=lambda _f: go(ch))

    def go(ch):
        state["t0"] = time.perf_counter()
        ch.basic_consume(queue, on_message, auto_ack=False)

    def on_message(ch, method, _props, _body):
        ch.basic_ack(method.delivery_tag)
        state["n"] += 1
        if state["n"] >= count and not done.done():
            done.set_result(time.perf_counter() - state["t0"])
            ch.queue_delete(queue)
            state["conn"].close()

    state["conn"] = AsyncioConnection(pika.URLParameters(URL), on_open_callback=on_open, custom_ioloop=loop)
    elapsed = await asyncio.wait_for(done, 300)
    await asyncio.sleep(0.1)
    return elapsed


# ---- the node -------------------------------------------------------------------------------------------
def start_node(tmp: Path, address: str, window: int) -> tuple[subprocess.Popen, str]:
    """The node with the gateway to RabbitMQ for ``address`` (both directions); (process, client URL)."""
    cfg = {"node": {"id": "GWB", "link_capacity": window},
           "listeners": [{"host": "127.0.0.1", "port": 0}],
           "brokers": [{"name": "rabbit", "url": URL, "confirm_window": window,
                        "addresses": [{"address": address, "semantics": "anycast", "direction": "both",
                                       "durable": False}]}]}
    path = tmp / "gw-bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    node = harness_start_node(path, tmp, "node")
    return node.proc, node.url


# ---- AMQP 1.0 clients: the C load generator ------------------------------------------------------------
def c_publish(exe: Path, url: str, address: str, count: int, size: int) -> tuple[float, float]:
    res, used = run_amqpbench(exe, "send", "--url", url, "--addr", address, "--count", str(count),
                              "--size", str(size))
    if res["accepted"] != count:
        raise RuntimeError(f"gateway publish: not all accepted: {res}")
    return res["elapsed"], used


def c_consume(exe: Path, url: str, address: str, count: int, window: int) -> tuple[float, float]:
    res, used = run_amqpbench(exe, "recv", "--url", url, "--addr", address, "--count", str(count),
                              "--credit", str(window), "--idle-s", "20")
    if res["received"] - res["duplicates"] < count:
        raise RuntimeError(f"gateway consume: messages missing: {res}")
    return res["elapsed"], used


# ---- AMQP 1.0 clients: python-qpid-proton ----------------------------------------------------------------
def py_publish(url: str, address: str, count: int, body: bytes) -> tuple[float, list[float]]:
    from proton import Message

    from tests.support.clients import Client
    from tests.support.waiting import close_all, pump

    snd = Client(url).sender(address)
    deadline = time.monotonic() + 15
    while snd.credit == 0 and time.monotonic() < deadline:     # the gateway connects, then attaches
        pump(0.05)
    data = Message(body=body, inferred=True).encode()
    sent, t0 = 0, time.perf_counter()
    times: dict[str, float] = {}
    lat: list[float] = []
    pending = {}
    while len(lat) < count:
        while sent < count and snd.credit > 0:
            tr = snd.send(data)
            times[tr.tag] = time.perf_counter()
            pending[tr.tag] = tr
            sent += 1
        pump(0.001)
        now = time.perf_counter()
        for tag in [t for t, tr in pending.items() if tr.settled]:
            tr = pending.pop(tag)
            assert tr.outcome == "ACCEPTED", tr
            lat.append(now - times.pop(tag))
    elapsed = time.perf_counter() - t0
    close_all()
    return elapsed, lat


def py_consume(url: str, address: str, count: int, window: int) -> float:
    from proton import Delivery

    from tests.support.clients import Client
    from tests.support.waiting import close_all, pump

    rcv = Client(url).receiver(address, credit=window, credit_window=window, auto_accept=False)
    t0 = time.perf_counter()
    done = 0
    while done < count:
        pump(0.001)
        fresh = rcv.received[done:]
        for rec in fresh:                  # accept in a batch (the helper accepts one write per message)
            rec.delivery.update(Delivery.ACCEPTED)
            rec.delivery.settle()
        done += len(fresh)
        if fresh:
            rcv.client._write()
        if time.perf_counter() - t0 > 120:
            raise RuntimeError(f"only {len(rcv.received)} of {count} consumed")
    elapsed = time.perf_counter() - t0
    rcv.received.clear()
    close_all()                            # the consumer goes: the next publish phase stores again
    return elapsed


# ---- one round ---------------------------------------------------------------------------------------------
def pika_round(args: argparse.Namespace, body: bytes, beam: int | None) -> dict[str, dict]:
    q = f"bench.pika.{uuid.uuid4().hex[:8]}"
    m = Meter(None, beam)
    t, lat = asyncio.run(pika_publish(q, args.count, body, args.window))
    out = {"pika publish": {"rate": args.count / t, "p50": pct(lat, 50), "p99": pct(lat, 99),
                            **m.done(args.count)}}
    m = Meter(None, beam)
    t = asyncio.run(pika_consume(q, args.count, args.window))
    out["pika consume"] = {"rate": args.count / t, **m.done(args.count)}
    if args.same_message:
        m = Meter(None, beam)
        t, lat = asyncio.run(pika_publish(q, args.count, body, args.window, gateway_like))
        out["pika publish, gateway's message"] = {"rate": args.count / t, "p50": pct(lat, 50),
                                                  "p99": pct(lat, 99), **m.done(args.count)}
        asyncio.run(pika_consume(q, args.count, args.window))
    return out


def gateway_round(args: argparse.Namespace, body: bytes, beam: int | None, node: subprocess.Popen, url: str,
                  address: str, exe: Path | None) -> dict[str, dict]:
    n = args.count
    m = Meter(node.pid, beam)
    if exe is not None:
        t, used = c_publish(exe, url, address, n, args.size)
        out = {"gateway publish": {"rate": n / t, **m.done(n, used)}}
    else:
        t, lat = py_publish(url, address, n, body)
        out = {"gateway publish": {"rate": n / t, "p50": pct(lat, 50), "p99": pct(lat, 99), **m.done(n)}}
    m = Meter(node.pid, beam)
    if exe is not None:
        t, used = c_consume(exe, url, address, n, args.window)
        out["gateway consume"] = {"rate": n / t, **m.done(n, used)}
    else:
        t = py_consume(url, address, n, args.window)
        out["gateway consume"] = {"rate": n / t, **m.done(n)}
    return out


def wait_bridged(url: str, address: str, exe: Path | None) -> None:
    """Until the gateway is connected: one message through (stored, then drained)."""
    if exe is not None:
        run_amqpbench(exe, "send", "--url", url, "--addr", address, "--count", "1")
        run_amqpbench(exe, "recv", "--url", url, "--addr", address, "--count", "1")
    else:
        py_publish(url, address, 1, b"warm-up")
        py_consume(url, address, 1, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--window", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=1, help="rounds (pika, then gateway); medians reported")
    ap.add_argument("--client", choices=("c", "python"), default="c", help="the AMQP 1.0 clients")
    ap.add_argument("--json", type=Path, default=None, help="also write every round's numbers here")
    ap.add_argument("--same-message", action=argparse.BooleanOptionalAction, default=True,
                    help="also time pika publishing the 0-9-1 message the gateway makes of amqpbench's "
                         "(its ulong message-id needs a type header: broker CPU)")
    args = ap.parse_args()
    body = os.urandom(args.size)
    exe = None
    if args.client == "c":
        import node_bench

        exe = node_bench.ensure_client(node_bench.DEFAULT_HARNESS)
    beam = broker_pid()
    rounds: list[dict[str, dict]] = []
    address = f"bench.gw.{uuid.uuid4().hex[:8]}/q"
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        node, url = start_node(Path(tmp), address, args.window)
        try:
            wait_bridged(url, address, exe)
            for i in range(args.repeat):
                r = pika_round(args, body, beam)
                r.update(gateway_round(args, body, beam, node, url, address, exe))
                rounds.append(r)
                pub = r["gateway publish"]["rate"] / r["pika publish"]["rate"]
                con = r["gateway consume"]["rate"] / r["pika consume"]["rate"]
                print(f"round {i + 1}: " + ", ".join(f"{k} {v['rate']:,.0f}" for k, v in r.items())
                      + f" -> publish {pub:.0%}, consume {con:.0%}", flush=True)
        finally:
            node.terminate()
            node.wait(10)
            with pika.BlockingConnection(pika.URLParameters(URL)) as conn:
                conn.channel().queue_delete(address)
    load1 = os.getloadavg()[0]

    def med(path: str, key: str) -> float:
        vals = [r[path][key] for r in rounds if key in r[path]]
        return statistics.median(vals) if vals else float("nan")

    print(f"\n{args.count} messages of {args.size} bytes, window {args.window}, {args.client} AMQP 1.0 "
          f"clients, RabbitMQ 127.0.0.1:5672, {len(rounds)} rounds, load average {load0:.1f} -> "
          f"{load1:.1f}\n")
    print("| path | msg/s | p50 ms | p99 ms | node µs/msg | broker µs/msg | client µs/msg |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for path in rounds[0]:
        p50, p99 = med(path, "p50"), med(path, "p99")
        lat = f"{p50 * 1e3:.2f} | {p99 * 1e3:.2f}" if p50 == p50 else "- | -"
        node_cpu = f"{med(path, 'node'):.0f}" if path.startswith("gateway") else "-"
        print(f"| {path} | {med(path, 'rate'):,.0f} | {lat} | {node_cpu} | {med(path, 'broker'):.0f} "
              f"| {med(path, 'client'):.0f} |")
    pubs = [r["gateway publish"]["rate"] / r["pika publish"]["rate"] for r in rounds]
    cons = [r["gateway consume"]["rate"] / r["pika consume"]["rate"] for r in rounds]
    print(f"\ngateway / pika, median of the rounds' ratios: publish {statistics.median(pubs):.0%} "
          f"({', '.join(f'{x:.0%}' for x in pubs)}), consume {statistics.median(cons):.0%} "
          f"({', '.join(f'{x:.0%}' for x in cons)}); target >= 80% of pika publish")
    same = [r["gateway publish"]["rate"] / r["pika publish, gateway's message"]["rate"] for r in rounds
            if "pika publish, gateway's message" in r]
    if same:
        print(f"gateway publish / pika publishing the gateway's message: {statistics.median(same):.0%} "
              f"({', '.join(f'{x:.0%}' for x in same)})")
    if args.json is not None:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "rounds": rounds,
                                         "load": [load0, load1]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
