"""The driver's event-loop thread: operations, their deadlines, subscriptions and failover.

One :class:`Controller` per driver (per transport): one router.rpc :class:`~router.rpc.loop.EventLoop`
thread owns Proton; oslo's threads hand it operations (:meth:`Controller.call`, :meth:`Controller.send`,
subscriptions, settlements) and block on a :class:`~router.rpc.demux.Waiter`. The loop runs a caller's
operation on the caller's own thread when it is idle (``call_soon``), which saves two thread switches per
request.

Connection and failover (as 14.x): the first host of the URL first; when the connection fails or is lost,
the next host after ``connection_retry_interval`` s, growing by ``connection_retry_backoff`` up to
``connection_retry_interval_max``. Every subscription is opened again on the new connection. What was lost
with the connection:

- a message never sent waits for the next connection (within its deadline and ``retry``);
- a message sent but not yet settled, and a call whose request was sent: the reply address died with the
  connection, so the call fails at once with ``MessageDeliveryFailure`` (it may have run; it is not sent
  again, at-most-once as 14.x) instead of waiting for its timeout;
- authentication refused by every host: waiting and new operations fail at once with
  :class:`AuthenticationFailure`, naming the hosts and users (reconnecting goes on).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from oslo_messaging import exceptions
from proton import Message

from router.rpc.demux import Waiter
from router.rpc.errors import RpcConnectionError, RpcException, RpcTimeout
from router.rpc.loop import EventLoop, Timer
from router.rpc.sending import SendOp
from router.rpc.wire import ACCEPTED, RELEASED

from . import layout
from .addressing import Dest, Prefixes
from .hosts import Hosts
from .session import Session, Subscription, Token
from .wire import ConnectSettings

log = logging.getLogger(__name__)

SAFETY = 2.0          # seconds a caller waits past its deadline for the loop's verdict


class AuthenticationFailure(exceptions.MessageDeliveryFailure):
    """Every host of the transport URL refused our credentials."""


class Failure(exceptions.MessageDeliveryFailure):
    """A message could not be delivered (refused link, rejected, connection lost after sending)."""


@dataclass(eq=False)
class Op:
    """One message to send (and, for a call, its reply to wait for)."""

    dest: Dest | str                 # a Dest resolved by the session's addresser, or a literal address
    message: Message
    deadline: float
    presettled: bool
    label: str
    timed_out: type[Exception]       # what a deadline raises (MessagingTimeout or MessageDeliveryFailure)
    retry: int | None = None         # reconnects it may wait for (None: any)
    call: bool = False
    monitor: float | None = None
    waiter: Waiter = field(default_factory=Waiter)
    msg_id: str | None = None
    session: Session | None = None
    sendop: SendOp | None = None
    address: str | None = None
    timer: Timer | None = None
    monitor_timer: Timer | None = None
    finished: bool = False
    ack: bool = True                 # wait for the outcome (else done once on the wire; outcome logged)
    background: bool = False         # nobody waits for it: a failure is logged


class Controller:
    """Owns the loop thread, the current :class:`Session` and everything waiting for one."""

    def __init__(self, hosts: Hosts, settings: ConnectSettings, opts: Any, exchange: str | None,
                 prefixes: Prefixes, name: str = "oslo-amqp") -> None:
        self.hosts = hosts
        self.settings = settings
        self.opts = opts
        self.exchange = exchange
        self.prefixes = prefixes
        self.vhost = hosts.virtual_host
        self.reply_credit = opts.reply_link_credit
        self.max_links = 256
        self.loop = EventLoop(name=name)
        self.loop.on_end = self._on_end
        self.session: Session | None = None
        self.waiting: deque[Op] = deque()        # ops waiting for a ready session
        self.calls: dict[str, Op] = {}           # msg-id -> call waiting for its reply
        self.subs: list[Subscription] = []
        self.closing = False
        self.delay = float(opts.connection_retry_interval)
        self.auth_failures = 0                   # consecutive refusals of our credentials
        self.auth_error: str | None = None
        self.connected = threading.Event()
        self._reconnect: Timer | None = None
        self._purge: Timer | None = None
        self._container = opts.container_name or f"{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    # ---- lifecycle (any thread)
    def start(self) -> None:
        self.loop.start()
        self.loop.submit(self._connect)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Close the connection politely and end the loop; everything pending fails."""
        self.loop.stop(self._shutdown, timeout=timeout)

    def _shutdown(self) -> None:
        self.closing = True
        err = exceptions.MessageDeliveryFailure("the transport was cleaned up")
        self._fail_all(err)
        if self._reconnect is not None:
            self._reconnect.cancel()
        if self.session is not None and not self.session.dead:
            if self.session.wire.close():
                return                       # the loop ends once the router answers (or after 2 s)
        self.loop.halt()

    def _on_end(self) -> None:
        self._fail_all(exceptions.MessageDeliveryFailure("the transport was cleaned up"))
        if self.session is not None:
            self.session.wire.free()

    # ---- connecting (loop thread)
    def _connect(self) -> None:
        self._reconnect = None
        if self.closing:
            return
        old = self.session
        if old is not None and not old.wire.closed:
            old.wire.free()
        host = self.hosts.current
        s = Session(self, host, self.settings, self._container)
        self.session = s
        try:
            s.open()
        except (OSError, ValueError) as exc:
            s.lost(f"cannot connect: {exc}")

    def on_ready(self, s: Session, props: dict[str, Any]) -> None:
        if s is not self.session:
            return
        log.info("oslo amqp: connected to %s (%s, %s addresses)", s.host, props.get("product", "?"),
                 "routable" if s.addresser and s.addresser.routable else "legacy")
        self.delay = float(self.opts.connection_retry_interval)
        self.auth_failures, self.auth_error = 0, None
        self.connected.set()
        for sub in self.subs:
            if sub.active:
                s.subscribe(sub)
        waiting, self.waiting = self.waiting, deque()
        for op in waiting:
            if not op.finished:
                self._dispatch(op, s)
        if self._purge is None:
            self._purge = self.loop.call_later(self.opts.default_sender_link_timeout, self._purge_links)

    def on_lost(self, s: Session, why: str) -> None:
        """``s``'s connection failed or was lost: fail what died with it, reconnect to the next host."""
        if s is not self.session:
            return
        self.connected.clear()
        was_ready = s.ready
        failure = s.wire.failure
        if self.closing:
            self.loop.halt()
            return
        auth = "unauthorized-access" in failure or "Authentication failed" in failure
        if auth and not was_ready:
            self.auth_failures += 1
            user = s.host.username or "anonymous"
            log.error("oslo amqp: authentication failed at %s as %s: %s", s.host, user, failure)
            if self.auth_failures >= len(self.hosts.entries):
                self.auth_error = ("authentication failed at " + ", ".join(
                    f"{h} as {h.username or 'anonymous'}" for h in self.hosts.entries) + f" ({failure})")
                err = AuthenticationFailure(self.auth_error)
                for op in list(self.waiting):
                    self._finish(op, err)
                self.waiting.clear()
        else:
            self.auth_failures = 0
            log.warning("oslo amqp: connection to %s %s: %s", s.host, "lost" if was_ready else "failed", why)
        # what was on the wire died with the connection
        lost = exceptions.MessageDeliveryFailure(f"connection to {s.host} lost: {why}")
        for op in [op for op in self.calls.values() if op.session is s and op.sendop is not None
                   and op.sendop.attempts > 0]:
            self._finish(op, exceptions.MessageDeliveryFailure(
                f"{op.label} to {op.address}: connection to {s.host} lost after the request was sent "
                f"(it may have been processed; not sent again): {why}"))
        s.outbox.fail_all(RpcConnectionError(str(lost)))
        self.session = s        # kept until the next attempt frees it
        delay = self.delay
        self.delay = min(self.delay + self.opts.connection_retry_backoff,
                         float(self.opts.connection_retry_interval_max))
        nxt = self.hosts.next()
        log.info("oslo amqp: next attempt in %g s to %s", delay, nxt)
        self._reconnect = self.loop.call_later(delay, self._connect)

    # ---- operations (any thread)
    def run(self, op: Op) -> Any:
        """Start ``op`` and block until it is over; its result (a reply message for a call)."""
        if not self.loop.call_soon(lambda: self._start(op)):
            raise exceptions.MessageDeliveryFailure("the transport was cleaned up")
        if not op.waiter.wait(max(0.0, op.deadline - time.monotonic()) + SAFETY):
            op.waiter.set_exception(op.timed_out(f"{op.label} to {op.dest}: no answer from the event loop"))
        return op.waiter.result()

    def post(self, op: Op) -> bool:
        """Start ``op`` without waiting for it (any thread); False if the transport is closed."""
        return self.loop.call_soon(lambda: self._start(op))

    def _start(self, op: Op) -> None:
        now = time.monotonic()
        if self.auth_error is not None:
            self._finish(op, AuthenticationFailure(self.auth_error))
            return
        op.timer = self.loop.call_later(op.deadline - now, lambda: self._expire(op))
        if op.monitor:
            op.monitor_timer = self.loop.call_later(op.monitor, lambda: self._monitor_expired(op))
        s = self.session
        if s is not None and s.ready and not s.dead:
            self._dispatch(op, s)
        else:
            self.waiting.append(op)

    def _dispatch(self, op: Op, s: Session) -> None:
        address = op.dest if isinstance(op.dest, str) else s.addresser.resolve(op.dest)
        op.address = address
        op.session = s
        msg = op.message
        msg.address = address
        if op.call:
            if op.msg_id is not None:
                self.calls.pop(op.msg_id, None)
            op.msg_id = uuid.uuid4().hex
            msg.id = op.msg_id
            msg.reply_to = s.reply_to
            self.calls[op.msg_id] = op
        s.used.add(address)
        op.sendop = SendOp(msg.encode(), address, op.deadline, on_done=lambda so, e: self._sent(op, so, e),
                           label=f"{op.label} to {address}", presettled=op.presettled,
                           on_sent=None if op.ack else lambda so: self._finish(op, None))
        s.outbox.send(op.sendop)

    def _sent(self, op: Op, so: SendOp, error: RpcException | None) -> None:
        if so is not op.sendop:
            return
        if op.finished:
            if error is not None and not op.ack:
                log.error("oslo amqp: %s to %s was sent but not delivered: %s", op.label, op.address, error)
            return
        if error is None:
            if not op.call:
                self._finish(op, None)
            return                                  # a call now waits for its reply
        if isinstance(error, RpcConnectionError):
            if so.attempts == 0:                    # never on the wire: wait for the next connection
                if op.retry is not None:
                    op.retry -= 1
                    if op.retry < 0:
                        self._finish(op, exceptions.MessageDeliveryFailure(
                            f"{op.label} to {op.address}: connection lost and no retries left: {error}"))
                        return
                op.sendop = None
                self.waiting.append(op)
                return
            if not op.call:
                self._finish(op, Failure(f"{op.label} to {op.address}: {error} (sent, not acknowledged)"))
            return                                   # sent calls: failed by on_lost
        if isinstance(error, RpcTimeout):
            self._expire(op)
            return
        cond = getattr(error, "condition", None)
        self._finish(op, Failure(f"{op.label} to {op.address} failed: {error}"
                                 + (f" [{cond}]" if cond and cond not in str(error) else "")))

    def _expire(self, op: Op) -> None:
        if op.finished:
            return
        if op.sendop is not None and op.session is not None and not op.session.dead:
            op.session.outbox.forget(op.sendop)      # never sent later
        state = "no reply" if op.call and op.sendop is not None and op.sendop.attempts else \
            "not sent (no server or listener reachable)" if op.session else "not connected"
        self._finish(op, op.timed_out(f"{op.label} to {op.address or op.dest}: {state} within the timeout"))

    def _monitor_expired(self, op: Op) -> None:
        op.monitor_timer = None
        if not op.finished:
            if op.sendop is not None and op.session is not None and not op.session.dead:
                op.session.outbox.forget(op.sendop)
            self._finish(op, exceptions.MessagingTimeout(
                f"{op.label} to {op.address or op.dest}: call monitor timed out ({op.monitor:g} s without a "
                "heartbeat)"))

    def on_reply(self, msg: Message) -> bool:
        """A message on the reply receiver: a heartbeat or the reply of a call. False if no call waits."""
        op = self.calls.get(msg.correlation_id)
        if op is None or op.finished:
            return False
        if layout.is_heartbeat(msg):
            if op.monitor_timer is not None:
                op.monitor_timer.cancel()
                op.monitor_timer = self.loop.call_later(op.monitor, lambda: self._monitor_expired(op))
            return True
        self._finish(op, None, msg)
        return True

    def _finish(self, op: Op, error: Exception | None, result: Any = None) -> None:
        if op.finished:
            return
        op.finished = True
        for t in (op.timer, op.monitor_timer):
            if t is not None:
                t.cancel()
        op.timer = op.monitor_timer = None
        if op.msg_id is not None:
            self.calls.pop(op.msg_id, None)
        if error is not None:
            if op.background:
                log.warning("oslo amqp: %s not delivered: %s", op.label, error)
            op.waiter.set_exception(error)
        else:
            self.loop.defer(op.waiter.set_result, result)

    def _fail_all(self, error: Exception) -> None:
        for op in list(self.waiting) + list(self.calls.values()):
            self._finish(op, error)
        self.waiting.clear()
        self.calls.clear()
        if self.session is not None:
            self.session.outbox.fail_all(RpcConnectionError(str(error)))

    def _purge_links(self) -> None:
        """Close sender links unused for ``default_sender_link_timeout`` s."""
        self._purge = None
        s = self.session
        if self.closing:
            return
        if s is not None and s.ready and not s.dead:
            s.outbox.close_idle(s.used)
            s.used = set()
        self._purge = self.loop.call_later(self.opts.default_sender_link_timeout, self._purge_links)

    # ---- subscriptions (any thread)
    def subscribe(self, sub: Subscription, wait: float) -> None:
        """Open ``sub`` (now if connected, on every connection from now on). Waits up to ``wait`` s for
        its links to be attached; raises ``MessagingException`` naming the address the router refused."""
        deadline = time.monotonic() + wait
        self.loop.run_sync(lambda: self._subscribe(sub), timeout=10)
        if not self.connected.wait(wait):
            return                  # not connected yet: the links are opened once it is
        want = self.loop.run_sync(lambda: len(sub.addresses(self.session.addresser))
                                  if self.session is not None and self.session.ready else 0)
        with sub.changed:
            while True:
                if sub.refused:
                    addr, why = next(iter(sub.refused.items()))
                    raise exceptions.MessagingException(f"the router refused a subscription to {addr}: {why}")
                if len(sub.attached) >= want:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                sub.changed.wait(left)

    def _subscribe(self, sub: Subscription) -> None:
        self.subs.append(sub)
        s = self.session
        if s is not None and s.ready and not s.dead:
            s.subscribe(sub)

    def on_subscribed(self, sub: Subscription, address: str, refused: str | None) -> None:
        """The router attached (``refused`` None) or closed one of ``sub``'s links (loop thread)."""
        with sub.changed:
            if refused is None:
                sub.attached.add(address)
                sub.refused.pop(address, None)
            else:
                sub.attached.discard(address)
                sub.refused[address] = refused
            sub.changed.notify_all()
        if refused is not None and sub.active:
            log.error("oslo amqp: the router closed the subscription to %s: %s (again in %d s)", address,
                      refused, self.opts.link_retry_delay)
            s = self.session
            self.loop.call_later(self.opts.link_retry_delay, lambda: self._resubscribe(sub, address, s))

    def _resubscribe(self, sub: Subscription, address: str, s: Session | None) -> None:
        if not sub.active or s is not self.session or s is None or s.dead or not s.ready:
            return
        if any(rx.sub is sub and rx.address == address for rx in s.receivers.values()):
            return
        s.subscribe(sub, only=address)

    def stop_subscription(self, sub: Subscription) -> None:
        """No more messages for ``sub`` (its listener stopped polling)."""
        def stop() -> None:
            if self.session is not None and not self.session.dead:
                self.session.freeze(sub)
        self.loop.submit(stop)

    def unsubscribe(self, sub: Subscription, unsettled: list[Token]) -> None:
        """Close ``sub``'s links; release what its listener took but never handled."""
        def close() -> None:
            sub.active = False
            if sub in self.subs:
                self.subs.remove(sub)
            for t in unsettled:
                t.session.settle(t, RELEASED)
            if self.session is not None and not self.session.dead:
                self.session.unsubscribe(sub)
        try:
            self.loop.run_sync(close, timeout=5)
        except (RuntimeError, TimeoutError):
            pass

    def settle(self, token: Token, accept: bool) -> None:
        """Accept or release a received message (any thread; does not wait)."""
        if token.settled:
            return
        self.loop.call_soon(lambda: token.session.settle(token, ACCEPTED if accept else RELEASED))
