"""Forwarding across nodes: a chain of real node processes, clients on different nodes."""

from tests.integration.helpers import Client, make_message, wait_for
from tests.integration.test_mesh_control import chain, converged, mesh_view


def test_chain_delivers_across_two_hops_and_outcome_returns(node_factory):
    a, b, c = chain(node_factory)
    wait_for(lambda: converged([a, b, c]), what="convergence")
    recv = Client(a.url).receiver("svc/chain", credit=50)
    wait_for(lambda: mesh_view(c)["addresses"].get("svc/chain") == ["A"], what="svc/chain known at C")
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
