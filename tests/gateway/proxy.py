"""A TCP relay that can go silent: ``pause()`` stops forwarding in both directions while keeping every
connection open (a broker that hangs, or a network that drops packets without resetting anything);
``resume()`` forwards again. New connections are accepted and relayed the same way."""

from __future__ import annotations

import select
import socket
import threading


class PausableProxy:
    """Relays 127.0.0.1:``port`` to ``target_port``; one thread, select loop."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.pairs: dict[socket.socket, socket.socket] = {}
        self.paused = threading.Event()
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=f"pausable-proxy-{self.port}", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        self.paused.set()

    def resume(self) -> None:
        self.paused.clear()

    def _drop(self, s: socket.socket) -> None:
        other = self.pairs.pop(s, None)
        if other is not None:
            self.pairs.pop(other, None)
            other.close()
        s.close()

    def _run(self) -> None:
        while not self._stop:
            watch = [self.lsock] + ([] if self.paused.is_set() else list(self.pairs))
            try:
                ready, _, _ = select.select(watch, [], [], 0.02)
            except (OSError, ValueError):
                continue
            for s in ready:
                if s is self.lsock:
                    try:
                        conn, _ = s.accept()
                        up = socket.create_connection(self.target, timeout=2)
                    except OSError:
                        continue
                    self.pairs[conn] = up
                    self.pairs[up] = conn
                    self.accepted += 1
                    continue
                if s not in self.pairs or self.paused.is_set():
                    continue
                try:
                    data = s.recv(256 * 1024)
                except OSError:
                    data = b""
                if not data:
                    self._drop(s)
                    continue
                try:
                    self.pairs[s].sendall(data)
                except OSError:
                    self._drop(s)

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        for s in list(self.pairs):
            if s in self.pairs:
                self._drop(s)
        self.lsock.close()
