"""Edge failover with real processes (docs/EDGE.md): the active interior of an edge dies (kill -9) or
goes silent (SIGSTOP) while a producer on that edge streams to a consumer on another edge.

Every attempt ends ACCEPTED, RELEASED or MODIFIED at the producer, which sends the RELEASED and MODIFIED
ones again; every id is accepted exactly once; the edge routes through its standby uplink within 1 s of
the kill (a generous bound: the move itself is measured in BENCHMARKS.md); the clients keep their
connections to the edges.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from tests.support.clients import ACCEPTED, MODIFIED, RELEASED, Client, make_message
from tests.support.edges import router_test, uplink_of
from tests.support.nodes import kill9
from tests.support.state import node_state
from tests.support.traffic import stream_across_a_kill
from tests.support.waiting import WaitTimeout, wait_until

ADDR = "balanced/edge-stream"
TOTAL = 1500
KILL_AFTER = 400
DEADLINE = 40.0


def _stream(s, rx, kill, total: int = TOTAL) -> dict:
    st = stream_across_a_kill(s, rx, kill, total, KILL_AFTER, DEADLINE)
    if not st.done:
        raise WaitTimeout(f"stream not done: {st.where}")
    return {"per_id": st.per_id, "attempts": st.attempts, "killed": st.killed}


def _audit(st: dict, rx) -> Counter:
    outcomes = Counter(x for states in st["per_id"].values() for x in states)
    assert set(outcomes) <= {ACCEPTED, RELEASED, MODIFIED}, outcomes
    assert sum(outcomes.values()) == st["attempts"]
    assert sorted(st["per_id"]) == list(range(TOTAL))
    assert all(states.count(ACCEPTED) == 1 and states[-1] == ACCEPTED for states in st["per_id"].values())
    got = Counter(r.message.properties["mid"] for r in rx.received)
    assert set(got) == set(range(TOTAL)), "accepted but never received"
    extra = {mid: n for mid, n in got.items() if n > 1 + st["per_id"][mid].count(MODIFIED)}
    assert not extra, f"received more often than the outcomes allow: {list(extra.items())[:10]}"
    return outcomes


def test_active_interior_killed_edge_moves_within_a_second(node_factory):
    """EA1 (producer) and EA2 route through INT.A; the consumer is on EB1. INT.A is killed mid-stream:
    EA1 moves to INT.B, nothing is lost, the producer's connection to EA1 stays up."""
    n = router_test(node_factory)
    rx = Client(n["EB1"].url).receiver(ADDR, credit=500, credit_window=500)
    client = Client(n["EA1"].url)
    s = client.sender(ADDR)
    s.wait_credit(1, timeout=10)
    moved = {}

    def kill() -> None:
        kill9(n["INT.A"])
        t0 = time.monotonic()
        wait_until(lambda: uplink_of(n["EA1"]) == "INT.B", 5, "EA1 routes through INT.B")
        moved["after"] = time.monotonic() - t0

    st = _stream(s, rx, kill)
    outcomes = _audit(st, rx)
    print(f"audit: {dict(outcomes)}; EA1 moved {moved['after']:.3f}s after the kill")
    assert outcomes[RELEASED] + outcomes[MODIFIED] > 0, "the kill hit no delivery in flight"
    assert moved["after"] < 1.0, f"EA1 took {moved['after']:.2f}s to move to INT.B"
    assert not client.closed and client.remote_open, "the producer's connection to its edge was lost"
    assert uplink_of(n["EA2"]) == "INT.B"


def test_consumer_edge_loses_its_interior_producer_elsewhere_loses_nothing(node_factory):
    """The consumer is on EA2 (behind INT.A), the producer on EB2: INT.A dies, EA2 moves to INT.B and
    the stream goes on (anything in flight through INT.A comes back RELEASED/MODIFIED and is sent
    again; the audit holds either way)."""
    n = router_test(node_factory)
    rx = Client(n["EA2"].url).receiver(ADDR, credit=500, credit_window=500)
    s = Client(n["EB2"].url).sender(ADDR)
    s.wait_credit(1, timeout=10)
    st = _stream(s, rx, lambda: kill9(n["INT.A"]))
    outcomes = _audit(st, rx)
    print(f"audit: {dict(outcomes)}")
    assert uplink_of(n["EA2"]) == "INT.B"


@pytest.mark.parametrize("idle", [1.0])
def test_silent_interior_is_noticed_by_heartbeats(node_factory, idle):
    """INT.A stops (SIGSTOP: its sockets stay open, nothing comes back): the uplinks' idle timeout
    (`uplinks[].idle_timeout`, the node's own stays 16 s) notices it and the edges move to INT.B; traffic
    from EA1 to EB1 flows again."""
    n = router_test(node_factory, uplink_idle_timeout=idle)
    os.kill(n["INT.A"].pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        wait_until(lambda: uplink_of(n["EA1"]) == "INT.B", 10, "EA1 moved to INT.B")
        took = time.monotonic() - t0
        rx = Client(n["EB1"].url).receiver("closest/after-stop", credit=10)
        s = Client(n["EA1"].url).sender("closest/after-stop")
        s.wait_credit(1, timeout=10)
        assert s.send(make_message("again")).wait().state == ACCEPTED
        assert rx.wait_messages(1)[0].body == "again"
        print(f"EA1 noticed the silent interior and moved after {took:.2f}s (idle timeout {idle}s)")
        assert took < 4 * idle + 1
    finally:
        os.kill(n["INT.A"].pid, signal.SIGCONT)


def test_deliveries_in_flight_through_a_killed_interior_come_back_to_their_senders(node_factory):
    """Issue 31 point 3 with deliveries really in flight: 20 unsettled deliveries EA1 -> INT.A -> INT.B ->
    EB1 sit at a consumer that received them and settles nothing. INT.B (the consumer's interior) is
    killed (-9): every one comes back to the producer on EA1 RELEASED or MODIFIED (none lost, none
    stuck); the consumer's accepts after the kill change none of them; EA1, INT.A and EB1 then hold
    nothing in flight, and the clients keep their connections to their edges."""
    n = router_test(node_factory)
    cons = Client(n["EB1"].url)
    rx = cons.receiver("balanced/edge-inflight", credit=50, auto_accept=False)
    client = Client(n["EA1"].url)
    s = client.sender("balanced/edge-inflight")
    s.wait_credit(20, timeout=10)
    trackers = [s.send(make_message(f"held {i}")) for i in range(20)]
    rx.wait_messages(20, timeout=10)
    for name in ("EA1", "INT.A", "INT.B", "EB1"):
        held = node_state(n[name]).in_flight
        assert held >= 20, f"{name} holds {held} deliveries in flight, not the 20 at the consumer"
    assert not any(t.settled for t in trackers)
    kill9(n["INT.B"])
    wait_until(lambda: all(t.settled for t in trackers), 15, "every delivery settled at its producer")
    outcomes = Counter(t.state for t in trackers)
    print(f"outcomes at the producer after the kill: {dict(outcomes)}")
    assert set(outcomes) <= {RELEASED, MODIFIED}, outcomes
    for r in rx.received:
        if cons.remote_open:
            r.accept()              # too late: the producer has its answer already
    wait_until(lambda: uplink_of(n["EB1"]) == "INT.A", 10, "EB1 routes through INT.A")
    for name in ("EA1", "INT.A", "EB1"):
        wait_until(lambda nd=n[name]: node_state(nd).in_flight == 0, 10, f"{name} holds nothing in flight")
    assert Counter(t.state for t in trackers) == outcomes
    assert client.remote_open and cons.remote_open, "a client lost its connection to its edge"
