"""Per-listener limits: connections, frame size, message size, sessions, links, idle timeout."""

from __future__ import annotations

import time

import pytest
from proton import Message

from tests.support.clients import ACCEPTED, REJECTED, Client
from tests.support.management import Requester
from tests.support.raw_amqp import BEGIN, CLOSE, DISPOSITION, FLOW, RawConn
from tests.support.waiting import wait_for

LIMIT_NAME = "amqp:resource-limit-exceeded"
SIZE_NAME = "amqp:link:message-size-exceeded"


def _refused(c: Client) -> str:
    wait_for(lambda: c.conn.remote_condition is not None or c.transport_closed, what="refusal")
    cond = c.conn.remote_condition
    assert cond is not None, f"closed without a condition: {c.error}"
    return f"{cond.name}: {cond.description}"


# ---- max_connections ----------------------------------------------------------------------------------

def test_max_connections(secure_node):
    node, (url,) = secure_node([{"max_connections": 2}])
    first, second = Client(url), Client(url)
    extra = [Client(url, wait_open=False) for _ in range(3)]
    for c in extra:
        text = _refused(c)
        assert text.startswith(LIMIT_NAME) and "max_connections 2" in text, text
    assert first.remote_open and not first.transport_closed
    assert node.stderr_tail().count("max_connections (2) reached") == 1     # logged once, not per refusal
    rows = Requester(Client(node.url)).by_id("listener")
    assert rows[url.split("//")[1]]["connectionCount"] == 2
    first.close()
    wait_for(lambda: "accepting connections again (3 refused)" in node.stderr_tail(), what="limit lifted")
    third = Client(url)                                                          # room again
    assert third.remote_open
    rcv = second.receiver("balanced/maxconn", credit=1)
    snd = third.sender("balanced/maxconn")
    snd.wait_credit()
    assert snd.send("ok").wait().state == ACCEPTED
    assert rcv.wait_messages(1)[0].body == "ok"


def test_limits_visible_in_management(secure_node):
    limits = {"max_connections": 7, "max_frame_size": 4096, "max_message_size": 100000, "max_sessions": 3,
              "max_links": 9, "idle_timeout": 5}
    node, (url,) = secure_node([limits])
    row = Requester(Client(node.url)).by_id("listener")[url.split("//")[1]]
    for key, value in limits.items():
        assert row["settings"][key] == value, row
    assert row["settings"]["sasl"]["mechanisms"] == ["ANONYMOUS"]


# ---- max_frame_size -----------------------------------------------------------------------------------

def test_max_frame_size_negotiated(secure_node):
    node, (url,) = secure_node([{"max_frame_size": 1024}])
    assert RawConn(url).open().field(2) == 1024
    c = Client(url)
    assert c.transport.remote_max_frame_size == 1024
    rcv = c.receiver("balanced/frames", credit=1)
    snd = c.sender("balanced/frames")
    snd.wait_credit()
    body = "x" * 20000                                    # about twenty frames each way
    assert snd.send(body).wait().state == ACCEPTED
    assert rcv.wait_messages(1)[0].body == body


# ---- max_message_size ---------------------------------------------------------------------------------

def test_oversize_message_rejected_and_link_still_works(secure_node):
    node, (url,) = secure_node([{"max_message_size": 4096}])
    consumer = Client(node.url).receiver("balanced/size", credit=10)
    c = Client(url)
    snd = c.sender("balanced/size")
    assert snd.link.remote_max_message_size == 4096      # told in the node's attach
    snd.wait_credit()
    tr = snd.send("y" * 10000).wait()
    assert tr.state == REJECTED, tr
    assert tr.condition.name == SIZE_NAME and "4096" in tr.condition.description, tr.condition
    ok = snd.send("small").wait()
    assert ok.state == ACCEPTED
    assert [r.body for r in consumer.wait_messages(1)] == ["small"]
    assert c.remote_open and not c.transport_closed
    limit_exact = snd.send(Message(body="z" * 3000)).wait()        # under the limit with its sections
    assert limit_exact.state == ACCEPTED


def test_oversize_presettled_message_dropped(secure_node):
    node, (url,) = secure_node([{"max_message_size": 2000}])
    consumer = Client(node.url).receiver("balanced/size-ps", credit=10)
    snd = Client(url).sender("balanced/size-ps")
    snd.wait_credit()
    snd.send("y" * 5000, settled=True)
    snd.send("fits", settled=True)
    assert [r.body for r in consumer.wait_messages(1)] == ["fits"]


def _rejection(frame) -> tuple[str, str]:
    state = frame.field(4)
    assert int(state.descriptor) == 0x25, frame               # rejected
    error = state.value[0]
    return str(error.value[0]), str(error.value[1])


@pytest.mark.parametrize("address, consumers", [("balanced/stream-size", 1), ("multicast/stream-size", 2)])
def test_streamed_oversize_message_rejected_without_buffering(secure_node, address, consumers):
    """A message arriving frame by frame is passed on as it comes; when it passes the limit the copies
    on their way to the consumers are aborted, the rest is dropped as it arrives, and the sender gets
    REJECTED at the end. The same link then delivers a normal message."""
    node, (url,) = secure_node([{"max_message_size": 6000}])
    rcvs = [Client(node.url).receiver(address, credit=10) for _ in range(consumers)]
    raw = RawConn(url)
    raw.open(max_frame_size=4096)
    raw.begin()
    raw.attach("big", 0, role_receiver=False, source="src", target=address)
    raw.expect(FLOW, pred=lambda f: f.field(6))                 # credit for our link
    raw.transfer(0, b"\x00Sw\xb1" + b"a" * 2500, more=True)      # starts a message
    wait_for(lambda: all(len(r._buf) > 0 for r in rcvs), what="the first chunk forwarded to the consumers")
    for _ in range(4):                                          # 2.5 KB more each: 12.5 KB in all
        raw.transfer(0, b"b" * 2500, more=True, first=False)
        time.sleep(0.05)
    raw.transfer(0, b"c" * 100, more=False, first=False)
    name, desc = _rejection(raw.expect(DISPOSITION))
    assert name == SIZE_NAME and "6000" in desc
    wait_for(lambda: all(r.aborted == 1 for r in rcvs), what="the consumers' copies aborted")
    assert all(r.received == [] for r in rcvs)
    raw.transfer(0, Message(body="after").encode())
    for r in rcvs:
        assert [m.body for m in r.wait_messages(1)] == ["after"]     # pumps the consumers: they accept
    disp = raw.expect(DISPOSITION)
    assert int(disp.field(4).descriptor) == 0x24                # ACCEPTED back to the raw sender


# ---- max_sessions -------------------------------------------------------------------------------------

def test_max_sessions(secure_node):
    node, (url,) = secure_node([{"max_sessions": 2}])
    assert Client(url).transport.remote_channel_max == 1
    raw = RawConn(url)
    assert raw.open().field(3) == 1                             # channel-max: channels 0 and 1
    raw.begin(channel=0)
    raw.begin(channel=1)
    raw.send_frame(BEGIN, [None, 0, 100, 100], channel=2)
    closed = raw.expect(CLOSE)
    error = closed.field(0)
    assert "channel_max" in str(error.value[1]), closed


# ---- max_links ----------------------------------------------------------------------------------------

def test_max_links(secure_node):
    node, (url,) = secure_node([{"max_links": 2}])
    c = Client(url)
    rcv = c.receiver("balanced/links", credit=5)
    snd = c.sender("balanced/links")
    third = c.sender("balanced/links-3", wait=False)
    third.wait_attached()
    assert third.remote_closed
    cond = third.remote_condition
    assert cond.name == LIMIT_NAME and "max_links 2" in cond.description, cond
    snd.wait_credit()
    assert snd.send("still fine").wait().state == ACCEPTED         # the connection keeps working
    assert rcv.wait_messages(1)[0].body == "still fine"
    snd.close()
    again = c.sender("balanced/links")                               # a link was freed
    assert again.remote_active and not again.remote_closed


# ---- idle_timeout -------------------------------------------------------------------------------------

def test_listener_idle_timeout(secure_node):
    node, (url,) = secure_node([{"idle_timeout": 1}], idle_timeout=16)
    raw = RawConn(url)
    start = time.monotonic()
    assert 0 < raw.open().field(4) <= 1000                      # advertised
    raw.wait_eof(timeout=6)
    elapsed = time.monotonic() - start
    assert 0.8 <= elapsed <= 4.0, elapsed
    closes = [f for f in raw.frames if f.code == CLOSE]
    assert closes and "idle" in str(closes[0].field(0).value[1]), raw.frames
    other = RawConn(node.url)                                   # the node default (16 s) elsewhere
    assert other.open().field(4) > 1000


def test_listener_without_heartbeats(secure_node):
    node, (url,) = secure_node([{"idle_timeout": 0}], idle_timeout=2)
    assert RawConn(url).open().field(4) is None


def test_security_settings_and_connection_counts_visible_in_management(secure_node, pki, users_file):
    node, (url,) = secure_node([{"tls": {"cert": pki.server.cert, "key": pki.server.key},
                                 "sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file)}}])
    listeners = Requester(Client(node.url)).by_id("listener")
    secure = listeners[url.split("//")[1]]
    assert secure["settings"]["tls"]["cert"] == pki.server.cert
    assert secure["settings"]["sasl"] == {"mechanisms": ["PLAIN"], "users_file": str(users_file),
                                          "sasldb": None, "allow_plain_without_tls": False}
    assert secure["connectionCount"] == 0
    (plain,) = [row for row in listeners.values() if row is not secure]
    assert plain["connectionCount"] == 1 and plain["settings"]["tls"] is None
