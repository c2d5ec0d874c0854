"""LinkStateEngine on its own: what it sends, transit rules, robustness, configuration."""

from __future__ import annotations

import logging

import pytest

from router.linkstate import LinkStateConfig, LinkStateEngine, Outgoing
from router.linkstate.messages import Hello, RouterAdvertisement


def hello_from(node: str, seen: tuple[str, ...], instance: int = 1) -> dict:
    return {"to": "_local/qdhello", "opcode": "HELLO", "body": Hello(node, instance, seen).to_map(),
            "trace": [node]}


def neighbour_up(engine: LinkStateEngine, peer: str, link: str, now: float = 0.0, cost: int = 1) -> None:
    engine.link_up(link, cost, now)
    engine.handle(hello_from(peer, (engine.node_id,)), now, link)


def test_link_up_says_hello_on_that_link_and_a_new_peer_is_answered_at_once():
    a = LinkStateEngine("A", 1)
    (out,) = a.link_up("L1", 2, 0.0)
    assert isinstance(out, Outgoing) and out.links == ("L1",)
    assert out.message == {"to": "_local/qdhello", "opcode": "HELLO", "trace": ["A"],
                           "body": {"id": "A", "pv": 1, "area": "0", "instance": 1, "seen": []}}
    out = a.handle(hello_from("B", ()), 0.1, "L1")
    assert [o.opcode for o in out] == ["HELLO"] and out[0].body["seen"] == ["B"]
    out = a.handle(hello_from("B", ("A",)), 0.2, "L1")
    assert [(o.opcode, o.address, o.links) for o in out] == [("LSR", "_topo/0/B/qdrouter", ("L1",))]
    assert dict(a.neighbors) == {"B": "L1"}


def test_tick_commits_the_link_state_recomputes_and_advertises():
    a = LinkStateEngine("A", 1)
    neighbour_up(a, "B", "L1", cost=4)
    out = a.tick(0.5)
    assert [o.opcode for o in out] == ["HELLO", "RA"]
    assert out[1].address == "_topo/0/all/qdrouter" and out[1].links == ("L1",)
    assert out[1].body["ls_seq"] == 1 and a.ls_seq == 1
    assert dict(a.next_hops) == {"B": "B"} and dict(a.costs) == {"B": 4}
    assert [o.opcode for o in a.tick(0.6)] == []  # nothing due
    assert a.link_state("A") == {"B": 4}


def test_ra_is_flooded_once_and_triggers_a_link_state_request():
    a = LinkStateEngine("A", 1)
    neighbour_up(a, "B", "L1")
    neighbour_up(a, "C", "L2")
    a.tick(0.5)
    ra = {"to": "_topo/0/all/qdrouter", "opcode": "RA", "trace": ["D", "B"],
          "body": RouterAdvertisement("D", 9, ls_seq=3, mobile_seq=0).to_map()}
    out = a.handle(ra, 1.0, "L1")
    flood, lsr = out
    assert flood.links == ("L2",) and flood.trace == ["D", "B", "A"] and flood.body is ra["body"]
    assert lsr.opcode == "LSR" and lsr.address == "_topo/0/D/qdrouter" and lsr.links == ("L1",)
    assert a.handle(ra, 1.1, "L2") == []  # the copy from the other side: a duplicate


def test_transit_follows_routes_appends_to_trace_and_never_loops():
    a = LinkStateEngine("A", 1)
    neighbour_up(a, "B", "L1")
    neighbour_up(a, "C", "L2")
    a.tick(0.5)
    msg = {"to": "_topo/0/C/qdrouter", "opcode": "LSR", "trace": ["B"], "body": {"opaque": True}}
    (out,) = a.handle(msg, 1.0, "L1")  # the body is not even looked at
    assert out.links == ("L2",) and out.trace == ["B", "A"] and out.body == {"opaque": True}
    assert a.route_control("C", ["B"]) == "L2"
    assert a.handle({**msg, "trace": ["B", "A"]}, 1.0, "L1") == []  # we are in the trace: a loop
    assert a.handle({**msg, "trace": ["C"]}, 1.0, "L1") == []  # never back to a node in the trace
    assert a.handle({**msg, "to": "_topo/0/Z/qdrouter"}, 1.0, "L1") == []  # no route
    assert a.counters["dropped_loop"] == 1 and a.counters["dropped_no_route"] == 2


def test_link_down_recomputes_and_advertises_at_once():
    a = LinkStateEngine("A", 1)
    neighbour_up(a, "B", "L1")
    a.tick(0.5)
    out = a.link_down("L1", 0.7)
    assert [o.opcode for o in out] == []  # no neighbour left to tell
    assert dict(a.next_hops) == {} and a.ls_seq == 2


def test_our_own_messages_are_dropped_and_a_foreign_instance_is_logged_once(caplog):
    a = LinkStateEngine("A", 1)
    a.link_up("L1", 1, 0.0)
    with caplog.at_level(logging.CRITICAL, logger="router.linkstate"):
        assert a.handle(hello_from("A", (), instance=1), 0.0, "L1") == []  # our own echo: silent
        for _ in range(3):
            assert a.handle(hello_from("A", ("A",), instance=2), 0.0, "L1") == []
    assert [r.getMessage() for r in caplog.records] == [
        "duplicate node id A: another node (instance 2) uses our id (instance 1)"]
    assert dict(a.neighbors) == {}


@pytest.mark.parametrize("message", [
    None, 42, "text", [], {}, {"opcode": "HELLO"}, {"opcode": "HELLO", "body": None},
    {"opcode": "HELLO", "to": 5, "body": {}}, {"opcode": "RA", "trace": "A", "body": {}},
    {"opcode": "RA", "trace": [1], "body": {}}, {"opcode": "RA", "to": "_topo/0/all/qdrouter", "body": {
        "id": "X", "pv": 1, "area": "0", "instance": 1, "ls_seq": [], "mobile_seq": {}}},
    {"opcode": "LSU", "to": "_topo/0/A/qdrouter", "body": {"id": "X", "pv": 1, "area": "0", "instance": 1,
                                                           "ls_seq": 1, "ls": {"peers": {"Y": "high"}}}},
])
def test_junk_is_dropped_never_raised(message):
    a = LinkStateEngine("A", 1)
    a.link_up("L1", 1, 0.0)
    assert a.handle(message, 0.0, "L1") == []
    assert a.counters["malformed"] == 1


def test_newer_version_is_logged_once_per_sender(caplog):
    a = LinkStateEngine("A", 1)
    a.link_up("L1", 1, 0.0)
    body = {"id": "N", "pv": 2, "area": "0", "instance": 1, "seen": ["A"]}
    with caplog.at_level(logging.WARNING, logger="router.linkstate"):
        for _ in range(5):
            a.handle({"to": "_local/qdhello", "opcode": "HELLO", "body": body}, 0.0, "L1")
        a.handle({"to": "_local/qdhello", "opcode": "HELLO", "body": {**body, "id": "M"}}, 0.0, "L1")
    assert [r.getMessage() for r in caplog.records] == [
        "dropping control messages from N: protocol version 2 is newer than ours (1)",
        "dropping control messages from M: protocol version 2 is newer than ours (1)"]
    assert dict(a.neighbors) == {} and a.counters["newer_version"] == 6


def test_local_addresses_are_announced_by_a_diff_then_the_ra():
    a = LinkStateEngine("A", 1)
    neighbour_up(a, "B", "L1")
    a.tick(0.5)
    a.add_local_address("M0svc", hint=2)
    out = a.tick(0.6)
    assert [o.opcode for o in out] == ["MAU", "RA"]
    assert out[0].address == "_topo/0/all/qdrouter.ma"
    assert out[0].body["add"] == ["M0svc"] and out[0].body["del"] == [] and out[0].body["hints"] == [2]
    assert out[1].body["mobile_seq"] == 1 == a.mobile_seq
    assert dict(a.local_addresses) == {"M0svc": 2}
    with pytest.raises(ValueError):
        a.add_local_address("")


def test_time_is_only_what_the_caller_says():
    a = LinkStateEngine("A", 1, LinkStateConfig(hello_interval=10, hello_max_age=30))
    a.link_up("L1", 1, 1000.0)
    assert [o.opcode for o in a.tick(1000.0)] == ["HELLO"]  # no neighbour yet: the RA goes nowhere
    assert a.tick(1009.9) == []
    assert [o.opcode for o in a.tick(1010.0)] == ["HELLO"]


@pytest.mark.parametrize("kwargs", [
    {"hello_interval": 0}, {"hello_interval": -1}, {"ra_interval": "30"}, {"ls_max_age": True},
    {"hello_interval": 3, "hello_max_age": 3}, {"ra_interval": 2, "ra_interval_flux": 4},
])
def test_bad_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        LinkStateConfig(**kwargs)


@pytest.mark.parametrize("node_id", ["", "a/b", "all", None])
def test_bad_node_id_is_rejected(node_id):
    with pytest.raises(ValueError):
        LinkStateEngine(node_id, 1)


def test_defaults_are_qdrouterds():
    cfg = LinkStateConfig()
    assert (cfg.hello_interval, cfg.hello_max_age, cfg.ra_interval, cfg.ra_interval_flux, cfg.ls_max_age) == \
        (1.0, 3.0, 30.0, 4.0, 60.0)


def test_ra_every_flux_interval_while_the_topology_changes_then_every_ra_interval():
    a = LinkStateEngine("A", 1)
    neighbour_up(a, "B", "L1")
    times = []
    for step in range(1, 801):  # 80 s in 0.1 s ticks; the only change is B coming up at t=0
        now = step / 10
        a.handle(hello_from("B", ("A",)), now, "L1")  # keep B alive
        if any(o.opcode == "RA" for o in a.tick(now)):
            times.append(now)
    assert times[:3] == [0.1, 4.1, 8.1]  # flux: every 4 s within 8 s of the change
    assert times[3:] == [38.1, 68.1]  # then stable: every 30 s


def test_requests_to_a_node_without_a_path_follow_the_reverse_path_of_its_flood():
    a = LinkStateEngine("A", 1)
    neighbour_up(a, "B", "L1")
    neighbour_up(a, "C", "L2")
    a.tick(0.5)
    far = RouterAdvertisement("F", 3, ls_seq=2, mobile_seq=0).to_map()
    out = a.handle({"to": "_topo/0/all/qdrouter", "opcode": "RA", "trace": ["F", "X", "C"], "body": far},
                   1.0, "L2")
    lsr = [o for o in out if o.opcode == "LSR"]
    assert [(o.address, o.links) for o in lsr] == [("_topo/0/F/qdrouter", ("L2",))]  # F has no path yet
    assert "F" not in a.next_hops and a.link_to("F") is None  # data-plane view: not reachable
    assert a.route_control("F", ["B"]) == "L2"
    assert a.route_control("F", ["C"]) is None  # never back toward a node in the trace
    a.link_down("L2", 1.5)
    assert a.route_control("F", ["B"]) is None  # that reverse path is gone with its link


def test_local_address_changes_are_coalesced_per_mobile_interval():
    """A burst of local address changes goes out as one diff MAU per `mobile_interval`, not one per tick."""
    engine = LinkStateEngine("A", 1, LinkStateConfig(mobile_interval=0.1))
    engine.add_local_address("svc/a")
    engine.tick(10.0)
    assert engine.mobile_seq == 1
    for i, now in enumerate((10.02, 10.05, 10.08)):
        engine.add_local_address(f"svc/b{i}")
        engine.tick(now)
    assert engine.mobile_seq == 1                # held: the interval has not passed
    engine.tick(10.1)
    assert engine.mobile_seq == 2                # the three changes in one diff
    engine.tick(10.5)
    assert engine.mobile_seq == 2                # nothing more to say


def test_a_burst_of_local_addresses_goes_out_as_several_chunked_maus_in_one_tick():
    """Thousands of new addresses: MAUs of at most MAU_CHUNK changes each, consecutive seqs, sent at once
    (the RA that advertises the last seq follows them)."""
    from router.linkstate.mobile import MAU_CHUNK
    engine = LinkStateEngine("A", 1)
    neighbour_up(engine, "B", "L1")
    engine.tick(0.5)
    n = 2 * MAU_CHUNK + 7
    for i in range(n):
        engine.add_local_address(f"svc/{i}")
    out = engine.tick(1.0)
    maus = [o for o in out if o.opcode == "MAU"]
    assert [o.body["mobile_seq"] for o in maus] == [1, 2, 3]
    assert [len(o.body["add"]) for o in maus] == [MAU_CHUNK, MAU_CHUNK, 7]
    assert sorted(a for o in maus for a in o.body["add"]) == sorted(f"svc/{i}" for i in range(n))
    opcodes = [o.opcode for o in out]
    assert opcodes.index("RA") > opcodes.index("MAU") and engine.mobile_seq == 3
