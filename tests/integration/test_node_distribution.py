"""Distribution among local consumers: closest, balanced, multicast (incl. outcome aggregation)."""

from __future__ import annotations

import pytest

from tests.support.clients import ACCEPTED, MODIFIED, REJECTED, RELEASED, Client, outcome_name
from tests.support.traffic import send_paced
from tests.support.waiting import assert_stays, wait_for


def test_closest_round_robin(node):
    c = Client(node.url)
    a = c.receiver("closest/rr", credit=20)
    b = c.receiver("closest/rr", credit=20)
    s = c.sender("closest/rr")
    s.wait_credit()
    trackers = [s.send(f"m{i}") for i in range(10)]
    wait_for(lambda: all(t.settled for t in trackers), what="10 deliveries settled")
    assert all(t.state == ACCEPTED for t in trackers)
    assert (len(a.received), len(b.received)) == (5, 5)
    assert sorted(a.bodies + b.bodies) == sorted(f"m{i}" for i in range(10))


def test_closest_round_robin_paced(node):
    c = Client(node.url)
    a = c.receiver("closest/rr-paced", credit=20)
    b = c.receiver("closest/rr-paced", credit=20)
    s = c.sender("closest/rr-paced")
    send_paced(s, [a, b], 10)
    assert (len(a.received), len(b.received)) == (5, 5)


def test_closest_skips_consumer_without_credit(node):
    c = Client(node.url)
    a = c.receiver("closest/no-credit", credit=0)
    b = c.receiver("closest/no-credit", credit=20)
    s = c.sender("closest/no-credit")
    s.wait_credit()
    trackers = [s.send(f"m{i}") for i in range(6)]
    wait_for(lambda: all(t.settled for t in trackers), what="6 deliveries settled")
    assert len(b.received) == 6 and not a.received


def test_balanced_fewest_unsettled_wins(node):
    c = Client(node.url)
    holder = c.receiver("balanced/fewest", credit=20, auto_accept=False)
    settler = c.receiver("balanced/fewest", credit=20)
    s = c.sender("balanced/fewest")
    send_paced(s, [holder, settler], 10)
    assert len(holder.received) + len(settler.received) == 10
    assert len(settler.received) >= 8, (len(holder.received), len(settler.received))


def test_balanced_spreads_when_all_consumers_hold(node_factory):
    """Two consumers that both hold their deliveries: balanced keeps using both (a busy consumer
    is still a destination), neither is starved."""
    n = node_factory(link_capacity=50)
    c = Client(n.url)
    a = c.receiver("balanced/both-busy", credit=50, auto_accept=False)
    b = c.receiver("balanced/both-busy", credit=50, auto_accept=False)
    s = c.sender("balanced/both-busy")
    s.wait_credit()
    trackers = [s.send(f"m{i}") for i in range(20)]
    wait_for(lambda: len(a.received) + len(b.received) == 20, what="20 deliveries at the consumers")
    assert len(a.received) >= 5 and len(b.received) >= 5, (len(a.received), len(b.received))
    for x in a.received + b.received:
        x.accept()
    wait_for(lambda: all(t.settled for t in trackers), what="all settled")


def test_multicast_one_copy_per_consumer(node):
    c = Client(node.url)
    rs = [c.receiver("multicast/fanout", credit=10) for _ in range(3)]
    s = c.sender("multicast/fanout")
    s.wait_credit()
    trackers = [s.send(f"m{i}") for i in range(3)]
    wait_for(lambda: all(t.settled for t in trackers), what="multicast deliveries settled")
    assert [t.state for t in trackers] == [ACCEPTED] * 3
    for r in rs:
        assert r.bodies == ["m0", "m1", "m2"]
    assert_stays(lambda: all(len(r.received) == 3 for r in rs), 0.3, "no duplicate copies")


def test_multicast_presettled_copies(node):
    c = Client(node.url)
    rs = [c.receiver("multicast/fanout-presettled", credit=10) for _ in range(3)]
    s = c.sender("multicast/fanout-presettled")
    s.wait_credit()
    for i in range(3):
        s.send(f"p{i}", settled=True)
    for r in rs:
        r.wait_messages(3)
        assert r.bodies == ["p0", "p1", "p2"]
        assert all(x.presettled for x in r.received)


def test_multicast_settles_only_when_all_copies_terminal(node):
    c = Client(node.url)
    rs = [c.receiver("multicast/aggregate", credit=10, auto_accept=False) for _ in range(3)]
    s = c.sender("multicast/aggregate")
    s.wait_credit()
    tr = s.send("all of you")
    copies = [r.wait_messages(1)[0] for r in rs]
    copies[0].accept()
    assert_stays(lambda: not tr.settled, 0.5, lambda: f"unsettled after 1 of 3 copies accepted ({tr})")
    copies[1].accept()
    assert_stays(lambda: not tr.settled, 0.5, lambda: f"unsettled after 2 of 3 copies accepted ({tr})")
    copies[2].accept()
    tr.wait()
    assert tr.state == ACCEPTED


def _decide(rec, outcome):
    if outcome == ACCEPTED:
        rec.accept()
    elif outcome == REJECTED:
        rec.reject("app:multicast-reject", "one consumer rejected")
    elif outcome == RELEASED:
        rec.release()
    elif outcome == MODIFIED:
        rec.modify(failed=True)
    else:
        raise ValueError(outcome)


A, J, R, M = ACCEPTED, REJECTED, RELEASED, MODIFIED


@pytest.mark.parametrize(
    "outcomes, expected",
    [
        ((A, A, A), A),
        ((J, A, A), J),
        ((A, A, J), J),
        ((R, J, M), J),
        ((R, M, A), A),
        ((A, R, M), A),
        ((R, M, R), M),
        ((M, R, R), M),
        ((R, R, R), R),
    ],
    ids=lambda v: "-".join(outcome_name(x) for x in v) if isinstance(v, tuple) else outcome_name(v),
)
def test_multicast_outcome_priority(node, outcomes, expected):
    """REJECTED > ACCEPTED > MODIFIED > RELEASED, whatever order the consumers decide in."""
    c = Client(node.url)
    rs = [c.receiver("multicast/priority", credit=10, auto_accept=False) for _ in range(3)]
    s = c.sender("multicast/priority")
    s.wait_credit()
    tr = s.send("vote")
    copies = [r.wait_messages(1)[0] for r in rs]
    for rec, o in zip(copies, outcomes, strict=True):
        _decide(rec, o)
    tr.wait()
    assert tr.state == expected, f"consumers {[outcome_name(o) for o in outcomes]} -> producer {tr.outcome}"
    if expected == REJECTED:
        assert tr.condition is not None and tr.condition.name == "app:multicast-reject"


def test_multicast_without_consumers_gets_no_credit(node):
    c = Client(node.url)
    s = c.sender("multicast/empty")
    assert_stays(lambda: s.credit == 0, 0.5, "no credit for a multicast address without consumers")
    r = c.receiver("multicast/empty", credit=10)
    s.wait_credit()
    s.send("now").wait()
    assert r.bodies == ["now"]
