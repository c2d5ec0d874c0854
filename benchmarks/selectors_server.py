#!/usr/bin/env python3
"""A minimal node runner on a plain `selectors` loop, to measure against the asyncio NodeServer.

Measurement tool only (see benchmarks/loop_compare.py). It builds the same RouterCore + Engine from a
config file as router/node/server.py and drives them the same way: a readable socket is read and pumped
at once (process, apply_credit, flush, process, resume_streams, apply_credit, flush); accepts, writable
sockets and the timer tick are pumped once per loop iteration. Write interest is held while a flush is
incomplete. Prints the node's `listening:` / `ready:` lines; SIGTERM / SIGINT stop it (exit 0).

  .venv/bin/python benchmarks/selectors_server.py CONFIG.yaml
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import sys
import time

from cproton_ffi.lib import pn_transport_tick

from router.adapter.connection import Connection
from router.adapter.engine import Engine
from router.adapter.pump import pump
from router.addressing import AddressRules
from router.amqp.codec import FlowEchoDetector
from router.config import ConfigError, NodeConfig, load_config
from router.forwarding.core import RouterCore
from router.logs import setup_logging

log = logging.getLogger("selectors_server")

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class SelectorsNode:
    """One router node driven by a `selectors.DefaultSelector` loop."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        rules = AddressRules([(r.prefix, r.distribution) for r in config.address_rules],
                             config.default_distribution)
        self.core = RouterCore(config.node_id, rules, config.link_capacity)
        self.engine = Engine(self.core, config.node_id, config.idle_timeout)
        self.sel = selectors.DefaultSelector()
        self.listeners: list[socket.socket] = []
        self.urls: list[tuple[str, str]] = []
        self.running = False
        self.pending = False  # a pump is due at the end of this loop iteration
        timeout = config.idle_timeout
        self.tick_interval = min(1.0, timeout / 4) if timeout > 0 else 1.0
        # Signals wake select() through this socket pair; the handler only sets `running`.
        self._wake_r, self._wake_w = socket.socketpair()

    def start(self) -> None:
        """Bind every listener (raises OSError when a port is taken) and install the signal handlers."""
        for lc in self.config.listeners:
            sock = socket.socket(socket.AF_INET6 if ":" in lc.host else socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((lc.host, lc.port))
            sock.listen(128)
            sock.setblocking(False)
            self.sel.register(sock, READ, lc.role)
            self.listeners.append(sock)
            host, port = sock.getsockname()[:2]
            self.urls.append((lc.role, f"amqp://{host}:{port}"))
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self.sel.register(self._wake_r, READ, None)
        signal.set_wakeup_fd(self._wake_w.fileno())
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self.running = True

    def _on_signal(self, signum: int, frame: object) -> None:
        self.running = False

    def run(self) -> None:
        """The loop: until a signal arrives."""
        next_tick = time.monotonic()
        while self.running:
            now = time.monotonic()
            if now >= next_tick:
                self._tick()
                next_tick = now + self.tick_interval
            for key, mask in self.sel.select(max(0.0, next_tick - time.monotonic())):
                data = key.data
                if data.__class__ is Connection:
                    if mask & READ:
                        self._readable(data)
                    if mask & WRITE and data.alive:
                        self.engine.dirty.add(data)
                        self.pending = True
                elif data is None:                      # wake-up socket (a signal)
                    while True:
                        try:
                            if not self._wake_r.recv(4096):
                                break
                        except (BlockingIOError, InterruptedError):
                            break
                else:
                    self._accept(key.fileobj, data)     # type: ignore[arg-type]
            if self.pending:
                self._pump()
        self.stop()

    def stop(self) -> None:
        """Close listeners and every connection."""
        signal.set_wakeup_fd(-1)
        for sock in self.listeners:
            self.sel.unregister(sock)
            sock.close()
        self.listeners = []
        for conn in list(self.engine.conns.values()):
            self._close_socket(conn)
            self.engine.kill(conn)
        self._reap()
        self.sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _accept(self, lsock: socket.socket, role: str) -> None:
        while True:
            try:
                sock, addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = self.engine.add_connection(sock, f"{addr[0]}:{addr[1]}", role, FlowEchoDetector())
            self.sel.register(sock, READ, conn)
            self.pending = True

    def _readable(self, conn: Connection) -> None:
        if not conn.alive:
            return
        if conn.read():
            self.engine.answer_echo(conn)
        self.engine.dirty.add(conn)
        self._pump()                                     # at once, as NodeServer._readable does

    def _pump(self) -> None:
        """Handle all Proton events, apply credit, write output (the sequence of NodeServer._pump)."""
        self.pending = False
        engine = self.engine
        try:
            pump(engine, self._write_interest)
        except Exception:
            log.exception("internal error while processing events")
        self._reap()

    def _write_interest(self, conn: Connection, on: bool) -> None:
        self.sel.modify(conn.sock, READ | WRITE if on else READ, conn)

    def _close_socket(self, conn: Connection) -> None:
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _reap(self) -> None:
        for conn in self.engine.take_dead():
            self._close_socket(conn)
            conn.free()

    def _tick(self) -> None:
        """Drive Proton's idle-timeout processing on every connection."""
        now_ms = int(time.monotonic() * 1000)
        for conn in list(self.engine.conns.values()):
            if conn.alive:
                pn_transport_tick(conn.pn_transport, now_ms)
                self.engine.dirty.add(conn)
        self.pending = True


def main(argv: list[str] | None = None) -> int:
    """Load the config, serve until SIGTERM / SIGINT. Exit 0 when stopped, 1 / 2 on errors."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: selectors_server.py CONFIG", file=sys.stderr)
        return 2
    try:
        config = load_config(args[0])
    except ConfigError as exc:
        print(f"selectors_server: error: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_level, config.log_levels)
    node = SelectorsNode(config)
    try:
        node.start()
    except OSError as exc:
        print(f"selectors_server: error: cannot listen: {exc}", file=sys.stderr)
        return 1
    for role, url in node.urls:
        print(f"listening: role={role} url={url}", flush=True)
    print(f"ready: node={config.node_id} pid={os.getpid()}", flush=True)
    node.run()
    log.info("node %s stopped", config.node_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
