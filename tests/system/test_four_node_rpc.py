"""RPC over the four-node mesh (A-B, C-D, A-C, B-D, A-D, B-C, every link cost 1), as
topologies/four-node.yaml, but on ports picked by the system.

Callers use a dynamic reply address on their own node; servers answer through the anonymous relay.
`openstack.org/om/rpc/anycast` is balanced: strictly sequential calls reach every server in turn.
"""

from __future__ import annotations

import re

from tests.support.clients import ACCEPTED, DYNAMIC_ADDRESS_RE, Client, make_message
from tests.support.meshes import build, wait_address
from tests.support.state import mesh_view
from tests.support.traffic import EchoServer, outcome_counts
from tests.support.waiting import wait_for

SVC = "openstack.org/om/rpc/anycast/svc"
EDGES = [("B", "A", 1), ("C", "A", 1), ("D", "A", 1), ("C", "B", 1), ("D", "B", 1), ("D", "C", 1)]


def four_node(node_factory) -> dict:
    nodes = build(node_factory, ["A", "B", "C", "D"], EDGES)
    for n in nodes.values():
        assert mesh_view(n).costs == {o: 1 for o in nodes if o != n.node_id}, "not a full mesh of cost 1"
    return nodes


def _calls(caller_node, servers: list[EchoServer], n: int, address: str = SVC) -> list:
    """``n`` strictly sequential calls from a caller on ``caller_node``: each request is sent only
    once the previous reply has arrived and the previous request is settled."""
    caller = Client(caller_node.url)
    replies = caller.receiver(dynamic=True, credit_window=10)
    reply_to = replies.address
    assert reply_to and re.fullmatch(DYNAMIC_ADDRESS_RE.format(node=caller_node.node_id), reply_to), reply_to
    req = caller.sender(address)
    req.wait_credit()

    def poll() -> bool:
        for srv in servers:
            srv.poll()
        return True

    requests = []
    for i in range(n):
        tr = req.send(make_message(f"call-{i}", id=f"req-{i}", reply_to=reply_to))
        requests.append(tr)
        wait_for(lambda i=i, tr=tr: poll() and tr.settled and len(replies.received) > i,
                 what=lambda i=i: f"reply to call {i} (replies {len(replies.received)}, "
                 f"calls per server {[s.calls for s in servers]}, requests {outcome_counts(requests)})")
        rec = replies.received[i]
        assert rec.message.correlation_id == f"req-{i}", \
            f"call {i}: reply {rec.body!r} correlates to {rec.message.correlation_id!r}"
        assert tr.state == ACCEPTED, f"request {i} ended {tr.outcome}"
    wait_for(lambda: poll() and all(t.settled for s in servers for t in s.replies),
             what=lambda: f"replies settled at the servers: {[outcome_counts(s.replies) for s in servers]}")
    for s in servers:
        assert [t.state for t in s.replies] == [ACCEPTED] * len(s.replies), \
            f"replies of {s.name}: {outcome_counts(s.replies)}"
    assert len(replies.received) == n, f"{len(replies.received)} replies for {n} calls"
    return replies.received


def test_sequential_calls_from_c_are_balanced_over_servers_on_a_and_b(node_factory):
    nodes = four_node(node_factory)
    sa = EchoServer(Client(nodes["A"].url), SVC, "srvA")
    sb = EchoServer(Client(nodes["B"].url), SVC, "srvB")
    wait_address(nodes.values(), SVC, ["A", "B"])
    n = 40
    got = _calls(nodes["C"], [sa, sb], n)
    served = {"srvA": sa.calls, "srvB": sb.calls}
    assert sa.calls + sb.calls == n, f"{served}: a call was delivered twice or lost"
    assert min(served.values()) >= n // 4, f"balanced distribution starves a server: {served}"
    assert {r.body.split(":", 1)[0] for r in got} == {"srvA", "srvB"}


def test_calls_from_d_reach_the_only_server_on_a(node_factory):
    nodes = four_node(node_factory)
    sa = EchoServer(Client(nodes["A"].url), SVC, "srvA")
    wait_address(nodes.values(), SVC, ["A"])
    n = 40
    got = _calls(nodes["D"], [sa], n)
    assert sa.calls == n
    assert [r.body for r in got] == [f"srvA:call-{i}" for i in range(n)]


def test_callers_on_c_and_d_share_servers_on_a_and_b_concurrently(node_factory):
    """Two callers at once, each with its own reply address on its own node: every reply goes back
    to the caller that asked (node-scoped reply addresses route to the right node)."""
    nodes = four_node(node_factory)
    servers = [EchoServer(Client(nodes[x].url), SVC, f"srv{x}") for x in ("A", "B")]
    wait_address(nodes.values(), SVC, ["A", "B"])
    callers = []
    for x in ("C", "D"):
        cl = Client(nodes[x].url)
        rx = cl.receiver(dynamic=True, credit_window=50)
        tx = cl.sender(SVC)
        callers.append((x, rx, tx))
    for _, _, tx in callers:
        tx.wait_credit()
    n = 30
    sent = {x: [tx.send(make_message(f"{x}-{i}", id=f"{x}-{i}", reply_to=rx.address)) for i in range(n)]
            for x, rx, tx in callers}

    def poll() -> bool:
        for s in servers:
            s.poll()
        return True

    wait_for(lambda: poll() and all(len(rx.received) >= n for _, rx, _ in callers),
             what=lambda: f"replies {[len(rx.received) for _, rx, _ in callers]} of {n} each")
    for x, rx, _ in callers:
        assert sorted(r.message.correlation_id for r in rx.received) == sorted(f"{x}-{i}" for i in range(n))
        wait_for(lambda x=x: all(t.settled for t in sent[x]), what=f"requests of {x} settled")
        assert all(t.state == ACCEPTED for t in sent[x]), outcome_counts(sent[x])
    assert sum(s.calls for s in servers) == 2 * n
    assert all(s.calls > 0 for s in servers), [s.calls for s in servers]
