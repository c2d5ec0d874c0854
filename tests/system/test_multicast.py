"""Multicast across meshes with redundant paths: every consumer gets each message exactly once.

Triangle: A, B, C all linked. Diamond: A-B, A-C, B-D, C-D (two equal-cost paths between A and D,
and between B and C). Consumers on every node, two on one node.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.support.clients import ACCEPTED, Client, make_message
from tests.support.meshes import build, wait_address
from tests.support.state import node_state
from tests.support.traffic import outcome_counts, qd_keys
from tests.support.waiting import assert_stays, wait_for

ADDR = "multicast/news"
N = 50

MESHES = {
    "triangle": (["A", "B", "C"], [("B", "A", 1), ("C", "A", 1), ("C", "B", 1)]),
    "diamond": (["A", "B", "C", "D"], [("B", "A", 1), ("C", "A", 1), ("D", "B", 1), ("D", "C", 1)]),
}


@pytest.mark.parametrize("settled", [False, True], ids=["unsettled", "presettled"])
@pytest.mark.parametrize("mesh,sender_at,double_at", [
    ("triangle", "A", "C"),
    ("diamond", "A", "D"),        # D is behind two equal-cost paths from A
    ("diamond", "B", "C"),        # C is two hops from B, through A or through D
])
def test_every_consumer_gets_each_message_exactly_once(node_factory, mesh, sender_at, double_at, settled):
    names, edges = MESHES[mesh]
    nodes = build(node_factory, names, edges)
    receivers = {}
    for name in names:
        cl = Client(nodes[name].url)
        receivers[f"{name}1"] = cl.receiver(ADDR, credit_window=2 * N)
        if name == double_at:
            receivers[f"{name}2"] = Client(nodes[name].url).receiver(ADDR, credit_window=2 * N)
    wait_address(nodes.values(), ADDR, names)

    s = Client(nodes[sender_at].url).sender(ADDR)
    s.wait_credit()
    trackers = [s.send(make_message(f"news-{i}", id=f"n{i}"), settled=settled) for i in range(N)]

    def counts() -> dict[str, int]:
        return {k: len(r.received) for k, r in receivers.items()}

    wait_for(lambda: all(len(r.received) >= N for r in receivers.values()),
             what=lambda: f"{N} messages at every consumer: {counts()}")
    # late duplicates would arrive within a few round trips
    assert_stays(lambda: all(len(r.received) == N for r in receivers.values()), 0.5,
                 lambda: f"exactly {N} messages per consumer: {counts()}")
    for key, r in receivers.items():
        bodies = Counter(r.bodies)
        dup = sorted(b for b, k in bodies.items() if k > 1)
        missing = sorted(set(f"news-{i}" for i in range(N)) - set(bodies))
        assert not dup and not missing, f"consumer {key}: duplicates {dup}, missing {missing}"
        assert all(qd_keys(rec.message) == [] for rec in r.received), f"router annotations reach {key}"
        assert all(rec.presettled == settled for rec in r.received), \
            f"consumer {key}: settle mode changed on the way"

    if not settled:
        wait_for(lambda: all(t.settled for t in trackers),
                 what=lambda: f"every multicast delivery settled at the sender: {outcome_counts(trackers)}")
        assert [t.state for t in trackers] == [ACCEPTED] * N, outcome_counts(trackers)
        for nd in nodes.values():
            assert node_state(nd).in_flight == 0, f"node {nd.node_id} still holds deliveries"


def test_unsettled_multicast_waits_for_the_slowest_remote_copy(node_factory):
    """The sender's delivery settles only when every copy is terminal, including one two hops away
    whose consumer has not decided yet; the reported outcome follows REJECTED > ACCEPTED."""
    names, edges = MESHES["diamond"]
    nodes = build(node_factory, names, edges)
    near = Client(nodes["A"].url).receiver(ADDR, credit_window=10)
    far = Client(nodes["D"].url).receiver(ADDR, credit_window=10, auto_accept=False)
    wait_address(nodes.values(), ADDR, ["A", "D"])
    s = Client(nodes["A"].url).sender(ADDR)
    s.wait_credit()
    t1 = s.send("one")
    t2 = s.send("two")
    far.wait_messages(2)
    near.wait_messages(2)
    assert_stays(lambda: not t1.settled and not t2.settled, 0.3,
                 "nothing settled before D's consumer decides")
    far.received[0].accept()
    far.received[1].reject("app:no", "rejected far away")
    wait_for(lambda: t1.settled and t2.settled, what=lambda: f"settlement: {t1!r} {t2!r}")
    assert t1.state == ACCEPTED
    assert t2.outcome == "REJECTED", f"REJECTED of one copy must win over ACCEPTED: got {t2.outcome}"


def test_large_multicast_messages_stream_to_every_consumer_intact(node_factory):
    """Multi-frame messages fan out across the diamond: every consumer gets each body intact, once."""
    names, edges = MESHES["diamond"]
    nodes = build(node_factory, names, edges)
    receivers = {name: Client(nodes[name].url).receiver(ADDR, credit_window=10) for name in names}
    wait_address(nodes.values(), ADDR, names)
    s = Client(nodes["B"].url).sender(ADDR)
    s.wait_credit()
    bodies = [random.Random(i).randbytes(size) for i, size in enumerate((300_000, 5, 1_000_000, 70_000))]
    trackers = [s.send(make_message(b, id=f"big{i}")) for i, b in enumerate(bodies)]
    wait_for(lambda: all(len(r.received) >= len(bodies) for r in receivers.values()),
             what=lambda: f"all bodies everywhere: { {k: len(r.received) for k, r in receivers.items()} }")
    wait_for(lambda: all(t.settled for t in trackers), what=lambda: outcome_counts(trackers))
    assert [t.state for t in trackers] == [ACCEPTED] * len(bodies), outcome_counts(trackers)
    for name, r in receivers.items():
        assert r.aborted == 0, f"aborted transfer at {name}"
        got = {rec.message.id: rec.body for rec in r.received}
        assert len(r.received) == len(bodies) and got == {f"big{i}": b for i, b in enumerate(bodies)}, \
            f"consumer on {name}: wrong or duplicated bodies ({len(r.received)} received)"
