"""What the forwarding core decides, as data the adapter carries out.

Every decision is a small constant or tuple, so the hot path allocates nothing for it:

* routing a delivery (`RouterCore.route`, `route_mesh`, `route_stream`): the consumer to send it to
  now (the common case, returned as is), or a `Routing` ``(kind, target, dest)``: ``TO_ONE`` (target: a
  consumer or a peer's data-out link, dest: the remote destination it leads to, if any), ``HOLD``
  (target: a consumer busy with a streamed message; send once it is done), ``TO_MANY`` (target: the
  consumers of a multicast delivery, one copy each), or ``UNROUTABLE`` (`NOWHERE`: RELEASED, or dropped
  when pre-settled);
* how a copy is settled once sent: the send mode, one table for every path (`SEND_MODES`);
* what a consumer's outcome means upstream: `Settle` flags from `RouterCore.copy_settled`;
* credit: ``(producer, amount)`` grants and producers to drain, from `RouterCore.take_credit_actions`;
* refusing an attach: a `Refusal` with the AMQP error condition and a description.
"""

from __future__ import annotations

from typing import NamedTuple

# ---- routing one delivery ---------------------------------------------------------------------------------
UNROUTABLE = 0
TO_ONE = 1
HOLD = 2
TO_MANY = 3



#: Where a delivery goes, when it is not simply one consumer now: ``(kind, target, dest)``, with target a
#: Consumer (TO_ONE, HOLD), a list of them (TO_MANY) or None, and dest the RemoteDest of a delivery sent
#: toward another node. A plain tuple: a NamedTuple costs ~2,000 instructions more per delivery to make.
Routing = tuple[int, object, object]
NOWHERE: Routing = (UNROUTABLE, None, None)

# ---- send modes: how a copy is settled once it is on the consumer's link ---------------------------------
TRACKED = 0       # unsettled both ways: in flight until the consumer decides, its outcome goes upstream
PRESETTLED = 1    # the producer sent it settled: settle both at once, credit goes back at once
HANDED_OVER = 2   # unsettled, to an at-most-once consumer: sent settled, ACCEPTED upstream (its choice)

#: SEND_MODES[producer sent it pre-settled][consumer asked for pre-settled deliveries]
SEND_MODES = ((TRACKED, HANDED_OVER), (PRESETTLED, PRESETTLED))

# ---- a multicast copy became terminal (flags) -------------------------------------------------------------
BEST = 1          # its outcome is now the group's best: keep its details
DONE = 2          # it was the last copy: settle the group upstream with the best outcome


class Refusal(NamedTuple):
    """An attach (or Open) the core refuses: detach with this AMQP error condition."""

    condition: str
    description: str
