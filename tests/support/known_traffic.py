"""Known traffic through one real node with telemetry, for checking `meshrouter analyze` against it.

`run(node)` sends, on addresses of its own (``tel/...``):

* ``tel/a``: 20 unsettled messages; the consumer accepts 10, rejects 4, releases 3, modifies 3;
* ``tel/b``: 6 unsettled messages accepted, then 5 sent pre-settled;
* ``tel/none`` (no consumer, through the anonymous relay): 7 unsettled (the node RELEASEs them) and 2
  pre-settled (the node drops them);
* ``tel/s``: two rounds of as many unsettled messages as the producer has credit (about the link
  capacity), which the consumer holds until the producer's credit is gone (one credit-starvation
  interval each), then accepts.

`run` returns what the node's records must say, per (address, outcome).
"""

from __future__ import annotations

from tests.support.clients import Client, make_message
from tests.support.waiting import pump_for

A_DISPOSITIONS = ("accept",) * 10 + ("reject",) * 4 + ("release",) * 3 + ("modify",) * 3
STARVED_ROUNDS = 2


def expected(starved: int) -> dict[tuple[str, str], int]:
    """(address, outcome) -> delivery records the node writes for `run` (which sent `starved` messages
    to tel/s)."""
    return {("tel/a", "accepted"): 10, ("tel/a", "rejected"): 4, ("tel/a", "released"): 3,
            ("tel/a", "modified"): 3, ("tel/b", "accepted"): 6, ("tel/b", "presettled"): 5,
            ("tel/none", "released"): 7, ("tel/none", "dropped"): 2,
            ("tel/s", "accepted"): starved}


def run(node, capacity: int) -> dict[tuple[str, str], int]:
    """Send the traffic above through `node` (link capacity `capacity`), wait for every outcome and
    return what the node's records must say (see `expected`)."""
    prod, cons = Client(node.url), Client(node.url)
    try:
        _address_a(prod, cons)
        _address_b(prod, cons)
        _nowhere(prod)
        starved = _starved(prod, cons, capacity)
    finally:
        prod.close()
        cons.close()
    return expected(starved)


def _address_a(prod: Client, cons: Client) -> None:
    r = cons.receiver("tel/a", credit=len(A_DISPOSITIONS), auto_accept=False)
    s = prod.sender("tel/a")
    s.wait_credit()
    trackers = [s.send(make_message(f"a{i}")) for i in range(len(A_DISPOSITIONS))]
    for m, how in zip(r.wait_messages(len(A_DISPOSITIONS)), A_DISPOSITIONS, strict=True):
        getattr(m, how)()
    assert [t.wait().outcome for t in trackers].count("ACCEPTED") == 10


def _address_b(prod: Client, cons: Client) -> None:
    r = cons.receiver("tel/b", credit=20)
    s = prod.sender("tel/b")
    s.wait_credit()
    for t in [s.send(make_message(f"b{i}")) for i in range(6)]:
        assert t.wait().outcome == "ACCEPTED"
    for i in range(5):
        s.send(make_message(f"b-settled{i}"), settled=True)
    r.wait_messages(11)


def _nowhere(prod: Client) -> None:
    anon = prod.sender(None)
    anon.wait_credit()
    trackers = [anon.send(make_message(f"n{i}", address="tel/none")) for i in range(7)]
    assert [t.wait().outcome for t in trackers] == ["RELEASED"] * 7
    for i in range(2):
        anon.send(make_message(f"n-settled{i}", address="tel/none"), settled=True)


def _starved(prod: Client, cons: Client, capacity: int) -> int:
    """Rounds of exactly the credit the producer has (so its credit runs out once per round), held by
    the consumer, then accepted (the credit comes back). Returns the messages sent."""
    # one credit more than it will use: the address stays ready, so the producer gets its credit back
    r = cons.receiver("tel/s", credit=STARVED_ROUNDS * capacity + 1, auto_accept=False)
    s = prod.sender("tel/s")
    sent = 0
    for _ in range(STARVED_ROUNDS):
        # the node tops credit up in batches: wait for most of the window, then for stragglers
        s.wait_credit(capacity - capacity // 8)
        pump_for(0.3)
        n = s.link.credit
        trackers = [s.send(make_message(f"s{sent + i}")) for i in range(n)]
        for m in r.wait_messages(sent + n)[sent:]:
            m.accept()
        assert all(t.wait().outcome == "ACCEPTED" for t in trackers)
        sent += n
    s.wait_credit()                     # the last interval's end is recorded with this credit
    return sent
