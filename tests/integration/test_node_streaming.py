"""A consumer that settles a large (streamed) message before it has fully arrived."""

from proton import Delivery

from tests.support.clients import Client, make_message, random_bytes
from tests.support.waiting import wait_for

MB = 1024 * 1024


def _settle_early(rl, outcome: int) -> None:
    """Make receiver link `rl` settle each delivery with `outcome` on its first frame."""
    decided = set()

    def on_delivery(d: Delivery) -> None:
        cur = rl.link.current
        while cur is not None:
            if cur.aborted:
                rl.aborted += 1
                cur.settle()
                cur = rl.link.current
                continue
            if cur.pending > 0:
                rl.link.recv(cur.pending)
            if id(cur) not in decided and not cur.settled:
                decided.add(id(cur))
                cur.update(outcome)
                cur.settle()
                rl.received.append(cur)
            if cur.partial:
                break
            rl.link.advance()
            cur = rl.link.current

    rl._on_delivery = on_delivery


def test_early_reject_of_streamed_message_reaches_producer_and_link_recovers(node):
    prod = Client(node.url)
    cons = Client(node.url)
    r = cons.receiver("balanced/early", credit=10, auto_accept=False)
    _settle_early(r, Delivery.REJECTED)
    s = prod.sender("balanced/early")
    s.wait_credit()
    big = s.send(make_message(random_bytes(4 * MB)))
    assert big.wait().outcome == "REJECTED"
    assert not s.unsettled
    # the consumer link is usable again: a small message after the aborted big one
    r2_cons = Client(node.url)
    r2 = r2_cons.receiver("balanced/early-after", credit=10)
    s2 = prod.sender("balanced/early-after")
    s2.wait_credit()
    assert s2.send(make_message("small")).wait().outcome == "ACCEPTED"
    assert r2.bodies == ["small"]
    small = s.send(make_message("next"))
    assert small.wait().outcome == "REJECTED"       # same early-settling consumer, not stuck
    wait_for(lambda: len(r.received) == 2, what="second delivery at the early-settling consumer")
