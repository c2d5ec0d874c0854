"""Losing the only route to a consumer: chain A <- B <- C where C's connection to B runs through a
TCP proxy the test can cut (C itself, and its consumer, stay up).

The only consumer of the address is on C. When the B-C connection is cut, producers on A that are
waiting are drained, and a delivery in flight toward C comes back RELEASED or MODIFIED. When C comes
back, credit returns and what waited is delivered.
"""

from __future__ import annotations

from proton import symbol

from tests.support.clients import ACCEPTED, MODIFIED, RELEASED, Client, fake_peer_data_sender, make_message
from tests.support.meshes import build, converged, views, wait_address
from tests.support.state import mesh_view, node_state
from tests.support.traffic import qd_keys
from tests.support.waiting import assert_stays, wait_for, wait_until

ADDR = "svc/gone"


def _address(node) -> dict:
    """The node's forwarding entry for ADDR (its core's view, not the control plane's)."""
    return node_state(node).addresses.get(ADDR, {})


def test_cut_route_drains_waiting_producers_and_fails_in_flight_deliveries(node_factory, proxy_factory):
    proxies = {}

    def via_proxy(frm, to, port):
        if (frm, to) == ("C", "B"):
            proxies["CB"] = proxy_factory(port)
            return proxies["CB"].port
        return port

    n = build(node_factory, ["A", "B", "C"], [("B", "A", 1), ("C", "B", 1)], port_map=via_proxy)
    a, b, c = n["A"], n["B"], n["C"]
    proxy = proxies["CB"]

    cons = Client(c.url)
    r = cons.receiver(ADDR, credit_window=10, auto_accept=False)   # holds what it gets, unsettled
    wait_address([a, b, c], ADDR, ["C"])

    busy = Client(a.url).sender(ADDR)      # will have a delivery in flight
    idle = Client(a.url).sender(ADDR)      # has credit, sends nothing: a waiting producer
    busy.wait_credit()
    idle.wait_credit()
    in_flight = busy.send(make_message("in flight", id="f1"))
    r.wait_messages(1)
    assert not in_flight.settled

    proxy.cut()
    wait_until(lambda: "C" not in mesh_view(a).reachable and "C" not in mesh_view(b).reachable, 5,
               lambda: "A and B losing C: " + views([a, b]))

    in_flight.wait()
    assert in_flight.state in (RELEASED, MODIFIED), f"in-flight delivery ended {in_flight.outcome}"
    if in_flight.state == MODIFIED:
        # it was on the wire to C: delivery-failed, so the producer knows it may have arrived
        assert in_flight.failed, "MODIFIED without delivery-failed"
    wait_for(lambda: idle.credit == 0 and busy.credit == 0,
             what=lambda: f"producers on A drained (idle credit {idle.credit}, busy credit {busy.credit})")
    assert idle.drain_requests >= 1, "the waiting producer lost its credit without a drain"
    # C's addresses stay known (C may come back) but no longer give A a destination
    wait_until(lambda: not _address(a).get("ready") and _address(a).get("remote", []) == [], 5,
               lambda: f"svc/gone without destination at A: {_address(a)}")
    assert_stays(lambda: idle.credit == 0, 0.5, "no credit while the only consumer is unreachable")
    assert node_state(a).in_flight == 0 and node_state(b).in_flight == 0

    # a message sent now is not delivered: it waits at the producer (no credit), or it is RELEASED
    # when Proton used the credit of the drain before answering it (it answers lazily)
    waiting = idle.send(make_message("waits", id="w1"))
    assert_stays(lambda: not waiting.settled or waiting.state == RELEASED, 0.3,
                 lambda: f"the message waits for a route or is released: {waiting.outcome}")

    # ... until C is reachable again
    proxy.listen()
    wait_until(lambda: converged([a, b, c]), 15,
               lambda: "C reconnecting through the proxy: " + views([a, b, c]))
    wait_address([a, b, c], ADDR, ["C"])
    idle.wait_credit()
    if waiting.settled:
        waiting = idle.send(make_message("waits", id="w1"))
    wait_for(lambda: any(x.body == "waits" for x in r.received),
             what=lambda: f"the waiting message at C (idle credit {idle.credit}, received {r.bodies})")
    for rec in r.received:
        if rec.local_state is None:
            rec.accept()
    waiting.wait()
    assert waiting.state == ACCEPTED, waiting.outcome


def test_transit_cut_with_no_alternative_releases_and_drains(node_factory, proxy_factory):
    """Same loss, seen from a producer on C toward a consumer on A (the cut is on C's side of B):
    C's producer is drained and its in-flight delivery fails, while B, which still reaches A, keeps
    serving a producer of its own."""
    proxies = {}

    def via_proxy(frm, to, port):
        if (frm, to) == ("C", "B"):
            proxies["CB"] = proxy_factory(port)
            return proxies["CB"].port
        return port

    n = build(node_factory, ["A", "B", "C"], [("B", "A", 1), ("C", "B", 1)], port_map=via_proxy)
    a, b, c = n["A"], n["B"], n["C"]
    r = Client(a.url).receiver(ADDR, credit_window=10, auto_accept=False)
    wait_address([a, b, c], ADDR, ["A"])
    from_c = Client(c.url).sender(ADDR)
    from_b = Client(b.url).sender(ADDR)
    from_c.wait_credit()
    from_b.wait_credit()
    tr = from_c.send("from C")
    r.wait_messages(1)
    proxies["CB"].cut()
    wait_until(lambda: mesh_view(c).reachable == [], 5, lambda: "C isolated: " + views([c]))
    wait_for(lambda: from_c.credit == 0, what=lambda: f"C's producer drained (credit {from_c.credit})")
    # the delivery reached A; its acceptance can no longer reach C: C must not leave it hanging
    r.received[0].accept()
    tr.wait()
    assert tr.state in (RELEASED, MODIFIED), f"delivery through the cut link ended {tr.outcome}"
    # B still reaches A
    assert from_b.credit > 0
    t_b = from_b.send("from B")
    wait_for(lambda: len(r.received) >= 2, what="B's message at A")
    r.received[1].accept()
    t_b.wait()
    assert t_b.state == ACCEPTED


def test_hop_limit_releases_a_delivery_that_crossed_too_many_nodes(node_factory):
    """A delivery whose trace is longer than any shortest path of the mesh (a loop) is RELEASED,
    not delivered; one with a plausible trace is delivered, without its router annotations.
    The transfers come from a fake peer node Z on A's inter-router listener."""
    n = build(node_factory, ["A", "B", "C"], [("B", "A", 1), ("C", "B", 1)])
    a = n["A"]                                   # radius 2 from A: at most 3 entries in a trace
    r = Client(a.url).receiver(ADDR, credit_window=10)
    wait_address(n.values(), ADDR, ["A"])
    z = fake_peer_data_sender(a, "Z")
    z.wait_credit()

    def annotated(body, trace):
        return make_message(body, annotations={symbol("x-opt-qd.to"): ADDR, symbol("x-opt-qd.ingress"): "0/Z",
                                               symbol("x-opt-qd.trace"): trace, symbol("x-opt-app.k"): "v"})

    ok = z.send(annotated("short trace", ["0/C", "0/Z"])).wait()
    assert ok.state == ACCEPTED, f"a delivery with a plausible trace ended {ok.outcome}"
    rec = r.wait_messages(1)[0]
    assert rec.body == "short trace" and qd_keys(rec.message) == []
    assert rec.message.annotations == {symbol("x-opt-app.k"): "v"}

    before = node_state(a).node["hopLimitDrops"]
    looped = z.send(annotated("looped", ["0/B", "0/C", "0/B", "0/C", "0/Z"])).wait()
    assert looped.state == RELEASED, f"a delivery past the hop limit ended {looped.outcome}"
    assert_stays(lambda: len(r.received) == 1, 0.3, "the looped delivery is not delivered")
    assert node_state(a).node["hopLimitDrops"] == before + 1
