"""Listening sockets whose accept queues hold a reconnect storm.

Linux caps a socket's accept queue (``listen()``'s backlog) to ``net.core.somaxconn`` (4096 since 5.4); a
SYN that finds the queue full is dropped and its client waits 1, 3, 7 ... s. A listener's ``backlog``
beyond that cap is made of several sockets bound to the same port with ``SO_REUSEPORT`` (the kernel
spreads new connections over them by their addresses), ``ceil(backlog / somaxconn)`` of them, at most
MAX_QUEUES. So that ``SO_REUSEPORT`` cannot let a second process share the port unnoticed, the port is
first bound without it: a port that another listener holds is refused as before.
"""

from __future__ import annotations

import socket

MAX_QUEUES = 16
SOMAXCONN = "/proc/sys/net/core/somaxconn"


def somaxconn(path: str = SOMAXCONN) -> int | None:
    """The kernel's cap on one socket's accept queue (Linux), None where it cannot be read."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def queues_for(backlog: int, cap: int | None, reuseport: bool = hasattr(socket, "SO_REUSEPORT")) -> int:
    """How many sockets make an accept queue of ``backlog`` when the kernel caps each at ``cap``."""
    if cap is None or cap <= 0 or backlog <= cap or not reuseport:
        return 1
    return min(MAX_QUEUES, -(-backlog // cap))


def bind_queues(host: str, port: int, backlog: int, queues: int) -> list[socket.socket]:
    """``queues`` listening sockets on ``host``:``port`` (0: a free port, the same for all), non-blocking.
    Raises OSError (the port taken, the host not ours) with nothing left open."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks: list[socket.socket] = []
    try:
        if queues > 1:
            probe = socket.socket(family, socket.SOCK_STREAM)   # the port must be free, not shared
            socks.append(probe)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            port = probe.getsockname()[1]
            socks.remove(probe)
            probe.close()
        for _ in range(queues):
            sock = socket.socket(family, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if queues > 1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(backlog)
            sock.setblocking(False)
            port = sock.getsockname()[1]
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks
