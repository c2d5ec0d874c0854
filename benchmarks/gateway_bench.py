#!/usr/bin/env python3
"""Throughput and latency of the AMQP 0-9-1 gateway, next to pika talking to RabbitMQ directly.

In one run, on the same broker (127.0.0.1:5672, non-durable queues, 1 KiB-ish bodies):

* ``pika publish``: pika's AsyncioConnection publishing with confirms, ``--window`` unconfirmed;
* ``pika consume``: pika consuming the same messages with manual acks, prefetch ``--window``;
* ``gateway publish``: a Proton producer -> node -> gateway -> RabbitMQ (settled when confirmed);
* ``gateway consume``: RabbitMQ -> gateway -> node -> Proton consumer (acked when accepted).

The gateway address has direction ``both``: with no consumer attached the producer's messages are
stored in the broker (the publish phase), then a consumer drains them (the consume phase). Latency is
per message: send -> settlement (publish), and broker delivery order is not timed for consume.

  .venv/bin/python benchmarks/gateway_bench.py [--count 20000] [--size 256] [--window 250]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
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

from tests.integration.helpers import Client, pump  # noqa: E402

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


# ---- pika directly ----------------------------------------------------------------------------------
async def pika_publish(queue: str, count: int, body: bytes, window: int) -> tuple[float, list[float]]:
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
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=1), mandatory=True)

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


# ---- through the gateway ------------------------------------------------------------------------------
def start_node(tmp: Path, address: str, window: int) -> tuple[subprocess.Popen, str]:
    cfg = {"node": {"id": "GWB", "link_capacity": window},
           "listeners": [{"host": "127.0.0.1", "port": 0}],
           "brokers": [{"name": "rabbit", "url": URL, "confirm_window": window,
                        "addresses": [{"address": address, "semantics": "anycast", "direction": "both",
                                       "durable": False}]}]}
    path = tmp / "gw-bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "router", "run", str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=open(tmp / "node.err", "w"), text=True)
    url = None
    for line in proc.stdout:
        m = re.match(r"listening: role=normal url=(\S+)", line)
        if m:
            url = m[1]
        if line.startswith("ready:"):
            break
    return proc, url


def cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_publish(url: str, address: str, count: int, body: bytes) -> tuple[float, list[float]]:
    from proton import Message

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
    return time.perf_counter() - t0, lat


def gateway_consume(url: str, address: str, count: int, window: int) -> float:
    from proton import Delivery

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
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--window", type=int, default=250)
    args = ap.parse_args()
    body = os.urandom(args.size)
    tag = uuid.uuid4().hex[:8]
    results = {}

    q = f"bench.pika.{tag}"
    t, lat = asyncio.run(pika_publish(q, args.count, body, args.window))
    results["pika publish (confirms)"] = (args.count / t, lat)
    t = asyncio.run(pika_consume(q, args.count, args.window))
    results["pika consume (manual ack)"] = (args.count / t, [])

    address = f"bench.gw.{tag}/q"
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_node(Path(tmp), address, args.window)
        try:
            c0 = cpu(proc.pid)
            t, lat = gateway_publish(url, address, args.count, body)
            c1 = cpu(proc.pid)
            results["gateway publish (mesh->broker)"] = (args.count / t, lat, (c1 - c0) / args.count * 1e6)
            t = gateway_consume(url, address, args.count, args.window)
            c2 = cpu(proc.pid)
            results["gateway consume (broker->mesh)"] = (args.count / t, [], (c2 - c1) / args.count * 1e6)
        finally:
            proc.terminate()
            proc.wait(10)
            with pika.BlockingConnection(pika.URLParameters(URL)) as conn:
                conn.channel().queue_delete(address)

    print(f"{args.count} messages of {args.size} bytes, window {args.window}, RabbitMQ 127.0.0.1:5672\n")
    print("| path | msg/s | latency p50 ms | p99 ms | node CPU µs/msg |")
    print("|---|---:|---:|---:|---:|")
    for name, (rate, lat, *rest) in results.items():
        p50 = f"{pct(lat, 50) * 1e3:.2f}" if lat else "-"
        p99 = f"{pct(lat, 99) * 1e3:.2f}" if lat else "-"
        cpu_us = f"{rest[0]:.0f}" if rest else "-"
        print(f"| {name} | {rate:,.0f} | {p50} | {p99} | {cpu_us} |")
    pub = results["gateway publish (mesh->broker)"][0] / results["pika publish (confirms)"][0]
    con = results["gateway consume (broker->mesh)"][0] / results["pika consume (manual ack)"][0]
    print(f"\ngateway / pika: publish {pub:.0%}, consume {con:.0%} (target >= 80% of pika publish)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
