"""The soak's traffic (soak_cycle.py): every flow's servers, clients in threads and counters, through a
mesh whose nodes may be killed and started again (servers on a restarted node are made again with
``serve``). The flows and their checks are described in soak_cycle.py's docstring."""

from __future__ import annotations

import hashlib
import itertools
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parent.parent
for p in (str(REPO), str(REPO / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

from harness.tally import Tally  # noqa: E402
from storm_bench import MIB  # noqa: E402

from router.rpc import RpcClient, RpcServer  # noqa: E402
from tests.support.clients import Client  # noqa: E402
from tests.support.waiting import pump  # noqa: E402

ECHO = "openstack.org/om/rpc/anycast/soak/echo"
ECHO_VICTIM = "balanced/soak/echo-victim"
NEWS = "multicast/soak/news"
FLOOD = "multicast/soak/flood"
LARGE = "balanced/soak/large"
LEDGERS = {"survivors": ("B", ("C", "D")), "via-victim": ("C", ("A", "D"))}   # sender, servers


class SoakMesh(Protocol):
    """What the traffic needs of the mesh: the node names and their client URLs."""

    names: list[str]
    url: dict[str, str]


class Traffic(Tally):
    """Every flow's threads and counters."""

    def __init__(self, mesh: SoakMesh, victim: str, rpc_rate: float, flood: int) -> None:
        super().__init__()
        self.mesh, self.victim, self.rpc_rate, self.flood = mesh, victim, rpc_rate, flood
        self.acked: dict[str, set[str]] = {k: set() for k in LEDGERS}
        self.unconfirmed: dict[str, set[str]] = {k: set() for k in LEDGERS}
        self.received: dict[str, Counter] = {k: Counter() for k in LEDGERS}
        self.flood_sent = 0
        self.flood_got: Counter = Counter()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.servers: dict[str, list[RpcServer]] = {n: [] for n in mesh.names}
        self.generation: dict[str, int] = {}
        self.news_seen: dict[str, Counter] = {n: Counter() for n in mesh.names}

    # ---- servers (those on the victim are made again after each restart) -------------------------------
    def serve(self, node: str) -> None:
        url = self.mesh.url[node]
        made = self.servers[node]
        if node in ("A", "D"):
            made.append(RpcServer(url, ECHO, lambda body, props: body, name=f"echo-{node}"))
        if node == self.victim:
            made.append(RpcServer(url, ECHO_VICTIM, lambda body, props: body, name=f"echo-victim-{node}"))
        if node in ("A", "B", "C"):
            gen = self.generation[node] = self.generation.get(node, 0) + 1
            made.append(RpcServer(url, NEWS, lambda body, props, n=node, g=gen: self._news(n, g, body),
                                  name=f"news-{node}"))
        if node == "B":
            made.append(RpcServer(url, LARGE, self._large, name="large-B"))
        for flow, (_, servers) in LEDGERS.items():
            if node in servers:
                made.append(RpcServer(url, f"balanced/soak/ledger-{flow}",
                                      lambda body, props, f=flow: self._ledger_got(f, body),
                                      name=f"ledger-{flow}-{node}"))

    def drop_servers(self, node: str) -> None:
        for s in self.servers[node]:
            try:
                s.stop()
            except Exception:
                pass
        self.servers[node] = []

    def _news(self, node: str, gen: int, body: Any) -> None:
        with self.lock:
            self.counts[f"news@{node}"] += 1
            self.news_seen[node][body] += 1

    def _ledger_got(self, flow: str, body: Any) -> None:
        with self.lock:
            self.received[flow][body] += 1

    def _large(self, body: Any, props: dict) -> None:
        ok = hashlib.sha256(bytes(body)).hexdigest() == props.get("sha256")
        self.count("large_ok" if ok else "large_corrupt")

    # ---- clients ---------------------------------------------------------------------------------------
    def start(self) -> None:
        for n in self.mesh.names:
            self.serve(n)
        self.wait_call(self.mesh.url["B"], ECHO_VICTIM, 60)
        for n in ("B", "C"):
            self._thread(self._rpc, n)
        for flow in LEDGERS:
            self._thread(self._ledger, flow)
        self._thread(self._large_sender)
        self._thread(self._multicast)
        self._thread(self._floods)
        self._thread(self._churn)

    def _thread(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True, name=fn.__name__)
        t.start()
        self.threads.append(t)

    def wait_call(self, url: str, address: str, timeout: float) -> float:
        """Seconds until a call to `address` from `url` is answered."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                with RpcClient(url, timeout=1) as c:
                    c.call(address, "ping")
                    return time.monotonic() - t0
            except Exception:
                time.sleep(0.05)
        raise RuntimeError(f"no answer from {address} via {url} within {timeout} s")

    def _paced(self, rate: float):
        period, t = 1.0 / rate, time.monotonic()
        while not self.stop.is_set():
            yield
            t += period
            delay = t - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)
            elif delay < -1.0:
                t = time.monotonic()

    def _client(self, node: str, key: str, **kw) -> RpcClient | None:
        try:
            return RpcClient(self.mesh.url[node], name=f"{key}-{node}", **kw)
        except Exception as exc:
            self.error(f"{key} connect", exc)
            self.stop.wait(0.5)
            return None

    def _rpc(self, node: str) -> None:
        c = None
        for i, _ in enumerate(self._paced(self.rpc_rate)):
            c = c or self._client(node, "rpc", timeout=5)
            if c is None:
                continue
            try:
                body = f"{node}-{i}"
                if c.call(ECHO, body) != body:
                    self.count("rpc_wrong")
                self.count("rpc_ok")
            except Exception as exc:
                self.error("rpc", exc)
                c = self._reopen(c)

    def _reopen(self, c: RpcClient) -> RpcClient | None:
        if not c.connected:
            try:
                c.close(1)
            except Exception:
                pass
            return None
        return c

    def _ledger(self, flow: str) -> None:
        sender = LEDGERS[flow][0]
        address = f"balanced/soak/ledger-{flow}"
        c = None
        ids = itertools.count()
        for _ in self._paced(self.rpc_rate):
            c = c or self._client(sender, f"ledger-{flow}", timeout=10, retry_modified=True)
            if c is None:
                continue
            ident = f"{flow}-{next(ids)}"
            try:
                c.cast(address, ident)
                with self.lock:
                    self.acked[flow].add(ident)
            except Exception as exc:
                with self.lock:
                    self.unconfirmed[flow].add(ident)
                self.error(f"ledger {flow}", exc)
                c = self._reopen(c)

    def _large_sender(self) -> None:
        c = None
        for i, _ in enumerate(self._paced(2.0)):
            c = c or self._client("D", "large", timeout=20)
            if c is None:
                continue
            body = hashlib.sha256(str(i).encode()).digest() * (MIB // 32)
            try:
                c.cast(LARGE, body, properties={"sha256": hashlib.sha256(body).hexdigest()})
                self.count("large_sent")
            except Exception as exc:
                self.error("large", exc)
                c = self._reopen(c)

    def _multicast(self) -> None:
        c = None
        for i, _ in enumerate(self._paced(self.rpc_rate)):
            c = c or self._client("D", "fanout", timeout=5)
            if c is None:
                continue
            try:
                c.fanout(NEWS, f"news-{i}")
                self.count("news_sent")
            except Exception as exc:
                self.error("multicast", exc)
                c = self._reopen(c)

    def _floods(self) -> None:
        """Pre-settled bursts C -> B, D (test clients, pumped by this thread alone)."""
        snd_c = Client(self.mesh.url["C"])
        rcvs = {}
        for n in ("B", "D"):
            cl = Client(self.mesh.url[n])
            rcvs[n] = cl.receiver(FLOOD, credit_window=1000)
        snd = snd_c.sender(FLOOD)
        time.sleep(2.0)
        while not self.stop.is_set():
            left = self.flood
            give_up = time.monotonic() + 10.0
            while left and time.monotonic() < give_up:     # pre-settled: only what the credit allows
                n = min(snd.credit, left)
                for _ in range(n):
                    snd.send("x" * 100, settled=True)
                left -= n
                pump(0.01)
            with self.lock:
                self.flood_sent += self.flood - left
            end = time.monotonic() + 10.0
            while time.monotonic() < end and not self.stop.is_set():
                pump(0.05)
            with self.lock:
                for n, r in rcvs.items():
                    self.flood_got[n] = len(r.received)
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            pump(0.05)
        with self.lock:
            for n, r in rcvs.items():
                self.flood_got[n] = len(r.received)

    def _churn(self) -> None:
        for i, _ in enumerate(self._paced(2.0)):
            node = self.mesh.names[i % len(self.mesh.names)]
            try:
                with RpcClient(self.mesh.url[node], timeout=5, name=f"churn-{node}") as c:
                    for _ in range(3):
                        c.call(ECHO, "churn")
                self.count("churn_ok")
            except Exception as exc:
                self.error(f"churn@{node}", exc)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
