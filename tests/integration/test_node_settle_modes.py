"""Consumers that ask for snd-settle-mode=settled (at-most-once) get pre-settled deliveries."""

from proton import Link

from tests.support.clients import Client, at_most_once_receiver, make_message, random_bytes
from tests.support.waiting import assert_stays


def test_at_most_once_consumer_gets_presettled_and_producer_sees_accepted(node):
    cons = Client(node.url)
    prod = Client(node.url)
    r = at_most_once_receiver(cons, "balanced/amo")
    assert r.link.remote_snd_settle_mode == Link.SND_SETTLED
    s = prod.sender("balanced/amo")
    s.wait_credit()
    trackers = [s.send(make_message(f"m{i}")) for i in range(3)]
    assert [t.wait().outcome for t in trackers] == ["ACCEPTED"] * 3
    r.wait_messages(3)
    assert all(m.presettled for m in r.received)
    big = s.send(make_message(random_bytes(2 * 1024 * 1024)))      # streamed, multi-frame
    assert big.wait().outcome == "ACCEPTED"
    assert r.wait_messages(4)[3].presettled


def test_multicast_mixing_at_most_once_and_normal_consumers(node):
    cons = Client(node.url)
    prod = Client(node.url)
    amo = at_most_once_receiver(cons, "multicast/amo")
    normal = cons.receiver("multicast/amo", credit=10, auto_accept=False)
    s = prod.sender("multicast/amo")
    s.wait_credit()
    t = s.send(make_message("both"))
    amo.wait_messages(1)
    normal.wait_messages(1)
    assert amo.received[0].presettled and not normal.received[0].presettled
    assert_stays(lambda: not t.done, 0.3, "producer unsettled until the normal consumer decides")
    normal.received[0].release()
    assert t.wait().outcome == "ACCEPTED"        # ACCEPTED (handed over) outranks RELEASED
