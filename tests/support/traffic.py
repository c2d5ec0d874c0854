"""Traffic patterns of the tests: paced sends, an audited stream, an RPC echo server, outcome counts.

* :func:`send_paced`: one message at a time, each after the previous one's outcome is known.
* :class:`AuditStream`: a producer that keeps a window of deliveries in flight and checks at the end
  that no message vanished or was duplicated (the fault tests' message audit).
* :func:`stream_across_a_kill`: ids sent as fast as credit allows (RELEASED / MODIFIED ones again), with
  a fault injected once enough arrived (edge failover: tests/system/test_edge_failover.py and
  benchmarks/edge_bench.py).
* :class:`EchoServer`: an RPC server on the test client (answers each request's ``reply_to``).
* :func:`outcome_counts`, :func:`qd_keys`: summaries of trackers and of received annotations.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.clients import (
    ACCEPTED,
    MODIFIED,
    REJECTED,
    RELEASED,
    Client,
    ReceiverLink,
    SenderLink,
    Tracker,
    make_message,
    outcome_name,
)
from tests.support.waiting import DEFAULT_TIMEOUT, pump, wait_for

QD_PREFIX = "x-opt-qd."


def send_paced(sender: SenderLink, receivers: list[ReceiverLink], n: int, body_prefix: str = "m",
               timeout: float = DEFAULT_TIMEOUT) -> list[Tracker]:
    """Send ``n`` unsettled messages one at a time: each only after the previous one has reached a
    receiver and, if that receiver settles on its own (auto_accept), after its outcome is back at the
    producer.  Distribution decisions are then taken with all earlier outcomes known."""
    trackers = []
    for i in range(n):
        before = sum(len(r.received) for r in receivers)
        sender.wait_credit(1, timeout)
        tr = sender.send(f"{body_prefix}{i}")
        trackers.append(tr)
        wait_for(lambda b=before: sum(len(r.received) for r in receivers) > b, timeout,
                 f"message {i} at one of the receivers")
        owner = next(r for r in receivers if r.received and r.received[-1].body == f"{body_prefix}{i}")
        if owner.auto_accept:
            tr.wait(timeout)
    return trackers


@dataclass
class KilledStream:
    """What :func:`stream_across_a_kill` saw: each id's outcomes in order, the attempts, when the fault
    was injected (monotonic time, None if never), whether every id was settled before the deadline, and
    the stream's state at its end (for a failure message)."""

    per_id: dict[int, list[Any]] = field(default_factory=dict)
    attempts: int = 0
    killed: float | None = None
    done: bool = False
    where: str = ""


def stream_across_a_kill(sender: SenderLink, receiver: ReceiverLink, kill: Callable[[], None], total: int,
                         kill_after: int, deadline: float) -> KilledStream:
    """Send ids ``0..total-1`` (body ``payload-ID``, application property ``mid``) from ``sender`` as
    credit allows, sending each RELEASED or MODIFIED attempt again; call ``kill()`` once, in a turn that
    sent something, after ``receiver`` has ``kill_after`` messages. Ends when every id has been settled
    and none waits to be sent again, or after ``deadline`` s (``done`` False)."""
    out = KilledStream()
    pending: dict[object, tuple[int, Tracker]] = {}
    resend: deque[int] = deque()
    nxt = 0
    start = time.monotonic()
    while True:
        for tag, (mid, tr) in list(pending.items()):
            if tr.settled:
                del pending[tag]
                out.per_id.setdefault(mid, []).append(tr.state)
                if tr.state in (RELEASED, MODIFIED):
                    resend.append(mid)
        sent_now = 0
        while sender.credit - sender.queued > 0 and (resend or nxt < total):
            if resend:
                mid = resend.popleft()
            else:
                mid, nxt = nxt, nxt + 1
            tr = sender.send(make_message(f"payload-{mid}", properties={"mid": mid}))
            out.attempts += 1
            pending[tr.tag] = (mid, tr)
            sent_now += 1
        if out.killed is None and len(receiver.received) >= kill_after and sent_now:
            pump(0.0)
            kill()
            out.killed = time.monotonic()
        out.where = (f"{nxt}/{total} ids, {len(pending)} pending, {len(resend)} to resend, credit "
                     f"{sender.credit}, received {len(receiver.received)}")
        if nxt == total and not resend and not pending:
            out.done = True
            return out
        if time.monotonic() - start > deadline:
            return out
        pump(0.02)


def qd_keys(message) -> list[str]:
    """The ``x-opt-qd.*`` keys of a received message's message-annotations."""
    ann = message.annotations or {}
    return [str(k) for k in ann if str(k).startswith(QD_PREFIX)]


def outcome_counts(trackers: Iterable[Tracker]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in trackers:
        key = t.outcome if t.settled else "unsettled"
        counts[key] = counts.get(key, 0) + 1
    return counts


class EchoServer:
    """An RPC server: consumes ``address``, answers each request's ``reply_to`` through an anonymous
    sender (target None) with ``correlation_id`` = the request's id, then accepts the request.
    ``poll()`` must be called while waiting (it is cheap); it returns True."""

    def __init__(self, client: Client, address: str, name: str, credit: int = 10):
        self.name = name
        self.rx: ReceiverLink = client.receiver(address, credit_window=credit, auto_accept=False)
        self.tx: SenderLink = client.sender(None)
        self.replies: list[Tracker] = []
        self._done = 0

    def poll(self) -> bool:
        for rec in self.rx.received[self._done:]:
            m = rec.message
            reply = make_message(f"{self.name}:{m.body}", address=m.reply_to, correlation_id=m.id)
            self.replies.append(self.tx.send(reply))
            rec.accept()
        self._done = len(self.rx.received)
        return True

    @property
    def calls(self) -> int:
        return len(self.rx.received)


class AuditStream:
    """A producer that keeps up to ``window`` deliveries in flight and records every attempt, for the
    message audit of the fault tests: every message was accepted by a consumer or came back to the
    producer RELEASED / MODIFIED / REJECTED; none vanished, none was duplicated by the mesh.

    Message ``mid`` (0, 1, ...) carries the application property ``mid`` and the body
    ``f"{tag}-{mid}"`` (followed by ``pad`` dots). With ``resend`` a RELEASED or MODIFIED attempt is
    sent again (as the router's RPC clients do), so in the end every message is accepted exactly
    once. ``rate`` (msg/s) paces new messages. Call :meth:`poll` while pumping
    (``wait_until(stream.poll_until_done, ...)``)."""

    def __init__(self, sender: SenderLink, receivers: Sequence[ReceiverLink], *, total: int | None = None,
                 window: int = 50, resend: bool = True, rate: float | None = None, tag: str = "m",
                 pad: int = 0):
        self.sender = sender
        self.receivers = list(receivers)
        self.total = total
        self.window = window
        self.resend = resend
        self.rate = rate
        self.tag = tag
        self.pad = "." * pad
        self.sending = True
        self.next_id = 0
        self.attempts = 0
        self.per_id: dict[int, list[int | None]] = {}
        self.pending: dict[str, tuple[int, Tracker]] = {}
        self.to_resend: list[int] = []
        self.modified_without_failed = 0
        self.started = time.monotonic()

    # ---- producing
    def poll(self) -> bool:
        """Collect settled attempts, send what the window and the pace allow; returns True."""
        for tag, (mid, tr) in list(self.pending.items()):
            if tr.settled:
                del self.pending[tag]
                self.per_id[mid].append(tr.state)
                if tr.state == MODIFIED and not tr.failed:
                    self.modified_without_failed += 1
                if self.resend and tr.state in (RELEASED, MODIFIED):
                    self.to_resend.append(mid)
        s = self.sender
        if s.client.closed or s.remote_closed:
            return True
        while len(self.pending) < self.window and s.credit - s.queued > 0:
            if self.to_resend:
                mid = self.to_resend.pop(0)
            elif self.sending and (self.total is None or self.next_id < self.total) and self._pace_ok():
                mid, self.next_id = self.next_id, self.next_id + 1
                self.per_id[mid] = []
            else:
                break
            tr = s.send(make_message(self.body(mid), id=f"{self.tag}-{mid}", properties={"mid": mid}))
            self.attempts += 1
            self.pending[tr.tag] = (mid, tr)
        return True

    def body(self, mid: int) -> str:
        return f"{self.tag}-{mid}{self.pad}"

    def _pace_ok(self) -> bool:
        if self.rate is None:
            return True
        return self.next_id < (time.monotonic() - self.started) * self.rate + 1

    def stop(self) -> None:
        """Send no new messages (resends still go)."""
        self.sending = False

    @property
    def finished(self) -> bool:
        """Nothing in flight, nothing to resend, and every message sent (``total``) or sending stopped."""
        all_sent = not self.sending or (self.total is not None and self.next_id >= self.total)
        return all_sent and not self.pending and not self.to_resend

    def poll_until_done(self) -> bool:
        self.poll()
        return self.finished

    # ---- the audit
    def outcomes(self) -> Counter:
        return Counter(outcome_name(st) for states in self.per_id.values() for st in states)

    def received_ids(self) -> Counter:
        return Counter(rec.message.properties["mid"] for r in self.receivers for rec in r.received
                       if rec.message is not None and (rec.message.properties or {}).get("mid") is not None
                       and rec.body == self.body(rec.message.properties["mid"]))

    def summary(self) -> str:
        return (f"{self.next_id} messages in {self.attempts} attempts, outcomes {dict(self.outcomes())}, "
                f"{len(self.pending)} in flight, {len(self.to_resend)} to resend, "
                f"{sum(self.received_ids().values())} received")

    def audit(self, *, in_order: bool = False, only_accepted: bool = False) -> str:
        """Check the audit (see the class doc); ``in_order``: one consumer got the messages in the order
        sent; ``only_accepted``: no attempt may have failed. Returns a one-line summary."""
        assert not self.pending, f"{len(self.pending)} attempts never settled: {self.summary()}"
        assert self.modified_without_failed == 0, \
            f"{self.modified_without_failed} MODIFIED outcomes without delivery-failed"
        names = {ACCEPTED, RELEASED, MODIFIED, REJECTED}
        odd = {mid: st for mid, st in self.per_id.items() if any(x not in names for x in st)}
        assert not odd, f"attempts settled without an outcome: {dict(list(odd.items())[:10])}"
        got = self.received_ids()
        lost, dup = [], []
        for mid, states in self.per_id.items():
            accepted = states.count(ACCEPTED)
            assert accepted <= 1, f"message {mid} accepted {accepted} times: {states}"
            if self.resend:
                assert accepted == 1 or states[-1] == REJECTED, \
                    f"message {mid} never accepted: {[outcome_name(x) for x in states]}"
            if accepted and not got[mid]:
                lost.append(mid)
            # a consumer may see a message again only after an attempt came back MODIFIED: it was on
            # the wire when a node or connection went, and its acceptance was lost with it
            if got[mid] > accepted + states.count(MODIFIED):
                dup.append((mid, got[mid], [outcome_name(x) for x in states]))
        assert not lost, f"accepted at the producer but never received: {lost[:20]}"
        assert not dup, f"received more often than the producer's outcomes allow: {dup[:10]}"
        unknown = sorted(set(got) - set(self.per_id))
        assert not unknown, f"received messages never sent: {unknown[:10]}"
        if only_accepted:
            bad = {mid: [outcome_name(x) for x in st] for mid, st in self.per_id.items() if st != [ACCEPTED]}
            assert not bad, f"attempts that did not end ACCEPTED at once: {dict(list(bad.items())[:10])}"
        if in_order:
            assert len(self.receivers) == 1
            seq = [rec.message.properties["mid"] for rec in self.receivers[0].received
                   if rec.message is not None]
            assert seq == sorted(seq) and len(seq) == len(set(seq)), \
                f"out of order or repeated at the consumer: first problem near {_first_disorder(seq)}"
        return self.summary()


def _first_disorder(seq: list[int]) -> list[int]:
    for i in range(1, len(seq)):
        if seq[i] <= seq[i - 1]:
            return seq[max(0, i - 3):i + 3]
    return []
