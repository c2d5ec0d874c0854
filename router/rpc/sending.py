"""Sending with credit, a deadline and the seed's outcome rules: :class:`Outbox` (loop thread only).

One :class:`Outbox` per connection. Each target address gets its own sender link (cached; the least
recently used idle link is closed beyond ``max_links``); ``None`` means the anonymous relay (the message's
``to`` says where it goes), which servers use for replies.

A targeted link only gets credit from this router while a consumer for its address exists somewhere in
the mesh ("credit is proxied"). Messages therefore wait in the outbox, never in Proton's link buffer:
one goes on the wire only when the link has credit. At the deadline a message that was never sent is
simply dropped (:class:`RpcTimeout`), so nothing stays buffered anywhere and no consumer that turns up
later gets a stale request. Once sent, the outcome decides (see :mod:`router.rpc.outcomes`): ACCEPTED
ends the send, RELEASED is re-sent after a backoff while the deadline allows, REJECTED and
MODIFIED(delivery-failed) fail it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .defaults import RETRY_BACKOFF
from .errors import RpcException, RpcTimeout, RpcUndeliverable
from .loop import EventLoop, Timer
from .outcomes import Action, backoff, decide
from .wire import Link, Outcome, Wire

log = logging.getLogger(__name__)

QUEUED, SENT, BACKOFF, DONE = "queued", "sent", "backoff", "done"


@dataclass(eq=False)
class SendOp:
    """One message to deliver: its encoded bytes, the link target (None = anonymous relay), the absolute
    deadline (``time.monotonic()``) and the callbacks.

    ``on_done(op, error)`` runs once when the send is over: ``error`` None means ACCEPTED. ``on_deadline(op)``
    (optional) runs at the deadline even after a successful send, unless :meth:`Outbox.forget` was
    called: a call uses it to time out waiting for the reply.
    """

    payload: bytes
    target: str | None
    deadline: float
    on_done: Callable[[SendOp, RpcException | None], None]
    on_deadline: Callable[[SendOp], None] | None = None
    retry_modified: bool = False
    label: str = ""
    key: Any = None                 # the owner's id for it (a call's message-id)
    state: str = QUEUED
    attempts: int = 0
    last_outcome: str = ""
    timeout: float = 0.0            # the requested timeout, for messages (default: deadline - now)
    presettled: bool = False        # settled as it is sent: done once on the wire, no outcome awaited
    on_sent: Callable[[SendOp], None] | None = None     # called each time it goes on the wire
    timer: Timer | None = field(default=None, repr=False)
    retry_timer: Timer | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        return self.label or (self.target or "(anonymous relay)")


@dataclass(eq=False)
class _LinkState:
    link: Link
    queue: deque[SendOp] = field(default_factory=deque)
    unsettled: int = 0


class Outbox:
    """Per-address sender links, messages waiting for credit, outcomes, re-sends and deadlines."""

    def __init__(self, loop: EventLoop, wire: Wire, name: str = "outbox", max_links: int = 64,
                 retry_backoff: tuple[float, float] = RETRY_BACKOFF) -> None:
        self.loop = loop
        self.wire = wire
        self.name = name
        self.max_links = max_links
        self.retry_backoff = retry_backoff
        self._links: OrderedDict[str | None, _LinkState] = OrderedDict()
        self._by_name: dict[str, _LinkState] = {}
        self._unsettled: dict[Any, tuple[_LinkState, SendOp]] = {}    # pn_delivery_t* -> (link, op)
        self._active: set[SendOp] = set()       # every op not DONE yet
        self._tags = itertools.count(1)
        self.sent = 0
        self.retries = 0
        self.closed_error: RpcException | None = None

    # ---- sending
    def send(self, op: SendOp) -> None:
        """Queue ``op`` for its link and send it as soon as there is credit."""
        now = time.monotonic()
        if not op.timeout:
            op.timeout = max(0.0, op.deadline - now)
        if self.closed_error is not None:
            self._finish(op, self.closed_error)
            return
        if op.deadline <= now:
            self._finish(op, RpcTimeout(f"{op.where}: deadline already passed"))
            return
        op.timer = self.loop.call_later(op.deadline - now, lambda: self._expire(op))
        self._active.add(op)
        self._enqueue(op)

    def _enqueue(self, op: SendOp) -> None:
        st = self._link_for(op.target)
        op.state = QUEUED
        st.queue.append(op)
        self._pump(st)

    def _link_for(self, target: str | None) -> _LinkState:
        st = self._links.get(target)
        if st is not None:
            self._links.move_to_end(target)
            return st
        if self.wire.closed:
            raise RuntimeError("outbox has no connection")
        self._evict()
        link = self.wire.open_sender(target)
        st = _LinkState(link)
        self._links[target] = st
        self._by_name[link.name] = st
        return st

    def _evict(self) -> None:
        """Close least recently used idle links while there are too many."""
        if len(self._links) < self.max_links:
            return
        for target, st in list(self._links.items()):
            if len(self._links) < self.max_links:
                return
            if not st.queue and st.unsettled == 0:
                self._drop_link(target, st)
                st.link.close()

    def close_idle(self, keep: set[str | None]) -> int:
        """Close the sender links whose target is not in ``keep`` and that hold nothing (no message
        waiting, none unsettled); how many were closed."""
        closed = 0
        for target, st in list(self._links.items()):
            if target not in keep and not st.queue and st.unsettled == 0:
                self._drop_link(target, st)
                st.link.close()
                closed += 1
        return closed

    def _drop_link(self, target: str | None, st: _LinkState) -> None:
        self._links.pop(target, None)
        self._by_name.pop(st.link.name, None)

    def on_flow(self, link: Link) -> None:
        """A FLOW arrived for one of our sender links: send what the credit allows, answer drain."""
        st = self._by_name.get(link.name)
        if st is not None:
            self._pump(st)
        elif link.drain_mode:
            link.drained()

    def _pump(self, st: _LinkState) -> None:
        link = st.link
        if not link.remote_active:
            return
        while st.queue and link.credit > 0:
            op = st.queue.popleft()
            if op.state != QUEUED:
                continue
            dlv = link.send(b"%d" % next(self._tags), op.payload)
            op.state = SENT
            op.attempts += 1
            self.sent += 1
            if op.on_sent is not None:
                try:
                    op.on_sent(op)
                except Exception:
                    log.exception("%s: on_sent callback for %s failed", self.name, op.where)
            if op.presettled:
                self.wire.settle(dlv, None)
                self._finish(op, None)
                continue
            st.unsettled += 1
            self._unsettled[dlv] = (st, op)
        if link.drain_mode:
            link.drained()

    # ---- outcomes
    def on_outcome(self, delivery: Any, outcome: Outcome) -> None:
        """The router gave one of our deliveries a terminal outcome (it is settled right after)."""
        entry = self._unsettled.get(delivery)
        if entry is None:
            return
        st, op = entry
        decision = decide(outcome.state, outcome.failed, outcome.undeliverable, op.retry_modified)
        if decision is None:
            return
        del self._unsettled[delivery]
        if st.unsettled > 0:
            st.unsettled -= 1
        if op.state != SENT:         # timed out or forgotten meanwhile
            return
        op.last_outcome = decision.outcome
        if decision.action is Action.DONE:
            self._finish(op, None)
        elif decision.action is Action.FAIL:
            cond = outcome.condition
            cond_text = f" ({cond[0]}: {cond[1]})" if cond is not None else ""
            self._finish(op, RpcUndeliverable(f"{op.where}: {decision.reason}{cond_text}", decision.outcome,
                                              cond[0] if cond is not None else None))
        else:
            delay = backoff(op.attempts, *self.retry_backoff)
            if time.monotonic() + delay >= op.deadline:
                self._finish(op, RpcUndeliverable(
                    f"{op.where}: {decision.reason}; not delivered before the deadline "
                    f"({op.attempts} attempts in {op.timeout:g} s)", decision.outcome))
                return
            op.state = BACKOFF
            self.retries += 1
            log.debug("%s: %s %s, re-sending in %.3f s (attempt %d)", self.name, op.where, decision.outcome,
                      delay, op.attempts + 1)
            op.retry_timer = self.loop.call_later(delay, lambda: self._resend(op))

    def _resend(self, op: SendOp) -> None:
        op.retry_timer = None
        if op.state != BACKOFF:
            return
        if self.closed_error is not None:
            self._finish(op, self.closed_error)
            return
        self._enqueue(op)

    # ---- deadlines and ends
    def _expire(self, op: SendOp) -> None:
        op.timer = None
        callback, op.on_deadline = op.on_deadline, None
        if op.state == QUEUED and op.attempts == 0:
            self._finish(op, RpcTimeout(f"{op.where}: no credit within {op.timeout:g} s (no consumer "
                                        "reachable); the message was not sent"))
        elif op.state == QUEUED:
            why = f"{op.last_outcome} {op.attempts} times, then no credit to re-send it"
            self._finish(op, RpcUndeliverable(f"{op.where}: {why} within {op.timeout:g} s", op.last_outcome))
        elif op.state == BACKOFF:
            self._finish(op, RpcUndeliverable(f"{op.where}: {op.last_outcome} {op.attempts} times, not "
                                              f"delivered within {op.timeout:g} s", op.last_outcome))
        elif op.state == SENT and callback is None:
            self._finish(op, RpcTimeout(f"{op.where}: no outcome within {op.timeout:g} s"))
        elif callback is not None:          # sent (settled or not): the owner reports the missing reply
            self.forget(op)
            callback(op)

    def _finish(self, op: SendOp, error: RpcException | None) -> None:
        if op.state == DONE:
            return
        if op.state == QUEUED:
            st = self._links.get(op.target)
            if st is not None:
                try:
                    st.queue.remove(op)
                except ValueError:
                    pass
        op.state = DONE
        self._active.discard(op)
        if op.retry_timer is not None:
            op.retry_timer.cancel()
            op.retry_timer = None
        if error is not None:
            op.on_deadline = None
        if op.on_deadline is None:
            self._cancel_timer(op)
        try:
            op.on_done(op, error)
        except Exception:
            log.exception("%s: completion callback for %s failed", self.name, op.where)

    @staticmethod
    def _cancel_timer(op: SendOp) -> None:
        if op.timer is not None:
            op.timer.cancel()
            op.timer = None

    def forget(self, op: SendOp) -> None:
        """Stop caring about ``op`` (its reply came): no more callbacks, its deadline timer cancelled. A
        delivery still unsettled is settled quietly when its outcome arrives."""
        op.on_deadline = None
        if op.state != DONE:
            if op.state == QUEUED:
                st = self._links.get(op.target)
                if st is not None and op in st.queue:
                    st.queue.remove(op)
            op.state = DONE
            self._active.discard(op)
            if op.retry_timer is not None:
                op.retry_timer.cancel()
                op.retry_timer = None
        self._cancel_timer(op)

    def on_link_closed(self, link: Link, error: RpcException) -> None:
        """The router closed (or refused) one of our sender links: fail what waited on it."""
        st = self._by_name.pop(link.name, None)
        if st is None:
            return
        for target, other in list(self._links.items()):
            if other is st:
                self._links.pop(target, None)
        waiting = list(st.queue)
        st.queue.clear()
        lost = [k for k, (owner, _) in self._unsettled.items() if owner is st]
        for k in lost:
            waiting.append(self._unsettled.pop(k)[1])
        for op in waiting:
            if op.state in (QUEUED, SENT):
                self._finish(op, error)

    def fail_all(self, error: RpcException) -> None:
        """The connection is gone: fail everything and refuse what comes later."""
        self.closed_error = error
        ops = list(self._active)
        for st in self._links.values():
            st.queue.clear()
        self._unsettled.clear()
        for op in ops:
            self._finish(op, error)
        self._links.clear()
        self._by_name.clear()

    @property
    def queued(self) -> int:
        return sum(len(st.queue) for st in self._links.values())

    @property
    def unsettled(self) -> int:
        return len(self._unsettled)

    @property
    def links(self) -> int:
        return len(self._links)
