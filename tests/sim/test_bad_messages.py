"""Malformed and newer-version control messages are logged once per sender and dropped, never fatal."""

from __future__ import annotations

import logging

from router.linkstate.messages import PROTOCOL_VERSION
from tests.support.linkstate_sim import build, random_mesh
from tests.support.route_reference import route_mismatches

BAD_BODIES = [
    {"id": "X", "pv": 1, "area": "0", "instance": 1, "ls_seq": "one", "mobile_seq": 0},  # RA, bad type
    {"id": "X", "pv": 1, "area": "0", "instance": 1, "mobile_seq": 3, "exist": [], "add": [], "del": []},
    {"id": "X", "pv": 1, "area": "0", "instance": 1, "mobile_seq": 3, "add": ["M0a"]},  # diff without del
    {"pv": 1, "area": "0", "instance": 1},  # no id
    ["not", "a", "map"],
]


def test_bad_messages_do_not_disturb_a_converging_mesh(caplog):
    graph = random_mesh(20, 15, seed=2)
    net = build(graph)
    target = sorted(net.engines)[0]
    engine = net.engines[target]
    net.run(0.2)
    link = next(iter(engine.neighbors.values()))
    newer = {"id": "Y", "pv": PROTOCOL_VERSION + 1, "area": "0", "instance": 1, "future": True}
    with caplog.at_level(logging.WARNING, logger="router.linkstate"):
        for _ in range(3):  # the same offenders, three times each
            for opcode, body in [("RA", BAD_BODIES[0]), ("MAU", BAD_BODIES[1]), ("MAU", BAD_BODIES[2]),
                                 ("LSR", BAD_BODIES[3]), ("LSU", BAD_BODIES[4]), ("RA", newer),
                                 ("NEWOP", newer)]:
                to = "_topo/0/all/qdrouter" if opcode == "RA" else f"_topo/0/{target}/qdrouter"
                out = engine.handle({"to": to, "opcode": opcode, "body": body, "trace": ["X"]}, net.now, link)
                assert out == []
            assert engine.handle("garbage", net.now, link) == []
            assert engine.handle({"opcode": 7, "body": {}}, net.now, link) == []
        net.run_until(lambda: not route_mismatches(net, graph), 5.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("from X:" in m for m in warnings) == 1  # X sent 6 kinds of malformed messages: one line
    assert sum("from Y:" in m for m in warnings) == 1  # newer version: one line per sender
    assert sum("from link" in m for m in warnings) == 1  # no sender id: one line per link
    # the bad RA repeats the flood key of its first copy: the repeats are dropped before being parsed
    assert engine.counters["malformed"] == 3 * 7 - 2 and engine.counters["newer_version"] == 3 * 2
    assert "X" not in engine.reachable and "Y" not in engine.reachable
