"""Consumer loss: unsent deliveries come back RELEASED, sent-but-unsettled ones MODIFIED
(delivery-failed); nothing stays unsettled afterwards."""

from __future__ import annotations

import pytest

from tests.support.clients import ACCEPTED, MODIFIED, RELEASED, Client
from tests.support.waiting import wait_for

HOW = ["detach", "close_connection", "drop_tcp"]


def _lose(consumer_client: Client, receiver, how: str) -> None:
    if how == "detach":
        receiver.close()
    elif how == "close_connection":
        consumer_client.close()
    elif how == "drop_tcp":
        consumer_client.disconnect()
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", HOW)
def test_consumer_loss_outcomes(node, how):
    address = f"balanced/loss-{how}"
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver(address, credit=2, auto_accept=False)
    s = prod.sender(address)
    s.wait_credit(5)
    trackers = [s.send(f"m{i}") for i in range(5)]
    r.wait_messages(2)
    wait_for(lambda: s.link.queued == 0, what="all 5 deliveries written to the node")
    received_bodies = r.bodies
    assert received_bodies == ["m0", "m1"]

    _lose(cons, r, how)
    wait_for(lambda: all(t.settled for t in trackers),
             what=lambda: f"all deliveries settled after the consumer was lost: {trackers}")
    for i, t in enumerate(trackers):
        if f"m{i}" in received_bodies:
            assert t.state == MODIFIED, f"m{i} was sent to the lost consumer: {t.outcome}"
            assert t.failed is True, f"m{i}: MODIFIED without delivery-failed"
        else:
            assert t.state == RELEASED, f"m{i} was never sent to the lost consumer: {t.outcome}"

    # nothing left unsettled at the producer, and the address works with a new consumer
    wait_for(lambda: s.link.unsettled == 0, what=lambda: f"producer link unsettled {s.link.unsettled}")
    cons2 = Client(node.url)
    r2 = cons2.receiver(address, credit=10)
    s.wait_credit(1)
    tr = s.send("after").wait()
    assert tr.state == ACCEPTED
    assert r2.bodies == ["after"], "a delivery from before the loss was re-routed to the new consumer"


@pytest.mark.parametrize("how", HOW)
def test_consumer_loss_with_other_consumer_present(node, how):
    """Outcomes of a lost consumer's deliveries are not re-routed to the surviving consumer."""
    address = f"closest/loss-other-{how}"
    prod = Client(node.url)
    cons = Client(node.url)
    survivor_conn = Client(node.url)
    lost = cons.receiver(address, credit=10, auto_accept=False)
    survivor = survivor_conn.receiver(address, credit=10)
    s = prod.sender(address)
    s.wait_credit()
    trackers = [s.send(f"m{i}") for i in range(6)]
    wait_for(lambda: len(lost.received) + len(survivor.received) == 6, what="6 deliveries at consumers")
    lost_bodies = lost.bodies
    assert lost_bodies, "closest gave the holding consumer nothing: test setup broken"
    _lose(cons, lost, how)
    wait_for(lambda: all(t.settled for t in trackers), what=lambda: f"all settled: {trackers}")
    for i, t in enumerate(trackers):
        if f"m{i}" in lost_bodies:
            assert (t.state, t.failed) == (MODIFIED, True), f"m{i}: {t}"
        else:
            assert t.state == ACCEPTED, f"m{i}: {t}"
    assert sorted(survivor.bodies) == sorted(f"m{i}" for i in range(6) if f"m{i}" not in lost_bodies)


def test_consumer_settled_after_link_detach_is_not_counted_twice(node):
    """A consumer that accepted some deliveries before detaching: those stay ACCEPTED."""
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/partial-accept", credit=4, auto_accept=False)
    s = prod.sender("balanced/partial-accept")
    s.wait_credit(4)
    trackers = [s.send(f"m{i}") for i in range(4)]
    recs = r.wait_messages(4)
    recs[0].accept()
    recs[1].accept()
    trackers[0].wait()
    trackers[1].wait()
    r.close()
    wait_for(lambda: all(t.settled for t in trackers), what=lambda: f"all settled: {trackers}")
    assert [t.state for t in trackers] == [ACCEPTED, ACCEPTED, MODIFIED, MODIFIED]


def test_producer_loss_does_not_disturb_consumer(node):
    """The producer vanishes with deliveries unsettled at the consumer: the consumer can still
    settle them, and the node keeps working."""
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/producer-loss", credit=10, auto_accept=False)
    s = prod.sender("balanced/producer-loss")
    s.wait_credit()
    for i in range(3):
        s.send(f"m{i}")
    recs = r.wait_messages(3)
    prod.disconnect()
    for x in recs:
        x.accept()
    prod2 = Client(node.url)
    s2 = prod2.sender("balanced/producer-loss")
    s2.wait_credit()
    tr = s2.send("next")
    r.wait_messages(4)[3].accept()
    tr.wait()
    assert tr.state == ACCEPTED
    assert r.bodies == ["m0", "m1", "m2", "next"]
