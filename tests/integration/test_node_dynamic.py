"""Dynamic (reply) addresses and the anonymous relay."""

from __future__ import annotations

import re

from tests.support.clients import ACCEPTED, DYNAMIC_ADDRESS_RE, REJECTED, RELEASED, Client, make_message


def _dynamic_re(node) -> re.Pattern:
    return re.compile(DYNAMIC_ADDRESS_RE.format(node=re.escape(node.node_id)) + r"\Z")


def test_dynamic_source_address_format(node):
    c = Client(node.url)
    r = c.receiver(dynamic=True, credit=5)
    assert r.remote_active, f"dynamic attach refused: {r.remote_condition}"
    assert r.address, "no address in the node's attach reply"
    assert _dynamic_re(node).match(r.address), r.address


def test_dynamic_addresses_are_unique(node):
    c = Client(node.url)
    c2 = Client(node.url)
    addrs = [c.receiver(dynamic=True, credit=1).address for _ in range(5)]
    addrs += [c2.receiver(dynamic=True, credit=1).address for _ in range(5)]
    assert len(set(addrs)) == 10, addrs


def test_targeted_sender_reaches_dynamic_receiver(node):
    server = Client(node.url)
    reply = server.receiver(dynamic=True, credit=5)
    other = Client(node.url)
    s = other.sender(reply.address)
    s.wait_credit()
    tr = s.send("reply", correlation_id="abc").wait()
    assert tr.state == ACCEPTED
    rec = reply.wait_messages(1)[0]
    assert rec.body == "reply" and rec.message.correlation_id == "abc"


def test_anonymous_relay_reaches_dynamic_receiver(node):
    server = Client(node.url)
    reply = server.receiver(dynamic=True, credit=5)
    other = Client(node.url)
    anon = other.sender(None)
    assert anon.remote_active, f"anonymous sender refused: {anon.remote_condition}"
    anon.wait_credit()
    tr = anon.send(make_message("via relay", address=reply.address)).wait()
    assert tr.state == ACCEPTED
    assert reply.wait_messages(1)[0].body == "via relay"


def test_anonymous_relay_reaches_named_address(node):
    c = Client(node.url)
    r = c.receiver("balanced/relay-target", credit=5)
    anon = c.sender(None)
    anon.wait_credit()
    tr = anon.send(make_message("hi", address="balanced/relay-target")).wait()
    assert tr.state == ACCEPTED
    assert r.bodies == ["hi"]


def test_anonymous_relay_has_credit_without_destinations(node):
    c = Client(node.url)
    anon = c.sender(None)
    anon.wait_credit(1)


def test_anonymous_relay_without_to_is_rejected(node):
    c = Client(node.url)
    anon = c.sender(None)
    anon.wait_credit()
    tr = anon.send(make_message("where to?")).wait()
    assert tr.state == REJECTED, tr


def test_anonymous_relay_to_unknown_address_is_released(node):
    c = Client(node.url)
    anon = c.sender(None)
    anon.wait_credit()
    tr = anon.send(make_message("nobody", address="balanced/no-such-consumer")).wait()
    assert tr.state == RELEASED, tr


def test_anonymous_relay_keeps_working_after_failures(node):
    c = Client(node.url)
    r = c.receiver("balanced/relay-mixed", credit=10)
    anon = c.sender(None)
    anon.wait_credit()
    outcomes = [anon.send(make_message(f"m{i}", address=a)).wait().state
                for i, a in enumerate([None, "balanced/gone", "balanced/relay-mixed", None,
                                       "balanced/relay-mixed"])]
    assert outcomes == [REJECTED, RELEASED, ACCEPTED, REJECTED, ACCEPTED]
    assert r.bodies == ["m2", "m4"]


def test_vanished_dynamic_address_releases(node):
    server = Client(node.url)
    reply = server.receiver(dynamic=True, credit=5)
    addr = reply.address
    reply.close()
    c = Client(node.url)
    anon = c.sender(None)
    anon.wait_credit()
    tr = anon.send(make_message("too late", address=addr)).wait()
    assert tr.state == RELEASED, tr


def test_request_reply_round_trip(node):
    """oslo-style RPC: the caller's dynamic reply address travels in reply_to."""
    caller = Client(node.url)
    server = Client(node.url)
    replies = caller.receiver(dynamic=True, credit=5)
    requests = server.receiver("balanced/rpc-server", credit=5)
    req_sender = caller.sender("balanced/rpc-server")
    req_sender.wait_credit()
    req_sender.send(make_message("request", reply_to=replies.address, id="req-1")).wait()
    req = requests.wait_messages(1)[0].message
    rep_sender = server.sender(req.reply_to)
    rep_sender.wait_credit()
    tr = rep_sender.send(make_message("response", correlation_id=req.id)).wait()
    assert tr.state == ACCEPTED
    rep = replies.wait_messages(1)[0].message
    assert (rep.body, rep.correlation_id) == ("response", "req-1")
