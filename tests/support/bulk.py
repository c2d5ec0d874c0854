"""Many links at once: receivers on unique addresses attached over one raw connection in one burst.

A Proton client attaches one link per round trip; :func:`attach_receivers` writes every ATTACH frame in
one go (as a storm of clients would) and waits for the node's answers, so a test can put thousands of
links and addresses on a node in a second or two.
"""

from __future__ import annotations

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


def attach_receivers(url: str, addresses: Sequence[str], timeout: float = 60.0,
                     per_session: int = PER_SESSION) -> RawConn:
    """Open one raw connection, attach a receiver on each of ``addresses`` (``per_session`` links per
    session) and wait until the node has answered every ATTACH. The connection stays open (closed by
    :func:`tests.support.waiting.close_all`)."""
    raw = RawConn(url)
    raw.open(container_id="bulk-receivers")
    sessions = (len(addresses) + per_session - 1) // per_session
    for channel in range(sessions):
        raw.begin(channel, handle_max=per_session)
    frames = []
    for i, address in enumerate(addresses):
        channel, handle = divmod(i, per_session)
        fields = [f"bulk-{i}", uint(handle), True, None, None, described(SOURCE, [address]),
                  described(TARGET, [None])]
        frames.append(encode_frame(encode_performative(ATTACH, fields), channel))
    raw.send_bytes(b"".join(frames))
    deadline = time.monotonic() + timeout
    answered = 0
    while answered < len(addresses):
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{answered}/{len(addresses)} attaches answered within {timeout:.0f}s")
        frame = raw.read_frame(min(DEFAULT_TIMEOUT, deadline - time.monotonic()))
        if frame is None:
            raise AssertionError(f"node closed the bulk connection after {answered} attaches: "
                                 f"{raw.frames[-3:]}")
        if frame.code == ATTACH:
            answered += 1
    raw.frames.clear()
    return raw


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
