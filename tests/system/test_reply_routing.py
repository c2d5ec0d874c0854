"""Node-scoped reply addresses across the chain A <- B <- C.

A dynamic reply address `amqp:/_topo/0/C/temp.…` is routed to node C by its name: it is never
advertised as a mobile address, and works through the anonymous relay from any node. A node-scoped
address of a node that does not exist, or of a reply address that does not exist, comes back
RELEASED.
"""

from __future__ import annotations

import re

from tests.support.clients import ACCEPTED, DYNAMIC_ADDRESS_RE, RELEASED, Client, make_message
from tests.support.meshes import build, wait_address
from tests.support.state import mesh_view
from tests.support.traffic import EchoServer, outcome_counts, qd_keys
from tests.support.waiting import wait_for

SVC = "svc/echo"


def chain(node_factory):
    n = build(node_factory, ["A", "B", "C"], [("B", "A", 2), ("C", "B", 1)])
    return n["A"], n["B"], n["C"]


def test_reply_to_dynamic_address_on_c_from_server_on_a(node_factory):
    a, b, c = chain(node_factory)
    srv = EchoServer(Client(a.url), SVC, "srvA")
    caller = Client(c.url)
    replies = caller.receiver(dynamic=True, credit_window=10)
    reply_to = replies.address
    assert reply_to and re.fullmatch(DYNAMIC_ADDRESS_RE.format(node="C"), reply_to), reply_to
    wait_address([a, b, c], SVC, ["A"])
    req = caller.sender(SVC)
    req.wait_credit()
    n = 10
    sent = [req.send(make_message(f"q{i}", id=f"q{i}", reply_to=reply_to)) for i in range(n)]
    wait_for(lambda: srv.poll() and len(replies.received) >= n,
             what=lambda: f"{n} replies at C (got {len(replies.received)}, server saw {srv.calls}, "
             f"replies {outcome_counts(srv.replies)})")
    wait_for(lambda: srv.poll() and all(t.settled for t in srv.replies + sent),
             what=lambda: f"settlement: requests {outcome_counts(sent)} "
             f"replies {outcome_counts(srv.replies)}")
    assert [t.state for t in srv.replies] == [ACCEPTED] * n, outcome_counts(srv.replies)
    assert [t.state for t in sent] == [ACCEPTED] * n, outcome_counts(sent)
    assert sorted(r.message.correlation_id for r in replies.received) == sorted(f"q{i}" for i in range(n))
    for r in replies.received:
        assert qd_keys(r.message) == [], r.message.annotations
        # the anonymous relay routes by `to`: it reaches the consumer unchanged
        assert r.message.address == reply_to

    # the temporary address never became a mobile address anywhere
    for nd in (a, b, c):
        keys = list(mesh_view(nd).addresses)
        assert not [k for k in keys if "temp." in k or k.startswith(("_topo", "amqp:"))], \
            f"node {nd.node_id} advertises node-scoped addresses: {keys}"


def test_reply_address_works_without_any_mobile_address(node_factory):
    """No server, no advertised address at all: an anonymous sender on A reaches C's reply address
    as soon as C is reachable."""
    a, b, c = chain(node_factory)
    replies = Client(c.url).receiver(dynamic=True, credit_window=10)
    anon = Client(a.url).sender(None)
    anon.wait_credit()
    tr = anon.send(make_message("direct", address=replies.address)).wait()
    assert tr.state == ACCEPTED, tr.outcome
    assert replies.wait_messages(1)[0].body == "direct"
    assert all(mesh_view(nd).addresses == {} for nd in (a, b, c))


def test_node_scoped_address_of_unknown_node_is_released(node_factory):
    a, b, c = chain(node_factory)
    anon = Client(a.url).sender(None)
    anon.wait_credit()
    for to in ("_topo/0/Z/whatever", "amqp:/_topo/0/Z/temp.AAAAAAAAAAAAAAA"):
        tr = anon.send(make_message("to nowhere", address=to)).wait()
        assert tr.state == RELEASED, f"{to}: {tr.outcome}"


def test_missing_reply_address_on_a_reachable_node_is_released_end_to_end(node_factory):
    a, b, c = chain(node_factory)
    live = Client(c.url).receiver(dynamic=True, credit_window=10)
    gone = Client(c.url).receiver(dynamic=True, credit_window=10)
    gone_addr = gone.address
    gone.close()
    anon = Client(a.url).sender(None)
    anon.wait_credit()
    tr = anon.send(make_message("late reply", address=gone_addr)).wait()
    assert tr.state == RELEASED, f"reply to a closed reply address: {tr.outcome}"
    assert live.received == []
    tr2 = anon.send(make_message("live reply", address=live.address)).wait()
    assert tr2.state == ACCEPTED
    assert live.wait_messages(1)[0].body == "live reply"
