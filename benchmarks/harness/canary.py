"""A canary RPC stream beside a benchmark's load: an echo server on one node, a caller on another at a
fixed rate, in a process of its own; its calls' latency in a time window (scale_bench.py,
restart_bench.py, memory_bench.py)."""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import threading
import time
from typing import Any

from router.rpc import RpcClient, RpcServer

ECHO = "openstack.org/om/rpc/anycast/scale/echo"


class Canary(threading.Thread):
    """RPC calls to `address` at a fixed rate; (start time, latency or None on error) per call."""

    def __init__(self, url: str, rate: float, address: str = ECHO) -> None:
        super().__init__(daemon=True)
        self.url, self.period, self.address = url, 1.0 / rate, address
        self.samples: list[tuple[float, float | None]] = []
        self.stop = False

    def run(self) -> None:
        with RpcClient(self.url, timeout=5, name="canary") as c:
            nxt = time.monotonic()
            while not self.stop:
                t0 = time.monotonic()
                try:
                    c.call(self.address, "ping")
                    self.samples.append((t0, time.monotonic() - t0))
                except Exception:
                    self.samples.append((t0, None))
                nxt += self.period
                time.sleep(max(0.0, nxt - time.monotonic()))


def _probe_main(pipe: Any, caller_url: str, callee_url: str, address: str, rate: float, name: str) -> None:
    """A canary's own process: the echo server and the caller, answering "samples" and "stop" requests."""
    server = RpcServer(callee_url, address, lambda body, props: body, name=f"echo-{name}")
    try:
        _wait_for_server(caller_url, address)
        canary = Canary(caller_url, rate, address)
        canary.start()
        pipe.send("ready")
        while pipe.recv() != "stop":
            pipe.send(list(canary.samples))
        canary.stop = True
        canary.join(10)
        pipe.send(list(canary.samples))
    finally:
        with contextlib.suppress(Exception):
            server.stop()


class CanaryProcess:
    """A canary RPC stream (echo server on the callee node, caller on the caller node) in a process of its
    own, so that the load the benchmark generates in this process (the storm's writer threads, the reader
    of A's answers) never holds the canary's interpreter: its latency is the mesh's."""

    def __init__(self, caller_url: str, callee_url: str, address: str, rate: float, name: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._pipe, child = ctx.Pipe()
        self._proc = ctx.Process(target=_probe_main, daemon=True,
                                 args=(child, caller_url, callee_url, address, rate, name))
        self._proc.start()
        if not self._pipe.poll(60) or self._pipe.recv() != "ready":
            raise SystemExit(f"scale_bench: the canary {name} did not start")
        self._final: list | None = None

    def samples(self) -> list[tuple[float, float | None]]:
        if self._final is not None:
            return self._final
        self._pipe.send("samples")
        return self._pipe.recv()

    def stop(self) -> None:
        if self._final is None and self._proc.is_alive():
            self._pipe.send("stop")
            self._final = self._pipe.recv() if self._pipe.poll(20) else []
        self._proc.join(10)

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Calls begun between `start` and `end` (time.monotonic(), the same clock in every process)."""
        samples = self.samples()
        lat = sorted(x for t, x in samples if start <= t <= end and x is not None)
        errors = sum(1 for t, x in samples if start <= t <= end and x is None)
        if not lat:
            return {"calls": 0, "errors": errors}
        offset = time.time() - time.monotonic()     # slow calls by wall clock, to match the nodes' logs
        slow = [(_clock(t + offset), round(1000 * x, 1))
                for t, x in samples if start <= t <= end and x is not None and x > 0.02]
        return {"calls": len(lat), "errors": errors, "p50_ms": 1000 * statistics.median(lat),
                "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], "max_ms": 1000 * lat[-1],
                "slow_calls": slow}


def _wait_for_server(url: str, address: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with RpcClient(url, timeout=2) as c:
        while True:
            try:
                c.call(address, "hello")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"
