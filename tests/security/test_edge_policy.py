"""Where policy applies in edge mode (docs/EDGE.md, "Security and where policy applies"): a client's
links are checked at its ingress node, the edge, by the edge's `policy:`; the interior authenticates the
edge connection itself and does not apply its client policy to it (as for an inter-router connection)."""

from __future__ import annotations

from tests.support.clients import Client
from tests.support.edges import edge_port, uplink_of
from tests.support.waiting import wait_until

POLICY = {
    "default_group": "deny",
    "groups": {"apps": {"users": ["anonymous"], "sources": ["allowed/#"], "targets": ["allowed/#"],
                        "allow_anonymous_sender": False, "management": "none"}},
}


def test_the_edge_checks_its_clients_and_the_interior_trusts_the_edge(node_factory):
    # the interior denies every client of its own (default group deny, no group for anonymous)
    interior = node_factory("INT", extra={
        "listeners": [{"host": "127.0.0.1", "port": 0}, {"host": "127.0.0.1", "port": 0, "role": "edge"}],
        "policy": {"default_group": "deny"}})
    e = node_factory("EDGE", extra={"router": {"mode": "edge"}, "policy": POLICY,
                                    "uplinks": [{"host": "127.0.0.1", "port": edge_port(interior)}]})
    e2 = node_factory("EDGE2", extra={"router": {"mode": "edge"}, "policy": POLICY,
                                      "uplinks": [{"host": "127.0.0.1", "port": edge_port(interior)}]})
    for n in (e, e2):
        wait_until(lambda n=n: uplink_of(n) == "INT", 10, "the edges attached despite the interior's policy")
    c = Client(e.url)
    rx = Client(e2.url).receiver("allowed/x", credit=5)          # through the interior
    s = c.sender("allowed/x")
    s.wait_credit(1, timeout=10)
    assert s.send("ok").wait().outcome == "ACCEPTED" and rx.wait_messages(1)[0].body == "ok"
    refused = [c.sender("forbidden/x", wait=False), c.receiver("forbidden/y", wait=False),
               c.sender(None, wait=False)]
    wait_until(lambda: all(link.remote_closed for link in refused), 10, "the edge's refusals")
    assert {link.remote_condition.name for link in refused} == {"amqp:unauthorized-access"}
    # a client of the interior itself is refused there: the interior's policy is in force
    ic = Client(interior.url, wait_open=False)
    wait_until(lambda: ic.remote_condition is not None or ic.transport_closed, 10, "interior refuses")
