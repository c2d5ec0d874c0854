"""Forwarding across nodes: a chain of real node processes, clients on different nodes."""

from tests.support.clients import Client, make_message, random_bytes
from tests.support.meshes import chain, converged
from tests.support.state import mesh_view
from tests.support.waiting import wait_for

MB = 1024 * 1024


def test_chain_delivers_across_two_hops_and_outcome_returns(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    recv = Client(a.url).receiver("svc/chain", credit=50)
    wait_for(lambda: mesh_view(c).addresses.get("svc/chain") == ["A"], what="svc/chain known at C")
    snd = Client(c.url).sender("svc/chain")
    snd.wait_credit()
    trackers = [snd.send(make_message(body=f"m{i}", annotations={"x-opt-app.k": i})) for i in range(20)]
    got = recv.wait_messages(20)
    assert [m.body for m in got] == [f"m{i}" for i in range(20)]
    assert all(not any(str(k).startswith("x-opt-qd.") for k in (m.message.annotations or {})) for m in got)
    assert got[3].message.annotations["x-opt-app.k"] == 3
    for t in trackers:
        t.wait()
    assert {t.outcome for t in trackers} == {"ACCEPTED"}


def test_large_message_streams_across_the_chain_and_anonymous_rpc_replies(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    server = Client(a.url)
    requests = server.receiver("svc/big", credit=5)
    replies_out = server.sender(None)
    caller = Client(c.url)
    replies = caller.receiver(None, dynamic=True, credit=5)
    wait_for(lambda: replies.address is not None, what="dynamic reply address")
    wait_for(lambda: mesh_view(c).addresses.get("svc/big") == ["A"], what="svc/big known at C")
    snd = caller.sender("svc/big")
    snd.wait_credit()
    body = random_bytes(3 * MB)
    t = snd.send(make_message(body, reply_to=replies.address, annotations={"x-opt-app.k": "v"}))
    (req,) = requests.wait_messages(1, timeout=30)
    assert req.body == body and req.message.reply_to == replies.address
    assert set(req.message.annotations) == {"x-opt-app.k"}
    assert t.wait().outcome == "ACCEPTED"
    replies_out.wait_credit()
    r = replies_out.send(make_message("pong", address=req.message.reply_to))
    (reply,) = replies.wait_messages(1)
    assert reply.body == "pong" and not reply.message.annotations
    assert r.wait().outcome == "ACCEPTED"
    assert replies.address.split("/")[-1] not in str(mesh_view(a).addresses)   # never advertised


def test_unknown_node_scoped_address_is_released(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    snd = Client(c.url).sender(None)
    snd.wait_credit()
    assert snd.send(make_message("x", address="amqp:/_topo/0/Z/temp.abc")).wait().outcome == "RELEASED"
    assert snd.send(make_message("y", address="_topo/0/A/temp.none")).wait().outcome == "RELEASED"
