"""router.linkstate: a peer claiming the id of a node alive elsewhere (another instance) is refused."""

from __future__ import annotations

from router.linkstate import LinkStateConfig, LinkStateEngine


def hello(node: str, instance: int, seen: list[str]) -> dict:
    return {"to": "_local/qdhello", "opcode": "HELLO", "trace": [node],
            "body": {"id": node, "pv": 1, "area": "0", "instance": instance, "seen": seen}}


def ra(node: str, instance: int) -> dict:
    return {"to": "_topo/0/all/qdrouter", "opcode": "RA", "trace": [node],
            "body": {"id": node, "pv": 1, "area": "0", "instance": instance, "ls_seq": 1, "mobile_seq": 0}}


def engine_with_neighbour_a() -> LinkStateEngine:
    e = LinkStateEngine("B", 10, LinkStateConfig(hello_interval=1.0, hello_max_age=3.0))
    e.link_up("real", 1, 0.0)
    e.handle(hello("A", 100, ["B"]), 0.1, "real")
    e.tick(0.2)
    assert "A" in e.reachable
    return e


def test_impostor_refused_and_ignored():
    e = engine_with_neighbour_a()
    e.link_up("fake", 1, 1.0)
    assert e.handle(hello("A", 200, ["B"]), 1.1, "fake") == []
    assert e.take_impostors() == ["fake"]
    assert e.take_impostors() == []
    e.handle(ra("A", 200), 1.2, "fake")                      # ignored: no "restart" of A
    e.tick(1.3)
    assert e.counters["impostor"] == 1 and e.counters["impostor_dropped"] == 1
    assert e.link_to("A") == "real" and "A" in e.reachable
    e.handle(hello("A", 100, ["B"]), 1.4, "real")            # the real A goes on as before
    assert e.counters["duplicate_id"] == 0


def test_a_restarted_neighbour_is_accepted_after_its_old_link_went():
    e = engine_with_neighbour_a()
    e.link_down("real", 1.0)
    e.link_up("new", 1, 1.1)
    e.handle(hello("A", 200, ["B"]), 1.2, "new")
    e.tick(1.3)
    assert e.take_impostors() == [] and e.link_to("A") == "new"
