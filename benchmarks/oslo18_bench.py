"""oslo.messaging 18.3.1: meshrouter's ``amqp`` driver (one node; the four-node mesh, server on B and client
on C) against the ``rabbit`` driver (the local RabbitMQ), interleaved in one window. Run with .venv-oslo18's
interpreter (``make oslo18`` builds it)::

    .venv-oslo18/bin/python benchmarks/oslo18_bench.py --rounds 2
    .venv-oslo18/bin/python benchmarks/oslo18_bench.py --simulator SDIST/tools/simulator.py

Per target and round (fresh server process each time, ``threading`` executor; client in this process):
sequential calls (p50, p99, calls/s), 10 and 50 concurrent callers sharing one transport (calls/s, p50),
casts/s and notifications/s (sent as fast as the API allows, counted until the server process has all of
them). ``--simulator``: oslo.messaging's own tools/simulator.py (rpc-server / rpc-client -p 10) on each target
too. Prints a markdown table; medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.procs import free_port  # noqa: E402
from harness.sample import nearest_rank  # noqa: E402

warnings.simplefilter("ignore")

RABBIT = "rabbit://guest:guest@127.0.0.1:5672/"
EDGES = (("B", "A"), ("C", "A"), ("C", "B"), ("D", "C"), ("D", "B"), ("D", "A"))
RULES = [{"prefix": "openstack.org/om/rpc/multicast", "distribution": "multicast"},
         {"prefix": "openstack.org/om/rpc/unicast", "distribution": "closest"},
         {"prefix": "openstack.org/om/rpc/anycast", "distribution": "balanced"},
         {"prefix": "openstack.org/om/notify", "distribution": "balanced"}]


class Nodes:
    """Node processes (``python -m router run``) on fixed free ports."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []

    def start(self, names: tuple[str, ...], edges: tuple[tuple[str, str], ...]) -> dict[str, int]:
        client = {n: free_port() for n in names}
        inter = {n: free_port() for n in names}
        import yaml
        for n in names:
            listeners = [{"host": "127.0.0.1", "port": client[n], "role": "normal"}]
            if any(to == n for _, to in edges):
                listeners.append({"host": "127.0.0.1", "port": inter[n], "role": "inter-router"})
            cfg = {"node": {"id": n, "log_level": "warning"}, "listeners": listeners,
                   "connectors": [{"host": "127.0.0.1", "port": inter[to]} for frm, to in edges if frm == n],
                   "router": {"hello_interval": 0.2, "hello_max_age": 0.6},
                   "addresses": {"default": "balanced", "rules": RULES}}
            path = self.tmp / f"node-{n}-{len(self.procs)}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            p = subprocess.Popen([sys.executable, "-m", "router", "run", str(path)], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, cwd=self.tmp)
            self.procs.append(p)
            for line in p.stdout:
                if line.startswith("ready:"):
                    break
            threading.Thread(target=lambda p=p: [None for _ in p.stdout], daemon=True).start()
        time.sleep(2.0 if len(names) > 1 else 0.2)       # the mesh converges (HELLO every 0.2 s)
        return client

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()


_CONF: list = []


def _conf():
    """oslo's global CONF (18.3.1's RPC client reads [oslo_messaging_tracing] from the transport's conf,
    which only the global one has registered), parsed once."""
    from oslo_config import cfg
    if not _CONF:
        cfg.CONF([], project="oslo18-bench", default_config_files=[], default_config_dirs=[])
        _CONF.append(cfg.CONF)
    return _CONF[0]


def serve(url: str, topic: str) -> int:
    """The server process: RPC server + notification listener, counting casts and notifications."""
    import oslo_messaging as om
    conf = _conf()
    counts = {"casts": 0, "notes": 0}
    lock = threading.Lock()

    class Ep:
        def echo(self, ctxt, text):
            return text

        def note(self, ctxt, text):
            with lock:
                counts["casts"] += 1

        def count(self, ctxt):
            with lock:
                return dict(counts)

    class NEp:
        def info(self, ctxt, publisher_id, event_type, payload, metadata):
            with lock:
                counts["notes"] += 1

    t = om.get_rpc_transport(conf, url=url)
    nt = om.get_notification_transport(conf, url=url)
    srv = om.get_rpc_server(t, om.Target(topic=topic, server="bench-server"), [Ep()], executor="threading")
    lst = om.get_notification_listener(nt, [om.Target(topic=topic)], [NEp()], executor="threading")
    srv.start()
    lst.start()
    print("started", flush=True)
    sys.stdin.read()              # until the bench closes our stdin
    srv.stop()
    lst.stop()
    srv.wait()
    lst.wait()
    t.cleanup()
    nt.cleanup()
    return 0


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in 0..1."""
    return nearest_rank(values, 100 * q)


def measure(server_url: str, client_url: str, topic: str, args) -> dict[str, float]:
    import oslo_messaging as om
    proc = subprocess.Popen([sys.executable, __file__, "--serve", server_url, topic], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    conf = _conf()
    t = om.get_rpc_transport(conf, url=client_url)
    nt = om.get_notification_transport(conf, url=client_url)
    out: dict[str, float] = {}
    try:
        client = om.get_rpc_client(t, om.Target(topic=topic), timeout=30)
        text = "x" * 64
        deadline = time.monotonic() + 20
        while True:                         # the server's subscription reached the client's node
            try:
                client.prepare(timeout=2).call({}, "echo", text=text)
                break
            except om.MessagingTimeout:
                if time.monotonic() > deadline:
                    raise
        for _ in range(args.warmup):
            client.call({}, "echo", text=text)
        lat = []
        t0 = time.perf_counter()
        for _ in range(args.calls):
            s = time.perf_counter()
            client.call({}, "echo", text=text)
            lat.append(time.perf_counter() - s)
        out["seq_cps"] = args.calls / (time.perf_counter() - t0)
        out["seq_p50_us"] = pct(lat, 0.5) * 1e6
        out["seq_p99_us"] = pct(lat, 0.99) * 1e6
        for n in (10, 50):
            per = max(1, args.concurrent_calls // n)
            lats: list[float] = []
            lock = threading.Lock()
            barrier = threading.Barrier(n + 1)

            def caller(barrier=barrier, per=per, lock=lock, lats=lats) -> None:
                barrier.wait()
                mine = []
                for _ in range(per):
                    s = time.perf_counter()
                    client.call({}, "echo", text=text)
                    mine.append(time.perf_counter() - s)
                with lock:
                    lats.extend(mine)

            threads = [threading.Thread(target=caller) for _ in range(n)]
            for th in threads:
                th.start()
            barrier.wait()
            t0 = time.perf_counter()
            for th in threads:
                th.join()
            out[f"c{n}_cps"] = n * per / (time.perf_counter() - t0)
            out[f"c{n}_p50_us"] = pct(lats, 0.5) * 1e6

        def wait_count(key: str, n: int) -> float:
            while True:
                got = client.call({}, "count")[key]
                if got >= n:
                    return time.perf_counter()
                time.sleep(0.01)

        t0 = time.perf_counter()
        for _ in range(args.casts):
            client.cast({}, "note", text=text)
        out["casts_per_s"] = args.casts / (wait_count("casts", args.casts) - t0)
        notifier = om.Notifier(nt, publisher_id="bench", driver="messagingv2", topics=[topic])
        t0 = time.perf_counter()
        for i in range(args.notes):
            notifier.info({}, "bench.event", {"i": i})
        out["notes_per_s"] = args.notes / (wait_count("notes", args.notes) - t0)
    finally:
        t.cleanup()
        nt.cleanup()
        proc.stdin.close()
        proc.wait(30)
    return out


def simulator(path: str, server_url: str, client_url: str, tmp: Path) -> dict[str, float]:
    """tools/simulator.py rpc-server + rpc-client -p 10 -m 200 (2,000 calls), its round-trip summary."""
    cwd = os.path.dirname(path)
    srv = subprocess.Popen([sys.executable, path, "--url", server_url, "rpc-server", "-e", "threading"],
                           cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        done = subprocess.run([sys.executable, path, "--url", client_url, "rpc-client", "-p", "10", "-m",
                               "200", "--timeout", "30"], cwd=cwd, capture_output=True, text=True,
                              timeout=300)
        text = done.stdout + done.stderr
        m = re.search(r"round-trip: duration: [\d.]+ count: (\d+) \(([\d.]+) msg/sec\).*latency: ([\d.]+)",
                      text)
        e = re.search(r"error: duration: [\d.]+ count: (\d+)", text)
        if m is None:
            return {"sim_error": text[-500:]}
        return {"sim_count": int(m[1]), "sim_msg_per_s": float(m[2]), "sim_latency_ms": float(m[3]) * 1000,
                "sim_errors": int(e[1]) if e else -1}
    finally:
        srv.terminate()
        srv.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", nargs=2, metavar=("URL", "TOPIC"), help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--concurrent-calls", type=int, default=2000)
    ap.add_argument("--casts", type=int, default=3000)
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--simulator", help="path of the 18.3.1 sdist's tools/simulator.py")
    ap.add_argument("--targets", default="rabbit,node,mesh")
    args = ap.parse_args()
    if args.serve:
        return serve(*args.serve)
    tmp = Path(tempfile.mkdtemp(prefix="oslo18-bench-"))
    results: dict[str, list[dict[str, float]]] = {}
    t_start = time.strftime("%H:%M")
    for r in range(args.rounds):
        for target in args.targets.split(","):
            nodes = Nodes(tmp)
            try:
                if target == "rabbit":
                    server_url = client_url = RABBIT
                elif target == "node":
                    ports = nodes.start(("A",), ())
                    server_url = client_url = f"amqp://127.0.0.1:{ports['A']}/"
                else:
                    ports = nodes.start(("A", "B", "C", "D"), EDGES)
                    server_url, client_url = (f"amqp://127.0.0.1:{ports['B']}/", f"amqp://127.0.0.1:{ports['C']}/")
                res = measure(server_url, client_url, f"bench-{target}-{r}-{os.getpid()}", args)
                if args.simulator:
                    res.update(simulator(args.simulator, server_url, client_url, tmp))
            finally:
                nodes.stop()
            print(f"round {r + 1} {target}: " + json.dumps({k: round(v, 1) if isinstance(v, float) else v
                                                           for k, v in res.items()}), flush=True)
            results.setdefault(target, []).append(res)
    load = os.getloadavg()[0]
    print(f"\n{t_start}-{time.strftime('%H:%M')}, {args.rounds} rounds, load average {load:.1f}\n")
    cols = ["seq_p50_us", "seq_p99_us", "seq_cps", "c10_cps", "c10_p50_us", "c50_cps", "c50_p50_us",
            "casts_per_s", "notes_per_s"] + (["sim_msg_per_s", "sim_latency_ms", "sim_errors"]
                                            if args.simulator else [])
    print("| target | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for target, rows in results.items():
        med = [statistics.median(r[c] for r in rows if c in r) if any(c in r for r in rows) else float("nan")
               for c in cols]
        print(f"| {target} | " + " | ".join(f"{v:,.0f}" for v in med) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
