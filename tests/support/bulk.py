"""Many links at once: receivers on unique addresses attached over raw connections in one burst.

A Proton client attaches one link per round trip; :func:`attach_receivers` writes every ATTACH frame in
one go (as a storm of clients would) and waits for the node's answers, so a test can put thousands of
links and addresses on a node in a second or two.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Sequence

from proton import uint

from tests.support.clients import parse_url
from tests.support.raw_amqp import (
    AMQP_HEADER,
    ATTACH,
    OPEN,
    SOURCE,
    TARGET,
    RawConn,
    described,
    encode_frame,
    encode_performative,
)
from tests.support.waiting import DEFAULT_TIMEOUT, WaitTimeout

PER_SESSION = 1000
PER_CONNECTION = 1000       # a listener's default max_links (issue 17): a storm comes over many connections


def attach_receivers(url: str, addresses: Sequence[str], timeout: float = 60.0,
                     per_session: int = PER_SESSION, per_connection: int = PER_CONNECTION,
                     paused: int | None = None, frame_timeout: float = DEFAULT_TIMEOUT) -> list[RawConn]:
    """Attach a receiver on each of ``addresses``: ``per_connection`` links per raw connection (the
    default limit of a listener), ``per_session`` per session, every ATTACH written before any answer is
    read; wait until the node has answered all of them. The connections stay open (closed by
    :func:`tests.support.waiting.close_all`). ``paused``: the node's pid, stopped (SIGSTOP) while every
    connection's ATTACHes are written, so that they are all waiting when it goes on. ``frame_timeout``:
    the longest wait for the node's next answer (a loaded machine takes a while for 100,000)."""
    conns = []
    writes = []
    for start in range(0, len(addresses), per_connection):
        chunk = addresses[start:start + per_connection]
        raw = RawConn(url)
        raw.open(container_id=f"bulk-receivers-{start}")
        sessions = (len(chunk) + per_session - 1) // per_session
        for channel in range(sessions):
            raw.begin(channel, handle_max=per_session)
        frames = []
        for i, address in enumerate(chunk):
            channel, handle = divmod(i, per_session)
            fields = [f"bulk-{start + i}", uint(handle), True, None, None, described(SOURCE, [address]),
                      described(TARGET, [None])]
            frames.append(encode_frame(encode_performative(ATTACH, fields), channel))
        writes.append((raw, b"".join(frames)))
        conns.append((raw, len(chunk)))
    if paused is not None:
        os.kill(paused, signal.SIGSTOP)
    try:
        for raw, data in writes:
            raw.send_bytes(data)
    finally:
        if paused is not None:
            os.kill(paused, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    for raw, expected in conns:
        answered = 0
        while answered < expected:
            if time.monotonic() > deadline:
                raise WaitTimeout(f"{answered}/{expected} attaches of one connection answered within "
                                  f"{timeout:.0f}s")
            frame = raw.read_frame(min(frame_timeout, deadline - time.monotonic()))
            if frame is None:
                raise AssertionError(f"node closed a bulk connection after {answered} attaches: "
                                     f"{raw.frames[-3:]}")
            if frame.code == ATTACH:
                answered += 1
        raw.frames.clear()
    return [raw for raw, _ in conns]


def open_idle_connections(url: str, count: int) -> list[socket.socket]:
    """``count`` client connections that send the AMQP header and an Open, then nothing (the node needs
    ``idle_timeout: 0`` to keep them). Their sockets are returned (the caller closes them); what the node
    sends them stays unread in the kernel's buffers."""
    host, port = parse_url(url)
    opening = AMQP_HEADER + encode_frame(encode_performative(OPEN, ["idle", None, uint(65536)]))
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, port))
        s.sendall(opening)
        socks.append(s)
    return socks
