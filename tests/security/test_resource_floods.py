"""Attack: one connection making the node hold unbounded state; running out of file descriptors
(issue 17, point 5).

Listeners have limits by default (`max_sessions` 256, `max_links` 1000, `max_connections` 4096): a
session or link flood on one connection grows the node by less than 100 MB and another connection's
round trips stay under 50 ms meanwhile. Connections beyond the process's file-descriptor limit are
accepted and closed at once, counted and logged once per interval; the node keeps serving.
"""

from __future__ import annotations

import socket
import statistics
import time

from proton import uint

from tests.support.clients import ACCEPTED, Client
from tests.support.management import Requester
from tests.support.nodes import launch, node_config, stop_all
from tests.support.raw_amqp import (
    ATTACH,
    BEGIN,
    SOURCE,
    TARGET,
    RawConn,
    described,
    encode_frame,
    encode_performative,
)
from tests.support.resources import rss_bytes
from tests.support.waiting import pump_for, wait_for

MB = 1024 * 1024


def _canary(url: str, address: str):
    """A client on its own connection: sender and receiver of `address`, and a round-trip timer."""
    c = Client(url)
    rcv = c.receiver(address, credit_window=100)
    snd = c.sender(address)
    snd.wait_credit()

    def round_trip() -> float:
        start = time.monotonic()
        tr = snd.send("ping")
        rcv.wait_messages(len(rcv.received) + 1)
        tr.wait()
        assert tr.state == ACCEPTED
        return time.monotonic() - start
    for _ in range(20):
        round_trip()                                 # warm
    return round_trip


def _begins(count: int) -> bytes:
    begin = encode_performative(BEGIN, [None, uint(0), uint(100), uint(100), uint(2**32 - 1)])
    return b"".join(encode_frame(begin, ch) for ch in range(count))


def _attaches(count: int) -> bytes:
    return b"".join(encode_frame(encode_performative(ATTACH, [
        f"flood-{i}", uint(i), True, None, None, described(SOURCE, [f"balanced/flood/{i}"]),
        described(TARGET, [None])])) for i in range(count))


def _during(flood, round_trip, seconds: float) -> list[float]:
    """Round trips of the canary while `flood` runs (sent from this thread in pieces between them)."""
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        flood()
        times.append(round_trip())
    return times


def _flood(raw: RawConn, data: bytes, piece: int = 64 * 1024):
    pieces = [data[i:i + piece] for i in range(0, len(data), piece)]

    def step() -> None:
        if pieces:
            try:
                raw.send_bytes(pieces.pop(0))
            except OSError:                     # the node closed the connection (as it should)
                pieces.clear()
    return step


def test_session_flood_bounded(node):
    round_trip = _canary(node.url, "balanced/canary-sessions")
    base = rss_bytes(node.pid)
    quiet = [round_trip() for _ in range(50)]
    raw = RawConn(node.url)
    assert raw.open().field(3) == 255                       # channel-max: 256 sessions by default
    times = _during(_flood(raw, _begins(32767)), round_trip, 3.0)
    pump_for(0.5)
    growth = rss_bytes(node.pid) - base
    p50, worst = statistics.median(times), max(times)
    print(f"session flood: RSS +{growth / MB:.1f} MB, canary p50 {p50 * 1000:.1f} ms (quiet "
          f"{statistics.median(quiet) * 1000:.1f}), max {worst * 1000:.1f} ms over {len(times)}")
    assert growth < 100 * MB, growth
    assert p50 < 0.05, times


def test_link_flood_bounded(node):
    round_trip = _canary(node.url, "balanced/canary-links")
    base = rss_bytes(node.pid)
    raw = RawConn(node.url)
    raw.open()
    raw.send_bytes(_begins(1))
    times = _during(_flood(raw, _attaches(50_000)), round_trip, 4.0)
    pump_for(0.5)
    growth = rss_bytes(node.pid) - base
    p50, worst = statistics.median(times), max(times)
    print(f"link flood: RSS +{growth / MB:.1f} MB, canary p50 {p50 * 1000:.1f} ms, max {worst * 1000:.1f} ms "
          f"over {len(times)}")
    assert growth < 100 * MB, growth
    assert p50 < 0.05, times
    links = Requester(Client(node.url)).node()["linkCount"]
    assert links <= 1000 + 10, links
    raw.wait_eof(timeout=5)                                 # closed after 100 refusals


def test_connections_beyond_the_fd_limit_refused_cleanly(tmp_path):
    cfg = node_config("A", extra={"listeners": [{"host": "127.0.0.1", "port": 0}]})
    node = launch(cfg, tmp_path, 0, prefix=["prlimit", "--nofile=64:64", "--"])
    try:
        client = Client(node.url)
        rcv = client.receiver("balanced/fd", credit=100)
        snd = client.sender("balanced/fd")
        snd.wait_credit()
        host, port = node.url.split("//")[1].rsplit(":", 1)
        socks = []
        for _ in range(150):                       # far beyond 64 descriptors
            s = socket.create_connection((host, int(port)), timeout=5)
            socks.append(s)
        time.sleep(1.0)
        closed = 0
        for s in socks:
            s.settimeout(0.2)
            try:
                closed += s.recv(1) == b""
            except TimeoutError:
                pass
            except OSError:
                closed += 1
        assert closed >= 150 - 64, closed                 # the others were accepted and closed at once
        assert node.proc.poll() is None                   # alive
        assert snd.send("still serving").wait().state == ACCEPTED
        assert rcv.wait_messages(1)[0].body == "still serving"
        log = node.stderr_tail(200)
        lines = [ln for ln in log.splitlines() if "for want of a file descriptor" in ln]
        assert 1 <= len(lines) <= 2, log                  # once per interval, not per connection
        for s in socks:
            s.close()
        wait_for(lambda: Requester(Client(node.url)).node()["connectionsRefusedNoFd"] >= 150 - 64,
                 what="the refusals counted")
    finally:
        failure = stop_all([node])
        assert failure is None, failure
