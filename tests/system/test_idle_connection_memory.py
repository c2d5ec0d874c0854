"""An idle client connection costs the node at most 16 KiB (issue 33, point 2).

Proton's transport buffers are built at 1 KiB (scripts/build_proton.py, run by make) and grown only for a
connection that fills them (router.adapter.pnbuffers): 2,000 idle connections (an AMQP header and an Open
each, answered) grow the node's RSS by ~11 KiB each here; with the stock Proton build, ~20 KiB.
benchmarks/conn_memory_bench.py breaks the figure down.
"""

from __future__ import annotations

import resource
import socket
import struct
import time

import pytest

from tests.support.raw_amqp import AMQP_HEADER, OPEN, encode_frame, encode_performative
from tests.support.resources import rss_bytes

KIB = 1024
COUNT = 2000


def _open_idle(port: int, count: int) -> list[socket.socket]:
    """`count` connections that sent a header and an Open and got the node's header and Open back."""
    hello = AMQP_HEADER + encode_frame(encode_performative(OPEN, ["idle"]))
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(hello)
        socks.append(s)
    for s in socks:                          # the node answered each: it holds its whole state
        s.settimeout(30)
        got = b""
        while len(got) < 12 or len(got) < 8 + struct.unpack(">I", got[8:12])[0]:
            chunk = s.recv(4096)
            assert chunk, "the node closed an idle connection"
            got += chunk
        assert got.startswith(AMQP_HEADER)
    return socks


def test_an_idle_connection_costs_at_most_16_kib(node_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < COUNT + 500:
        pytest.skip(f"{COUNT} connections need more than this process's {hard} file descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    node = node_factory(idle_timeout=0, extra={"listeners": [
        {"host": "127.0.0.1", "port": 0, "role": "normal", "max_connections": COUNT + 500}]})
    socks = _open_idle(node.port, 200)                          # the node's tables warmed up
    try:
        time.sleep(1.0)
        before = rss_bytes(node.proc.pid)
        socks += _open_idle(node.port, COUNT)
        time.sleep(1.0)
        per = (rss_bytes(node.proc.pid) - before) / COUNT / KIB
        assert per <= 16, f"{per:.1f} KiB per idle connection"
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
