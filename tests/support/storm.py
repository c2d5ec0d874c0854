"""A reconnect storm: many raw AMQP clients in one process, all connecting at once, reconnecting when dropped.

Each client is a bare non-blocking socket that writes the protocol header, an Open, a Begin and
``links`` receiver ATTACHes at once (as a pipelining client does), and counts as *up* when the node's
Open and every ATTACH came back. When its connection ends (the node was killed) it dials again at once,
then every ``retry`` s (with jitter) while the port refuses (``backoff`` > 1: each wait that many times the
last, up to 10 s, as Proton's own reconnect does with 2). One process holds ``clients`` of them in one
``selectors`` loop, so ten processes make 10,000 clients on two cores.

Run as ``python -m tests.support.storm --port P --clients N [--links L] [--name X]``: it connects when a
line arrives on stdin, and prints one JSON line per *round* (every client up again after a start or a
loss), then keeps the connections until stdin closes. A round says when its last client came up
(``time.monotonic()``, one clock for every process of the machine), how many clients had a TCP segment
retransmitted (``TCP_INFO``: on loopback only a full accept queue drops a SYN or an ACK) and how many
dials were refused.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import selectors
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field

from proton import Data, Described, uint, ulong

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
OPEN, BEGIN, ATTACH, CLOSE = 0x10, 0x11, 0x12, 0x18
SOURCE, TARGET = 0x28, 0x29
TCPI_TOTAL_RETRANS = 100        # offset of tcpi_total_retrans (u32) in Linux's struct tcp_info
TCP_INFO_LEN = 104


def _frame(code: int, fields: list, channel: int = 0) -> bytes:
    d = Data()
    d.put_object(Described(ulong(code), fields))
    body = d.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def handshake(container: str, addresses: list[str]) -> bytes:
    """Header, Open, Begin and one receiver ATTACH per address: what a client writes when it connects."""
    out = [AMQP_HEADER, _frame(OPEN, [container, None, uint(65536)]),
           _frame(BEGIN, [None, uint(0), uint(65535), uint(65535), uint(len(addresses) + 1)])]
    for i, address in enumerate(addresses):
        out.append(_frame(ATTACH, [f"{container}-{i}", uint(i), True, None, None,
                                   Described(ulong(SOURCE), [address]), Described(ulong(TARGET), [None])]))
    return b"".join(out)


def performatives(buf: bytearray) -> list[int]:
    """Take every complete frame off ``buf``; the performative codes of those that carry one."""
    codes = []
    while len(buf) >= 8:
        size = int.from_bytes(buf[:4], "big")
        if len(buf) < size:
            break
        doff = buf[4] * 4
        body = bytes(buf[doff:size])
        del buf[:size]
        # a performative: descriptor constructor 0x00, then smallulong (0x53 code) or ulong (0x80 8 bytes)
        if len(body) >= 3 and body[0] == 0 and body[1] == 0x53:
            codes.append(body[2])
        elif len(body) >= 10 and body[0] == 0 and body[1] == 0x80:
            codes.append(int.from_bytes(body[2:10], "big"))
    return codes


MAX_RETRY = 10.0            # seconds: the longest wait between two dials with a backoff


@dataclass
class Client:
    """One client's connection and what it has seen of the node in this round."""

    index: int
    data: bytes
    links: int
    sock: socket.socket | None = None
    dialed: float = 0.0
    buf: bytearray = field(default_factory=bytearray)
    connected: bool = False
    header: bool = False
    opened: bool = False
    attached: int = 0
    up: bool = False
    retrans: int = 0           # segments retransmitted on this connection (read when it came up)
    refused: int = 0           # dials refused in this round
    closed_by_node: bool = False


class Storm:
    """``clients`` clients of ``links`` receivers each against 127.0.0.1:``port``, in one loop."""

    def __init__(self, port: int, clients: int, links: int = 1, name: str = "storm", retry: float = 0.1,
                 host: str = "127.0.0.1", backoff: float = 1.0) -> None:
        self.addr = (host, port)
        self.retry = retry
        self.backoff = backoff
        self.sel = selectors.DefaultSelector()
        self.clients = [Client(i, self._handshake(name, i, links), links) for i in range(clients)]
        self.waiting: list[tuple[float, Client]] = []    # (when to dial again, client)
        self.down = set(range(clients))
        self.round = 0
        self.round_start = 0.0
        self.rounds: list[dict] = []
        self.stopped = False

    @staticmethod
    def _handshake(name: str, i: int, links: int) -> bytes:
        return handshake(f"{name}-{i}", [f"balanced/{name}/{i}/{j}" for j in range(links)])

    # ---- dialling -----------------------------------------------------------------------------------
    def start(self) -> None:
        self.round_start = time.monotonic()
        for c in self.clients:
            self._dial(c)

    def _dial(self, c: Client) -> None:
        c.sock = s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.dialed = time.monotonic()
        c.buf.clear()
        c.connected = c.header = c.opened = c.up = False
        c.attached = 0
        rc = s.connect_ex(self.addr)
        if rc not in (0, errno.EINPROGRESS):
            self._refused(c)
            return
        self.sel.register(s, selectors.EVENT_WRITE, c)

    def _refused(self, c: Client) -> None:
        self._drop_socket(c)
        c.refused += 1
        wait = min(MAX_RETRY, self.retry * self.backoff ** (c.refused - 1))
        self.waiting.append((time.monotonic() + wait * (0.5 + random.random()), c))

    def _drop_socket(self, c: Client) -> None:
        if c.sock is not None:
            try:
                self.sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
            c.sock.close()
            c.sock = None

    # ---- events -------------------------------------------------------------------------------------
    def _writable(self, c: Client) -> None:
        err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._refused(c)
            return
        try:
            c.sock.sendall(c.data)          # a few hundred bytes: fits the socket buffer at once
        except OSError:
            self._refused(c)
            return
        c.connected = True
        self.sel.modify(c.sock, selectors.EVENT_READ, c)

    def _readable(self, c: Client) -> None:
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost(c)
            return
        c.buf += data
        if not c.header:
            if len(c.buf) < 8:
                return
            del c.buf[:8]
            c.header = True
        for code in performatives(c.buf):
            if code == OPEN:
                c.opened = True
            elif code == ATTACH:
                c.attached += 1
            elif code == CLOSE:
                c.closed_by_node = True
        if not c.up and c.opened and c.attached >= c.links:
            self._came_up(c)

    def _came_up(self, c: Client) -> None:
        c.up = True
        info = c.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        if len(info) >= TCPI_TOTAL_RETRANS + 4:
            c.retrans = int.from_bytes(info[TCPI_TOTAL_RETRANS:TCPI_TOTAL_RETRANS + 4], sys.byteorder)
        self.down.discard(c.index)
        if not self.down:
            self._round_done()

    def _lost(self, c: Client) -> None:
        self._drop_socket(c)
        if not self.down:                   # the first loss of a round starts the next one
            self.round += 1
            self.round_start = time.monotonic()
            for other in self.clients:
                other.refused = 0
        self.down.add(c.index)
        c.up = False
        self._dial(c)

    def _round_done(self) -> None:
        now = time.monotonic()
        report = {"pid": os.getpid(), "round": self.round, "clients": len(self.clients),
                  "links": self.clients[0].links if self.clients else 0,
                  "started": self.round_start, "all_up": now, "took_s": now - self.round_start,
                  "retransmitted": sum(1 for c in self.clients if c.retrans),
                  "refused_dials": sum(c.refused for c in self.clients),
                  "closed_by_node": sum(1 for c in self.clients if c.closed_by_node)}
        self.rounds.append(report)
        print(json.dumps(report), flush=True)

    # ---- loop ---------------------------------------------------------------------------------------
    def run(self) -> None:
        while not self.stopped:
            timeout = 0.05 if self.waiting else 0.2
            for key, mask in self.sel.select(timeout):
                c = key.data
                if c.sock is None:
                    continue
                if not c.connected:
                    self._writable(c)
                elif mask & selectors.EVENT_READ:
                    self._readable(c)
            if self.waiting:
                now = time.monotonic()
                due = [c for t, c in self.waiting if t <= now]
                if due:
                    self.waiting = [(t, c) for t, c in self.waiting if t > now]
                    for c in due:
                        self._dial(c)

    def close(self) -> None:
        for c in self.clients:
            self._drop_socket(c)
        self.sel.close()


class StormProcess:
    """``python -m tests.support.storm`` in a child process; its round reports as they come."""

    def __init__(self, port: int, clients: int, links: int = 1, name: str = "storm", retry: float = 0.1,
                 python: str = sys.executable, cwd: str | None = None,
                 prefix: list[str] | None = None, backoff: float = 1.0) -> None:
        from pathlib import Path

        cwd = cwd or str(Path(__file__).resolve().parents[2])
        import queue
        import subprocess

        self.reports: queue.Queue = queue.Queue()
        if prefix is None:                  # a command the client runs under, e.g. "nice -n 10"
            prefix = os.environ.get("STORM_PREFIX", "").split()
        self.proc = subprocess.Popen(
            [*prefix, python, "-m", "tests.support.storm", "--port", str(port), "--clients", str(clients),
             "--links", str(links), "--name", name, "--retry", str(retry), "--backoff", str(backoff)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        first = self.reports.get(timeout=60)
        if not first or not first.get("ready"):
            raise RuntimeError(f"storm client did not start: {first!r}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.reports.put(json.loads(line))
            except ValueError:
                pass
        self.reports.put(None)

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def next_round(self, timeout: float) -> dict | None:
        """The next round's report, None if it did not come within ``timeout`` s."""
        import queue

        try:
            return self.reports.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def close(self) -> None:
        import subprocess

        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--links", type=int, default=1, help="receivers (unique addresses) per client")
    p.add_argument("--name", default=f"storm{os.getpid()}")
    p.add_argument("--retry", type=float, default=0.1, help="seconds between dials while refused")
    p.add_argument("--backoff", type=float, default=1.0, help="each wait this many times the last (to 10 s)")
    args = p.parse_args()
    storm = Storm(args.port, args.clients, args.links, args.name, args.retry, backoff=args.backoff)

    def stdin_watch() -> None:
        sys.stdin.readline()                 # "go"
        go.set()
        sys.stdin.read()                     # until closed
        storm.stopped = True

    go = threading.Event()
    threading.Thread(target=stdin_watch, daemon=True).start()
    print(json.dumps({"pid": os.getpid(), "ready": True}), flush=True)
    go.wait()
    storm.start()
    try:
        storm.run()
    finally:
        storm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
