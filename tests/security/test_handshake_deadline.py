"""Attack: sockets that never complete the AMQP handshake hold file descriptors (issue 17, point 1).

A listener's `handshake_timeout` closes a connection whose protocol header, TLS, SASL and Open have not
all arrived in time; each is counted (`handshakeTimeouts` on the node and listener entities, /metrics)
and logged once per interval per listener, not once per socket.
"""

from __future__ import annotations

import select
import socket
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.clients import ACCEPTED, Client
from tests.support.management import Requester
from tests.support.ports import metrics_url
from tests.support.raw_amqp import AMQP_HEADER, SASL_HEADER
from tests.support.waiting import pump_for, wait_for

SILENT = 50


def _connect(url: str) -> socket.socket:
    host, port = url.split("//")[1].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def _closed(sock: socket.socket) -> bool:
    """The node closed it (EOF, or a reset); whatever the node wrote before is read and dropped."""
    while select.select([sock], [], [], 0)[0]:
        try:
            if not sock.recv(65536):
                return True
        except OSError:
            return True
    return False


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not in /metrics")


def test_silent_and_half_open_sockets_closed_and_counted(secure_node):
    node, (url,) = secure_node([{"handshake_timeout": 1}], idle_timeout=16,
                               extra={"metrics": {"host": "127.0.0.1", "port": 0}})
    client = Client(node.url)                       # an ordinary client on the other listener
    rcv = client.receiver("balanced/handshake", credit=1000)
    snd = client.sender("balanced/handshake")
    snd.wait_credit()
    start = time.monotonic()
    socks = [_connect(url) for _ in range(SILENT)]  # say nothing at all
    header_only = _connect(url)
    header_only.sendall(AMQP_HEADER)                # the header, then nothing (idle timeout 16 s)
    sasl_only = _connect(url)
    sasl_only.sendall(SASL_HEADER)                  # the SASL header, then nothing
    everyone = [*socks, header_only, sasl_only]
    sent = 0
    while time.monotonic() - start < 6 and not all(_closed(s) for s in everyone):
        tracker = snd.send(f"m{sent}")              # the normal client keeps working meanwhile
        sent += 1
        assert tracker.wait(timeout=2).state == ACCEPTED
        pump_for(0.05)
    elapsed = time.monotonic() - start
    still_open = [i for i, s in enumerate(everyone) if not _closed(s)]
    assert not still_open, f"{len(still_open)} sockets still open after {elapsed:.1f} s"
    assert elapsed < 3.5, elapsed
    assert len(rcv.wait_messages(sent)) == sent
    total = SILENT + 2
    assert Requester(Client(node.url)).node()["handshakeTimeouts"] == total
    row = Requester(Client(node.url)).by_id("listener")[url.split("//")[1]]
    assert row["handshakeTimeouts"] == total and row["connectionCount"] == 0, row
    assert _metric(metrics_url(node), "meshrouter_handshake_timeouts_total") == total
    lines = [ln for ln in node.stderr_tail(400).splitlines() if "did not complete the protocol header" in ln]
    assert 1 <= len(lines) <= 2, lines              # once per interval, not once per socket
    for s in everyone:
        s.close()


def test_completed_handshake_is_not_cut(secure_node):
    """A client that opened in time stays, silent or not, past the deadline."""
    node, (url,) = secure_node([{"handshake_timeout": 1}], idle_timeout=16)
    c = Client(url)
    wait_for(lambda: c.remote_open, what="open")
    pump_for(2.0)
    assert c.remote_open and not c.transport_closed
    rcv = c.receiver("balanced/after-deadline", credit=1)
    snd = c.sender("balanced/after-deadline")
    snd.wait_credit()
    assert snd.send("late").wait().state == ACCEPTED
    assert rcv.wait_messages(1)[0].body == "late"
    assert Requester(Client(node.url)).node()["handshakeTimeouts"] == 0


def test_default_deadline_is_ten_seconds(secure_node):
    node, (url,) = secure_node([{}])
    row = Requester(Client(node.url)).by_id("listener")[url.split("//")[1]]
    assert row["settings"]["handshake_timeout"] == 10.0
