"""Settlement: the consumer's outcome, and only it, reaches the producer unchanged."""

from __future__ import annotations

from proton import symbol

from tests.support.clients import ACCEPTED, MODIFIED, REJECTED, RELEASED, Client
from tests.support.waiting import assert_stays


def _pair(node, address: str):
    c = Client(node.url)
    r = c.receiver(address, credit=10, auto_accept=False)
    s = c.sender(address)
    s.wait_credit()
    return c, s, r


def test_node_never_accepts_for_the_consumer(node):
    _, s, r = _pair(node, "balanced/no-early-accept")
    tr = s.send("wait for me")
    rec = r.wait_messages(1)[0]
    assert not rec.presettled
    assert_stays(lambda: not tr.settled and tr.state is None, 1.0,
                 lambda: f"producer delivery untouched while the consumer decides ({tr})")
    rec.accept()
    tr.wait()
    assert tr.state == ACCEPTED


def test_rejected_with_error_condition(node):
    _, s, r = _pair(node, "balanced/reject")
    tr = s.send("bad")
    info = {symbol("reason-code"): 42, symbol("detail"): "no thanks"}
    r.wait_messages(1)[0].reject("app:invalid-order", "order 17 is not valid", info)
    tr.wait()
    assert tr.state == REJECTED, tr
    assert tr.condition is not None, "rejected outcome lost its error condition"
    assert tr.condition.name == "app:invalid-order"
    assert tr.condition.description == "order 17 is not valid"
    assert tr.condition.info == info


def test_rejected_without_error_condition(node):
    _, s, r = _pair(node, "balanced/reject-bare")
    tr = s.send("bad")
    r.wait_messages(1)[0].reject()
    tr.wait()
    assert tr.state == REJECTED
    assert tr.condition is None


def test_released(node):
    _, s, r = _pair(node, "balanced/release")
    tr = s.send("not now")
    r.wait_messages(1)[0].release()
    tr.wait()
    assert tr.state == RELEASED, tr


def test_modified_flags_and_annotations(node):
    _, s, r = _pair(node, "balanced/modify")
    tr = s.send("try elsewhere")
    ann = {symbol("x-retry-after"): 5, symbol("x-why"): "busy"}
    r.wait_messages(1)[0].modify(failed=True, undeliverable=True, annotations=ann)
    tr.wait()
    assert tr.state == MODIFIED, tr
    assert tr.failed is True
    assert tr.undeliverable is True
    assert tr.annotations == ann


def test_modified_without_flags(node):
    """MODIFIED with neither flag means 'try again' to oslo; the flags must not be invented."""
    _, s, r = _pair(node, "balanced/modify-plain")
    tr = s.send("again")
    r.wait_messages(1)[0].modify()
    tr.wait()
    assert tr.state == MODIFIED
    assert tr.failed is False
    assert tr.undeliverable is False
    assert not tr.annotations


def test_modified_delivery_failed_only(node):
    _, s, r = _pair(node, "balanced/modify-failed")
    tr = s.send("x")
    r.wait_messages(1)[0].modify(failed=True)
    tr.wait()
    assert (tr.state, tr.failed, tr.undeliverable) == (MODIFIED, True, False)


def test_each_delivery_keeps_its_own_outcome(node):
    _, s, r = _pair(node, "balanced/mixed-outcomes")
    trackers = [s.send(f"m{i}") for i in range(4)]
    recs = r.wait_messages(4)
    by_body = {x.body: x for x in recs}
    by_body["m0"].accept()
    by_body["m1"].reject("app:nope", "m1")
    by_body["m2"].release()
    by_body["m3"].modify(failed=True)
    for t in trackers:
        t.wait()
    assert [t.state for t in trackers] == [ACCEPTED, REJECTED, RELEASED, MODIFIED]
    assert trackers[1].condition.description == "m1"


def test_presettled_arrives_settled(node):
    c = Client(node.url)
    r = c.receiver("balanced/presettled", credit=10, auto_accept=False)
    s = c.sender("balanced/presettled")
    s.wait_credit()
    s.send("fire and forget", settled=True)
    rec = r.wait_messages(1)[0]
    assert rec.presettled, "a pre-settled delivery arrived unsettled at the consumer"
    assert rec.body == "fire and forget"


def test_unsettled_arrives_unsettled(node):
    _, s, r = _pair(node, "balanced/unsettled")
    s.send("keep track")
    rec = r.wait_messages(1)[0]
    assert not rec.presettled
    rec.accept()


def test_outcomes_reach_producer_on_another_connection(node):
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/two-conns", credit=10, auto_accept=False)
    s = prod.sender("balanced/two-conns")
    s.wait_credit()
    t1, t2 = s.send("a"), s.send("b")
    recs = r.wait_messages(2)
    recs[1].reject("app:b", "second")
    recs[0].accept()
    t1.wait()
    t2.wait()
    assert (t1.state, t2.state) == (ACCEPTED, REJECTED)
    assert t2.condition.name == "app:b"
