"""Edge mode's sans-IO parts (router.edge): the uplink choice, the edge's proxy, the interior's hub, the
edge control messages, and the forwarding core's edge routes (default route, `_edge/<id>` aliases)."""

import random

import pytest

from router.addressing import AddressRules
from router.amqp.message import encode_message
from router.edge.hub import EdgeHub, edge_key
from router.edge.messages import EDGE_ADDR, EDGE_REACH, EdgeMessage, EdgeMessageError, decode, encode
from router.edge.proxy import EdgeProxy
from router.edge.uplinks import UplinkChoice
from router.forwarding.core import RouterCore
from router.forwarding.decisions import TO_ONE


# ---- uplinks -----------------------------------------------------------------------------------------
def test_first_open_uplink_is_active_then_the_cheapest_after_it_settles():
    ch = UplinkChoice(settle=2.0)
    assert ch.up("b", cost=5, index=1, interior="IB", now=0.0).link == "b"
    assert ch.up("a", cost=1, index=0, interior="IA", now=0.5) is None     # not settled yet
    assert ch.tick(1.0) is None
    assert ch.tick(2.5).link == "a"                                         # cheaper, open 2 s
    assert ch.tick(10.0) is None and ch.active.link == "a"


def test_losing_the_active_uplink_moves_to_the_cheapest_open_one_at_once():
    ch = UplinkChoice()
    ch.up("a", 1, 0, "IA", 0.0)
    ch.up("c", 3, 2, "IC", 0.0)
    ch.up("b", 2, 1, "IB", 0.0)
    assert ch.active.link == "a"
    assert ch.down("a", 0.1).link == "b"            # not settled: failover ignores `settle`
    assert ch.down("c", 0.2) is None and ch.active.link == "b"   # a standby going changes nothing
    assert ch.down("b", 0.3) is None and ch.active is None
    assert ch.up("c", 3, 2, "IC", 0.4).link == "c"


def test_equal_costs_prefer_the_first_configured_and_never_flap():
    ch = UplinkChoice(settle=0.0)
    ch.up("second", 1, 1, "IB", 0.0)
    ch.up("first", 1, 0, "IA", 0.0)
    assert ch.tick(1.0).link == "first"
    assert all(ch.tick(t) is None for t in (2.0, 3.0))
    assert ch.switches == 2


def test_rebalance_off_keeps_the_active_uplink():
    ch = UplinkChoice(rebalance=False)
    ch.up("b", 5, 1, "IB", 0.0)
    ch.up("a", 1, 0, "IA", 0.0)
    assert ch.tick(100.0) is None and ch.active.link == "b"


# ---- the edge's proxy -----------------------------------------------------------------------------------
def test_proxy_sends_a_full_set_on_activation_then_diffs():
    px = EdgeProxy()
    px.local_address("svc/a", True)
    px.set_producers({"svc/p"})
    assert px.take_message() is None                # no uplink yet
    m, lost = px.activate("up1")
    assert (m.full, m.add, m.watch, lost) == (True, ["svc/a"], ["svc/a", "svc/p"], set())
    assert px.take_message() is None
    px.local_address("svc/b", True)
    px.local_address("svc/a", False)
    px.set_producers(set())
    m = px.take_message()
    assert (m.full, m.add, m.remove, m.watch, m.unwatch) == (False, ["svc/b"], ["svc/a"], ["svc/b"],
                                                             ["svc/a", "svc/p"])


def test_proxy_takes_reachability_from_the_active_uplink_only():
    px = EdgeProxy()
    px.set_producers({"x", "y"})
    px.activate("up1")
    assert px.on_reach("up2", EdgeMessage(EDGE_REACH, ["x"], full=True)) == set()
    assert px.on_reach("up1", EdgeMessage(EDGE_REACH, ["x", "y"], full=True)) == {"x", "y"}
    assert px.on_reach("up1", EdgeMessage(EDGE_REACH, [], ["y"])) == {"y"}
    assert px.reachable == {"x"}
    m, lost = px.activate("up2")                    # failover: nothing is reachable until told again
    assert lost == {"x"} and px.reachable == set() and m.full


# ---- the interior's hub ---------------------------------------------------------------------------------
def test_admit_refuses_taken_ids():
    hub = EdgeHub("I1")
    assert hub.admit("", "l", ()) is not None
    assert "own id" in hub.admit("I1", "l", ())
    assert "interior" in hub.admit("I2", "l", {"I2"})
    assert hub.admit("E1", "l1", {"I2"}) is None
    hub.edge_up("l1", "E1")
    assert "attached here already" in hub.admit("E1", "l2", ())
    assert hub.admit("E1", "l1", ()) is None and hub.refused == 4


def test_admit_binds_the_id_to_the_certificate_cn_when_asked():
    hub = EdgeHub("I1")
    assert hub.admit("E1", "l1", (), True, "E1") is None
    assert "not its certificate's common name 'E2'" in hub.admit("E1", "l1", (), True, "E2")
    assert "no common name" in hub.admit("E1", "l1", (), True, None)
    assert hub.admit("E1", "l1", (), False, "E2") is None      # not bound: the certificate names nobody
    assert "own id" in hub.admit("I1", "l1", (), True, "I1")     # a certificate never allows a taken id
    assert hub.refused == 3


def _active(hub, link, edge_id, add=(), watch=()):
    hub.edge_up(link, edge_id)
    hub.on_addr(link, EdgeMessage(EDGE_ADDR, list(add), [], list(watch), [], full=True))


def test_addresses_are_advertised_once_however_many_edges_have_them():
    hub = EdgeHub("I1")
    hub.local("svc", True)
    _active(hub, "l1", "E1", add=["svc", "only1"])
    _active(hub, "l2", "E2", add=["svc"])
    assert sorted(hub.take_mobile_changes()) == [(edge_key("E1"), True), (edge_key("E2"), True),
                                                 ("only1", True), ("svc", True)]
    assert hub.holders_of("svc") == ("E1", "E2")
    hub.local("svc", False)
    hub.edge_down("l1")
    assert sorted(hub.take_mobile_changes()) == [(edge_key("E1"), False), ("only1", False)]
    hub.edge_down("l2")
    assert sorted(hub.take_mobile_changes()) == [(edge_key("E2"), False), ("svc", False)]
    assert hub.holders == {} and hub.take_holder_changes() == {"svc", "only1"}


def test_a_standby_uplink_proxies_nothing_until_its_edge_sends_a_full_set():
    hub = EdgeHub("I1")
    hub.edge_up("l1", "E1")
    hub.on_addr("l1", EdgeMessage(EDGE_ADDR, ["svc"]))          # a diff first: ignored
    assert hub.take_mobile_changes() == [] and hub.holders_of("svc") == ()
    hub.on_addr("l1", EdgeMessage(EDGE_ADDR, ["svc"], full=True))
    assert hub.holders_of("svc") == ("E1",)
    hub.on_addr("l1", EdgeMessage(EDGE_ADDR, full=True, active=False))   # moved to another uplink
    assert hub.holders_of("svc") == () and not hub.edges["l1"].active


def test_each_edge_hears_whether_an_address_has_destinations_other_than_itself():
    hub = EdgeHub("I1")
    _active(hub, "l1", "E1", add=["svc"], watch=["svc"])
    _active(hub, "l2", "E2", watch=["svc"])
    assert sorted(k for k, on in hub.take_watch_changes() if on) == ["svc"]
    holders = {"svc": {"E1"}}

    def elsewhere(key, edge):
        return bool(holders.get(key, set()) - {edge})
    out = dict(hub.evaluate(elsewhere))
    assert out["l1"].full and out["l1"].add == []           # only E1 itself has svc
    assert out["l2"].full and out["l2"].add == ["svc"]
    holders["svc"] = {"E1", "I2"}
    hub.changed("svc")
    assert [(link, m.add, m.remove) for link, m in hub.evaluate(elsewhere)] == [("l1", ["svc"], [])]
    holders["svc"] = set()
    hub.changed("svc")
    assert sorted((link, m.remove) for link, m in hub.evaluate(elsewhere)) == [("l1", ["svc"]),
                                                                               ("l2", ["svc"])]
    hub.changed("svc")
    assert hub.evaluate(elsewhere) == []                    # nothing new: nothing sent


def test_an_address_change_touches_only_the_edges_watching_it():
    hub = EdgeHub("I1")
    for i in range(1000):
        _active(hub, f"l{i}", f"E{i}", add=[f"a{i}"], watch=[f"a{i}"])
    hub.evaluate(lambda k, e: False)
    calls = []

    def elsewhere(key, edge):
        calls.append(edge)
        return True
    hub.changed("a7")
    assert [link for link, _ in hub.evaluate(elsewhere)] == ["l7"] and calls == ["E7"]


# ---- messages ---------------------------------------------------------------------------------------------
def test_messages_round_trip():
    m = EdgeMessage(EDGE_ADDR, ["a", "b"], ["c"], ["d"], ["e"], full=True, active=False)
    assert decode(encode(m), EDGE_ADDR) == m
    r = EdgeMessage(EDGE_REACH, ["x"], ["y"])
    assert decode(encode(r), EDGE_REACH) == r


@pytest.mark.parametrize("body, problem", [
    ({"add": "a"}, "must be a list"),
    ({"add": [1]}, "not an address"),
    ({"add": [""]}, "not an address"),
    ({"add": ["_topo/0/I2/$management"]}, "node-scoped"),
    ({"watch": ["_edge/E9"]}, "node-scoped"),
    ({"full": "yes"}, "boolean"),
    ({"active": 1}, "boolean"),
])
def test_malformed_edge_messages_are_refused(body, problem):
    data = encode_message(to="_local/qdedge", application_properties={"opcode": EDGE_ADDR}, body=body)
    with pytest.raises(EdgeMessageError, match=problem):
        decode(data, EDGE_ADDR)


def test_wrong_opcode_or_garbage_is_refused():
    with pytest.raises(EdgeMessageError, match="unexpected opcode"):
        decode(encode(EdgeMessage(EDGE_REACH)), EDGE_ADDR)
    with pytest.raises(EdgeMessageError, match="unexpected opcode"):
        decode(encode_message(to="x", application_properties={"opcode": "HELLO"}, body={}), EDGE_ADDR)
    with pytest.raises(EdgeMessageError):
        decode(b"\x00\x53\x77\xff\xff", EDGE_ADDR)
    with pytest.raises(EdgeMessageError, match="map"):
        decode(encode_message(application_properties={"opcode": EDGE_ADDR}, body=[1]), EDGE_ADDR)


# ---- the forwarding core's edge routes -----------------------------------------------------------------
def _core(node_id):
    return RouterCore(node_id, AddressRules([("mc", "multicast")]), 8, rng=random.Random(1))


def test_an_edge_sends_everything_unknown_to_its_interior():
    core = _core("E1")
    out = core.add_router_consumer("up", "conn", "I1")
    core.consumer_credit(out, 100)
    core.default_node = "I1"
    core.set_routes({"I1": (1, out)}, {}, 1000, dict)
    assert core.resolve("anything/at/all").remote[0].out is out
    assert core.resolve("_topo/0/E7/temp.x").remote[0].out is out     # another edge's reply address
    assert core.resolve("_topo/0/E1/temp.mine") is None                # our own: never sent up
    p = core.add_producer("p", "c", "_topo/0/E7/temp.y")               # a targeted reply sender
    assert p.address.remote and p.address.remote[0].node == "I1"
    core.default_node = None
    core.set_routes({}, {}, 1000, dict)                                 # no uplink: nothing goes up
    assert core.resolve("anything/at/all") is None


def test_an_interior_reaches_edges_behind_other_interiors_through_their_edge_address():
    core = _core("I1")
    out = core.add_router_consumer("to-I2", "conn", "I2")
    core.consumer_credit(out, 100)
    core.set_routes({"I2": (1, out)}, {edge_key("E3"): ["I2"]}, 1, dict)
    a = core.resolve("_topo/0/E3/temp.x")
    assert a is not None and a.remote[0].node == "I2"
    kind, c, _ = core.route_mesh(core.add_producer("p", "c", None), a, False)
    assert kind == TO_ONE and c is out
    assert core.origin_node("E3") == "I2"
    core.edge_nodes.add("E1")
    assert core.origin_node("E1") == "I1" and core.origin_node("I2") == "I2"
