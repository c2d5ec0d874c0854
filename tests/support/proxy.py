"""A TCP relay the test controls: put it between two nodes, or a node and a broker, and fail the path.

:class:`TcpProxy` relays every connection made to its port to a target port on 127.0.0.1 (one thread,
a select loop). When either side of a relayed connection closes, the other side is reset. Three ways
to fail the path, each undone by its pair:

* :meth:`~TcpProxy.pause` / :meth:`~TcpProxy.resume`: stop relaying in both directions, every
  connection left open; new connections are still accepted (and held the same way). ``resume``
  relays again on the same connections: a broker that hangs, then recovers.
* :meth:`~TcpProxy.blackhole` / :meth:`~TcpProxy.release`: stop relaying on the current connections
  (kept open, out of the relay) and refuse new ones; ``release`` resets the held connections and
  accepts new ones again: a cable pulled, then plugged back in.
* :meth:`~TcpProxy.cut` / :meth:`~TcpProxy.listen`: reset every connection and refuse new ones;
  ``listen`` accepts new ones again on the same port.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time


class TcpProxy:
    """Relays 127.0.0.1:``port`` (a free port, or ``port`` if given) to 127.0.0.1:``target_port``."""

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = port
        self.lsock: socket.socket | None = None
        self.pairs: dict[socket.socket, socket.socket] = {}
        self.held: list[socket.socket] = []     # blackholed: open, never read or written
        self.paused = False
        self.accepted = 0
        self._lock = threading.Lock()
        self._stop = False
        self._listen()
        self._thread = threading.Thread(target=self._run, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    # ---- failing the path
    def pause(self) -> None:
        """Stop relaying (both directions, every connection, new ones too); keep accepting."""
        with self._lock:
            self.paused = True

    def resume(self) -> None:
        """Relay again after :meth:`pause`."""
        with self._lock:
            self.paused = False

    def blackhole(self) -> None:
        """Silently stop relaying on every connection (the sockets stay open, nothing is closed or
        reset: the peers notice only by their timers) and refuse new connections."""
        with self._lock:
            self._close_listener()
            self.held.extend(self.pairs)
            self.pairs.clear()

    def release(self) -> None:
        """Reset the connections :meth:`blackhole` held and accept new ones again."""
        with self._lock:
            for s in self.held:
                self._reset(s)
            self.held = []
            self._listen()

    def cut(self) -> None:
        """Reset every relayed connection and refuse new ones."""
        with self._lock:
            self._close_listener()
            for s in list(self.pairs):
                if s in self.pairs:
                    self._drop(s)

    def listen(self) -> None:
        """Accept new connections again (on the same port) after :meth:`cut`."""
        with self._lock:
            self._listen()

    def close(self) -> None:
        """Reset everything (held connections too) and stop the relay thread."""
        self.cut()
        with self._lock:
            for s in self.held:
                self._reset(s)
            self.held = []
        self._stop = True
        self._thread.join(2)

    # ---- the relay
    def _listen(self) -> None:
        if self.lsock is not None:
            return
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        s.setblocking(False)
        self.port = s.getsockname()[1]
        self.lsock = s

    def _close_listener(self) -> None:
        if self.lsock is not None:
            self.lsock.close()
            self.lsock = None

    @staticmethod
    def _reset(s: socket.socket) -> None:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            s.close()
        except OSError:
            pass

    def _drop(self, s: socket.socket) -> None:
        other = self.pairs.pop(s, None)
        if other is not None:
            self.pairs.pop(other, None)
            self._reset(other)
        self._reset(s)

    def _accept(self) -> None:
        assert self.lsock is not None
        try:
            conn, _ = self.lsock.accept()
        except OSError:
            return
        try:
            up = socket.create_connection(self.target, timeout=2)
        except OSError:
            self._reset(conn)
            return
        conn.setblocking(True)
        up.setblocking(True)
        for x in (conn, up):
            x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pairs[conn] = up
        self.pairs[up] = conn
        self.accepted += 1

    def _relay(self, s: socket.socket) -> None:
        try:
            data = s.recv(256 * 1024)
        except OSError:
            data = b""
        if not data:
            self._drop(s)
            return
        try:
            self.pairs[s].sendall(data)
        except OSError:
            self._drop(s)

    def _run(self) -> None:
        while not self._stop:
            with self._lock:
                rlist = [] if self.paused else list(self.pairs)
                if self.lsock is not None:
                    rlist.append(self.lsock)
                r = []
                if rlist:
                    try:
                        r, _, _ = select.select(rlist, [], [], 0.02)
                    except (OSError, ValueError):
                        continue
                for s in r:
                    if s is self.lsock:
                        self._accept()
                    elif s in self.pairs and not self.paused:
                        self._relay(s)
            if not rlist:
                time.sleep(0.02)
