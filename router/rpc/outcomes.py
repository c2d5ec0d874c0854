"""What to do when a message we sent comes back with an outcome: the seed's rules, in one place.

What the seed (``004_``, "undeliverable messages") says:

- When a destination becomes unreachable while a message crosses the mesh (the consumer crashed, a
  link broke), the mesh answers the original sender with a disposition whose terminal state is
  MODIFIED or RELEASED. Those states tell the sender the message was never delivered, so it "can be
  retransmitted later without worrying about duplicates"; ordering is not guaranteed on retransmission.
- The Newton driver did not redeliver: it treated RELEASED or MODIFIED as a delivery failure, and left
  redelivery for a later release. Casts might be safe to re-send, since they promise no strict
  ordering (left open).
- A consumer that wants to requeue a message answers RELEASED. A mesh may then forward the message to
  another consumer, or pass RELEASED back to the publisher.

What this library does with that:

- ACCEPTED: delivered (for a call: now wait for the reply).
- REJECTED: the consumer refused the message; retrying cannot help -> :class:`RpcUndeliverable`.
- RELEASED: the message never reached an application (the router sends it when nothing consumed it,
  and a consumer sends it to requeue). We take the seed's "retransmit without fear of duplicates" and
  re-send after a short backoff while the deadline allows. If it is still RELEASED at the deadline ->
  :class:`RpcUndeliverable`.
- MODIFIED with ``undeliverable-here`` only (no ``delivery-failed``): also "not processed, try
  elsewhere" -> re-send, like RELEASED.
- MODIFIED with ``delivery-failed``: this router sends it for deliveries that were already on the wire
  to a consumer when the consumer (or a link on the way) was lost, so the request may have been
  processed. Following the seed's Newton behaviour, the message is a delivery failure
  (:class:`RpcUndeliverable`) unless the caller asked for at-least-once (``retry_modified=True``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from proton import Delivery


class Action(enum.Enum):
    """What the sender does next."""

    DONE = "done"        # ACCEPTED
    RETRY = "retry"      # re-send (if time allows)
    FAIL = "fail"        # give up: RpcUndeliverable


@dataclass(frozen=True)
class Decision:
    """An :class:`Action` with the outcome's name and a reason for the error message."""

    action: Action
    outcome: str
    reason: str = ""


OUTCOME_NAMES = {
    Delivery.ACCEPTED: "ACCEPTED",
    Delivery.REJECTED: "REJECTED",
    Delivery.RELEASED: "RELEASED",
    Delivery.MODIFIED: "MODIFIED",
}


_DONE = Decision(Action.DONE, "ACCEPTED")     # the common case, made once


def decide(state: int, delivery_failed: bool = False, undeliverable_here: bool = False,
           retry_modified: bool = False) -> Decision | None:
    """The decision for a terminal outcome; None for a state that is not terminal (e.g. RECEIVED)."""
    name = OUTCOME_NAMES.get(state)
    if name is None:
        return None
    if state == Delivery.ACCEPTED:
        return _DONE
    if state == Delivery.REJECTED:
        return Decision(Action.FAIL, name, "rejected by the consumer")
    if state == Delivery.RELEASED:
        return Decision(Action.RETRY, name, "released: not delivered to any consumer")
    # MODIFIED
    if not delivery_failed:
        return Decision(Action.RETRY, name, f"modified (undeliverable-here={undeliverable_here}): "
                        "not processed")
    if retry_modified:
        return Decision(Action.RETRY, name, "modified (delivery-failed): re-sent, at-least-once")
    return Decision(Action.FAIL, name, "modified (delivery-failed): the consumer was lost after the "
                    "message reached it, so it may have been processed; not re-sent")


def backoff(attempt: int, first: float, longest: float) -> float:
    """Delay before re-send number ``attempt`` (1, 2, ...): ``first`` doubled each time, capped."""
    return min(longest, first * (2 ** max(0, attempt - 1)))
