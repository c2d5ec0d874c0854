#!/usr/bin/env python3
"""Benchmark oslo.messaging RPC (amqp1 driver) through the mesh against RabbitMQ Direct Reply-To, router.rpc.

Targets (--targets, default all, run interleaved: every round runs each target once, on fresh nodes):
  oslo-one-node   oslo.messaging 14.9.3, amqp1 driver: an RPC server (executor "threading") in its own
                  process and an RPCClient in this process, both on one node (A).
  oslo-four-node  the same across topologies/four-node.yaml's full mesh on free ports: client on C,
                  server on B (one inter-router hop each way).
  rabbit-drt      RabbitMQ on 127.0.0.1:5672 with pika, Direct Reply-To: a server process consumes a
                  queue (manual ack, prefetch 100) and publishes each reply to the request's reply_to
                  (``amq.rabbitmq.reply-to.*``) with its correlation_id through the default exchange; the
                  caller publishes with reply_to = ``amq.rabbitmq.reply-to`` and consumes that pseudo-queue
                  (auto-ack). pika's BlockingConnection is not thread-safe, so each concurrent caller has
                  its own connection (oslo's callers share one transport, router.rpc's one client).
  rpc-one-node,   router.rpc through benchmarks/rpc_bench.py's own code (its measure(): fresh nodes,
  rpc-four-node   RpcServer process with 8 workers, one shared RpcClient), so router.rpc runs in the same
                  window.

Modes per target: sequential (one caller, --calls calls after --warmup) and concurrent (--threads callers,
--calls calls in total). A call carries a 64-character string and gets it back (oslo: method ``echo``).
Reported per row: the median over --repeat rounds of calls/s and of each round's p50 / p99 latency (µs);
"node CPU" is the nodes' user + sys CPU per call (/proc), for the mesh targets. The 2-core VM is noisy:
compare targets within one invocation and keep --json for the spread.

Examples:
  .venv/bin/python benchmarks/oslo_bench.py
  .venv/bin/python benchmarks/oslo_bench.py --targets oslo-one-node,rabbit-drt --calls 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for p in (REPO, REPO / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import rpc_bench  # noqa: E402
from rpc_bench import BenchError, fmt, med, ready_child, run_calls, running, wait_for_stop  # noqa: E402

RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
TOPIC = "bench-echo"
BODY = "x" * 64
TARGETS = ("oslo-one-node", "oslo-four-node", "rabbit-drt", "rpc-one-node", "rpc-four-node")
OSLO_NODES = {"oslo-one-node": ("one-node", "A", "A"), "oslo-four-node": ("four-node", "B", "C")}
RPC_SCENARIO = {"rpc-one-node": "one-node", "rpc-four-node": "four-node"}


# ---------------------------------------------------------------------------------------------- oslo


def _quiet_oslo():
    """Import oslo.messaging with the amqp1 driver's deprecation warnings silenced."""
    saved = warnings.filters[:]
    warnings.simplefilter("ignore")             # eventlet's deprecation notice, printed on import
    import oslo_messaging as om
    from oslo_messaging._drivers import impl_amqp1  # noqa: F401  (its import sets simplefilter("always"))

    warnings.filters[:] = saved
    warnings.simplefilter("ignore", DeprecationWarning)
    return om


def oslo_conf():
    """A private ConfigOpts (no global CONF); addressing_mode stays ``dynamic`` (the driver picks routable
    addresses from the node's ``product``). The metrics sender thread stops 1 s after its last use."""
    from oslo_config import cfg
    from oslo_messaging._metrics import client as metrics_client

    conf = cfg.ConfigOpts()
    conf([], project="meshrouter-oslo-bench", default_config_files=[], default_config_dirs=[])
    conf.register_opts(metrics_client.oslo_messaging_metrics, group="oslo_messaging_metrics")
    conf.set_override("metrics_thread_stop_timeout", 1, group="oslo_messaging_metrics")
    return conf


def oslo_serve(url: str) -> int:
    """--oslo-serve: an echo RPC server until stdin closes or SIGTERM."""
    om = _quiet_oslo()

    class Echo:
        def echo(self, ctxt, text):
            return text

    transport = om.get_rpc_transport(oslo_conf(), url=url)
    srv = om.get_rpc_server(transport, om.Target(topic=TOPIC, server="bench"), [Echo()], executor="threading")
    srv.start()
    print("ready", flush=True)
    wait_for_stop()
    srv.stop()
    srv.wait()
    transport.cleanup()
    return 0


def child(args: list[str], what: str):
    """This script in server mode, until it is no longer needed (a context manager)."""
    return ready_child([sys.executable, __file__, *args], what)


def report(target: str, r: dict[str, Any]) -> None:
    print(f"  {target} {r['mode']:10s} {r['calls']} calls: {r['calls_per_s']:.0f} calls/s, "
          f"p50 {fmt(r['p50_us'])} µs, p99 {fmt(r['p99_us'])} µs, errors {r['errors']}"
          + (f" {r['first_errors']}" if r["errors"] else ""), flush=True)


def measure_oslo(target: str, a: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    om = _quiet_oslo()
    scenario, server_node, caller_node = OSLO_NODES[target]
    results = []
    with running(scenario, tmp) as mesh, \
            child(["--oslo-serve", mesh.url(server_node) + "/"], "oslo RPC server"):
        transport = om.get_rpc_transport(oslo_conf(), url=mesh.url(caller_node) + "/")
        try:
            client = om.get_rpc_client(transport, om.Target(topic=TOPIC), timeout=30)
            client.call({}, "echo", text=BODY)      # waits until the server's address reaches the caller
            for _ in range(a.warmup):
                client.call({}, "echo", text=BODY)

            def call(_i: int) -> None:
                if client.call({}, "echo", text=BODY) != BODY:
                    raise BenchError("wrong reply")

            for mode, threads in (("sequential", 1), ("concurrent", a.threads)):
                cpu0 = mesh.cpu_seconds()
                r = run_calls(call, a.calls, threads)
                cpu = mesh.cpu_seconds() - cpu0
                mesh.check_alive()
                r.update(target=target, mode=mode, threads=threads,
                         node_cpu_us_per_call=cpu / r["calls"] * 1e6 if r["calls"] else None)
                report(target, r)
                results.append(r)
        finally:
            transport.cleanup()
    return results


# ---------------------------------------------------------------------------------------------- RabbitMQ


def rabbit_serve(url: str, queue: str) -> int:
    """--rabbit-serve: consume ``queue`` and answer each request on its reply_to (Direct Reply-To)."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=False, auto_delete=True)
    ch.basic_qos(prefetch_count=100)

    def on_request(ch, method, props, body):
        ch.basic_publish("", props.reply_to, body,
                         pika.BasicProperties(correlation_id=props.correlation_id))
        ch.basic_ack(method.delivery_tag)

    ch.basic_consume(queue, on_request)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    while not stop.is_set():
        conn.process_data_events(time_limit=0.2)
    conn.close()                                   # auto_delete: the queue goes with its consumer
    return 0


class DrtCaller:
    """One pika connection calling through Direct Reply-To, one call at a time."""

    def __init__(self, url: str, queue: str):
        import pika

        self.pika = pika
        self.queue = queue
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.replies: dict[str, bytes] = {}
        self.ch.basic_consume("amq.rabbitmq.reply-to", self._on_reply, auto_ack=True)

    def _on_reply(self, _ch, _method, props, body) -> None:
        self.replies[props.correlation_id] = body

    def call(self, body: bytes, timeout: float = 30) -> bytes:
        cid = uuid.uuid4().hex
        self.ch.basic_publish("", self.queue, body,
                              self.pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id=cid))
        deadline = time.monotonic() + timeout
        while cid not in self.replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply")
            self.conn.process_data_events(time_limit=left)
        return self.replies.pop(cid)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def measure_rabbit(target: str, a: argparse.Namespace, _tmp: Path) -> list[dict[str, Any]]:
    queue = f"oslo_bench.{uuid.uuid4().hex[:10]}"
    body = BODY.encode()
    results = []
    with child(["--rabbit-serve", a.rabbit_url, "--queue", queue], "pika Direct Reply-To server"):
        callers = [DrtCaller(a.rabbit_url, queue) for _ in range(a.threads)]
        try:
            for _ in range(a.warmup):
                callers[0].call(body)

            def call(i: int) -> None:
                if callers[i].call(body) != body:
                    raise BenchError("wrong reply")

            for mode, threads in (("sequential", 1), ("concurrent", a.threads)):
                r = run_calls(call, a.calls, threads)
                r.update(target=target, mode=mode, threads=threads, node_cpu_us_per_call=None)
                report(target, r)
                results.append(r)
        finally:
            for c in callers:
                c.close()
    return results


# ---------------------------------------------------------------------------------------------- router.rpc


def measure_router_rpc(target: str, a: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    ra = argparse.Namespace(warmup=a.warmup, threads=a.threads, workers=a.rpc_workers, calls=a.calls)
    results = rpc_bench.measure(RPC_SCENARIO[target], ra, tmp)
    for r in results:
        r["target"] = target
    return results


MEASURE = {"oslo-one-node": measure_oslo, "oslo-four-node": measure_oslo, "rabbit-drt": measure_rabbit,
           "rpc-one-node": measure_router_rpc, "rpc-four-node": measure_router_rpc}


# ---------------------------------------------------------------------------------------------- report


def table(runs: list[dict[str, Any]], targets: list[str]) -> str:
    lines = ["| target | mode | callers | calls/s | p50 µs | p99 µs | node CPU µs/call | p50 per round µs | "
             "runs | errors |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for target in targets:
        for mode in ("sequential", "concurrent"):
            rs = [r for r in runs if r["target"] == target and r["mode"] == mode]
            if not rs:
                continue
            cells = [target, mode, rs[0]["threads"], fmt(med([r["calls_per_s"] for r in rs])),
                     fmt(med([r["p50_us"] for r in rs])), fmt(med([r["p99_us"] for r in rs])),
                     fmt(med([r["node_cpu_us_per_call"] for r in rs])),
                     " / ".join(fmt(r["p50_us"]) for r in rs), len(rs), sum(r["errors"] for r in rs)]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--targets", default=",".join(TARGETS),
                   help=f"comma-separated, from: {', '.join(TARGETS)}")
    p.add_argument("--calls", type=int, default=2000, help="measured calls per mode and round (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="calls before measuring (default 200)")
    p.add_argument("--threads", type=int, default=8, help="callers in the concurrent mode (default 8)")
    p.add_argument("--repeat", type=int, default=3,
                   help="rounds; every target runs once per round (default 3)")
    p.add_argument("--rpc-workers", type=int, default=8, help="router.rpc RpcServer workers (default 8)")
    p.add_argument("--rabbit-url", default=RABBIT_URL, help="RabbitMQ (default %(default)s)")
    p.add_argument("--json", type=Path, help="also write every run's results to this file")
    p.add_argument("--oslo-serve", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--rabbit-serve", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--queue", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.targets = [t.strip() for t in a.targets.split(",") if t.strip()]
    unknown = [t for t in a.targets if t not in TARGETS]
    if unknown:
        p.error(f"unknown target(s) {unknown}; known: {', '.join(TARGETS)}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.oslo_serve is not None:
        return oslo_serve(a.oslo_serve)
    if a.rabbit_serve is not None:
        return rabbit_serve(a.rabbit_serve, a.queue)
    runs: list[dict[str, Any]] = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="oslo_bench-") as tmp:
        try:
            for i in range(a.repeat):
                for target in a.targets:
                    print(f"{target}: round {i + 1}/{a.repeat}", flush=True)
                    runs.extend(MEASURE[target](target, a, Path(tmp)))
        except BenchError as exc:
            print(f"oslo_bench: {exc}", file=sys.stderr)
            return 1
    print()
    print(table(runs, a.targets))
    print()
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    print(f"settings: {a.calls} calls per mode, {a.warmup} warm-up, {a.threads} concurrent callers, "
          f"{os.cpu_count()} CPUs, load average {load0:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    if a.json:
        a.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(a).items()}, "runs": runs},
                                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
