"""`RpcClient`: calls, casts, fanout and notifications over one connection, from any number of threads.

Why a loop thread: every caller thread shares one connection, one dynamic reply receiver and one set of
sender links, so something must own Proton and multiplex. An :class:`~router.rpc.loop.EventLoop` in a
background thread does, driving Proton-C directly (:mod:`~router.rpc.wire`): caller threads hand each
request to it (:meth:`~router.rpc.loop.EventLoop.submit`) and block on their own
:class:`~router.rpc.demux.Waiter`; the loop sends when credit allows, reacts to outcomes (re-sending RELEASED
messages after a backoff), routes each reply to its waiter by correlation-id and fires deadlines with its
timers. A blocking API (the caller drives the engine inside its own ``receive``/``send``) could not serve
concurrent callers or deliver outcomes and replies while nobody is inside it.

Per call: the request gets message-id ``<client prefix>:<n>`` and ``reply_to`` = the client's dynamic reply
address, goes out on a sender link whose target is the call's address (credit comes only while a server
exists, so with no server nothing is sent and the call ends in :class:`RpcTimeout`), and waits for the reply
whose correlation-id is that message-id. One deadline covers credit, outcome and reply.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from proton import Message

from . import messages
from .connection import ConnectionCore
from .credit import CreditWindow
from .defaults import CALL_TIMEOUT, CONNECT_TIMEOUT, NOTIFY_TIMEOUT, REPLY_CREDIT
from .demux import MessageIds, PendingCalls, Waiter
from .errors import RpcConnectionError, RpcException, RpcTimeout
from .sending import SendOp
from .wire import ACCEPTED, RELEASED, Condition, Link, Wire, describe

log = logging.getLogger(__name__)

SAFETY = 2.0
"""Seconds a caller thread waits beyond its deadline for the loop's verdict before deciding alone (only
matters when the event loop is starved or stuck)."""


class _ClientCore(ConnectionCore):
    """The client's loop-thread half: the reply receiver and the calls in flight."""

    def __init__(self, url: str, name: str, reply_credit: int, pending: PendingCalls, max_links: int) -> None:
        super().__init__(url, name, max_links=max_links)
        self.credit = CreditWindow(reply_credit, f"{name} reply receiver")
        self.pending = pending
        self.reply_receiver: Link | None = None
        self.reply_to: str | None = None
        self.calls: dict[Any, SendOp] = {}      # message-id -> request op, loop thread only
        self.replies = 0

    def open_links(self, wire: Wire) -> None:
        self.reply_receiver = wire.open_receiver(None, dynamic=True)

    def _is_reply_link(self, link: Link) -> bool:
        return self.reply_receiver is not None and link.name == self.reply_receiver.name and link.is_receiver

    def on_link_opened(self, link: Link) -> None:
        if not self._is_reply_link(link) or self.reply_to is not None:
            return
        address = link.remote_source_address
        if not address:
            self.lost("the router assigned no dynamic reply address")
            return
        self.reply_to = address
        self.credit.open(link)
        self.mark_ready()

    def on_receiver_closed(self, link: Link, condition: Condition | None) -> None:
        if self._is_reply_link(link):
            self.lost(f"reply receiver closed by the router: {describe(condition) or 'no condition'}")

    def on_message(self, link: Link, delivery: Any, data: bytes, settled: bool) -> None:
        if not self._is_reply_link(link):
            self.wire.settle(delivery, RELEASED)
            return
        self.wire.settle(delivery, None if settled else ACCEPTED, lazy=True)
        self.credit.on_delivery(link, settled=True)
        self.replies += 1
        msg = Message()
        try:
            msg.decode(data)
        except Exception as exc:          # noqa: BLE001 - a reply we cannot read matches no call
            log.warning("%s: undecodable reply dropped: %s", self.name, exc)
            return
        cid = msg.correlation_id
        op = self.calls.pop(cid, None)
        if op is not None:
            self.outbox.forget(op)
        self.loop.defer(self._resolve, cid, msg)        # the caller wakes once the engine is released

    def _resolve(self, cid: Any, msg: Message) -> None:
        if not self.pending.resolve(cid, msg):
            log.debug("%s: reply for %r that nobody waits for (late or duplicate)", self.name, cid)

    # ---- operations (loop thread, via EventLoop.submit)
    def start_call(self, message_id: str, target: str, payload: bytes, deadline: float, timeout: float,
                   retry_modified: bool) -> None:
        op = SendOp(payload, target, deadline, on_done=self._request_done, on_deadline=self._reply_deadline,
                    retry_modified=retry_modified, label=f"call to {target}", key=message_id, timeout=timeout)
        self.calls[message_id] = op
        self.outbox.send(op)

    def _request_done(self, op: SendOp, error: RpcException | None) -> None:
        if error is not None:
            self.calls.pop(op.key, None)
            self.pending.fail(op.key, error)

    def _reply_deadline(self, op: SendOp) -> None:
        self.calls.pop(op.key, None)
        outcome = op.last_outcome or "no outcome yet"
        self.pending.fail(op.key, RpcTimeout(f"call to {op.target}: request sent ({outcome}), no reply "
                                             f"within {op.timeout:g} s"))

    def start_send(self, target: str, payload: bytes, deadline: float, timeout: float, retry_modified: bool,
                   waiter: Waiter, label: str) -> None:
        def done(op: SendOp, error: RpcException | None) -> None:
            if error is None:
                self.loop.defer(waiter.set_result, None)
            else:
                waiter.set_exception(error)

        self.outbox.send(SendOp(payload, target, deadline, on_done=done, retry_modified=retry_modified,
                                label=f"{label} to {target}", timeout=timeout))

    def on_lost(self, error: RpcConnectionError) -> None:
        self.calls.clear()
        self.pending.fail_all(error)

    def stats(self) -> dict[str, Any]:
        link = self.reply_receiver
        return {
            "reply_to": self.reply_to,
            "calls_in_flight": len(self.calls),
            "waiting": len(self.pending),
            "queued": self.outbox.queued,
            "unsettled": self.outbox.unsettled,
            "sender_links": self.outbox.links,
            "sent": self.outbox.sent,
            "retries": self.outbox.retries,
            "replies": self.replies,
            "late_replies": self.pending.late_replies,
            "reply_credit": link.credit if link is not None else 0,
            "reply_credit_blocked": self.credit.blocked,
            "connected": self.error is None,
        }


class RpcClient:
    """An RPC client on one AMQP connection to a router node. Thread-safe.

    ``url``: ``amqp://host:port`` of a node. ``timeout``: default seconds for call, cast and fanout (the
    seed's 30 s). ``reply_credit``: credit of the reply receiver (200, topped up at half).
    ``retry_modified``: default for re-sending requests that come back MODIFIED(delivery-failed), i.e.
    at-least-once (False: such a call fails with :class:`RpcUndeliverable`). ``max_links``: sender links kept
    open (one per address used). Raises :class:`RpcConnectionError` if the connection cannot be opened within
    ``connect_timeout`` s. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, url: str, timeout: float = CALL_TIMEOUT, *, reply_credit: int = REPLY_CREDIT,
                 retry_modified: bool = False, connect_timeout: float = CONNECT_TIMEOUT,
                 max_links: int = 64, name: str = "rpc-client") -> None:
        self.url = url
        self.timeout = timeout
        self.retry_modified = retry_modified
        self._pending = PendingCalls()
        self._ids = MessageIds()
        self._core = _ClientCore(url, name, reply_credit, self._pending, max_links)
        self._core.connect_timeout = connect_timeout        # the TCP connect's own limit
        self._loop = self._core.loop
        self._loop.start()
        if not self._core.ready.wait(connect_timeout) or self._core.error is not None:
            why = self._core.error or f"{url}: not connected within {connect_timeout:g} s"
            self._loop.stop(self._core.shutdown, timeout=1.0)
            raise RpcConnectionError(str(why))

    # ---- lifecycle
    def close(self, timeout: float = 5.0) -> None:
        """Close the connection; calls still pending fail with :class:`RpcConnectionError`."""
        self._loop.stop(self._core.shutdown, timeout=timeout)
        self._pending.fail_all(RpcConnectionError(f"{self._core.name}: closed"))

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def reply_to(self) -> str:
        """The dynamic reply address the router assigned to this client."""
        return self._core.reply_to or ""

    @property
    def connected(self) -> bool:
        return self._core.error is None and self._loop.running

    def stats(self, timeout: float = 5.0) -> dict[str, Any]:
        """Counters and gauges of this client (for tests and monitoring)."""
        try:
            return self._loop.run_sync(self._core.stats, timeout)
        except RuntimeError:
            return {"connected": False, "waiting": len(self._pending)}

    # ---- calls
    def call(self, address: str, body: Any, timeout: float | None = None,
             properties: Mapping[str, Any] | None = None, retry_modified: bool | None = None) -> Any:
        """Send ``body`` to ``address`` and return the reply's body.

        Raises :class:`RpcTimeout` (no server, or no reply, within ``timeout``), :class:`RpcError` (the
        handler raised), :class:`RpcUndeliverable` (REJECTED, MODIFIED(delivery-failed), or RELEASED until
        the deadline) or :class:`RpcConnectionError`."""
        return messages.unpack_reply(self.request(address, body, timeout, properties, retry_modified))

    def request(self, address: str, body: Any, timeout: float | None = None,
                properties: Mapping[str, Any] | None = None, retry_modified: bool | None = None) -> Message:
        """Like :meth:`call` but return the whole reply message (application properties included)."""
        timeout = self.timeout if timeout is None else timeout
        retry = self.retry_modified if retry_modified is None else retry_modified
        message_id = self._ids.next()
        payload = messages.encode_request(address, body, message_id, self.reply_to, properties)
        deadline = time.monotonic() + timeout
        waiter = self._pending.add(message_id)
        start = lambda: self._core.start_call(message_id, address, payload, deadline, timeout, retry)  # noqa: E731
        if not self._loop.call_soon(start):
            self._pending.discard(message_id)
            raise self._core.error or RpcConnectionError(f"{self._core.name}: closed")
        if not waiter.wait(timeout + SAFETY):
            self._pending.fail(message_id, RpcTimeout(f"call to {address}: no answer within {timeout:g} s"))
        return waiter.result()

    def cast(self, address: str, body: Any, timeout: float | None = None,
             properties: Mapping[str, Any] | None = None, retry_modified: bool | None = None) -> None:
        """Send ``body`` to ``address`` without a reply; return once a consumer ACCEPTED it (raise
        :class:`RpcTimeout` or :class:`RpcUndeliverable` otherwise)."""
        message_id = self._ids.next()
        payload = messages.encode_request(address, body, message_id, None, properties)
        self._send(address, payload, timeout, retry_modified, "cast")

    def fanout(self, address: str, body: Any, timeout: float | None = None,
               properties: Mapping[str, Any] | None = None) -> None:
        """A cast to a multicast address: every consumer gets a copy. The router settles the message once
        every copy has an outcome and reports the strongest (REJECTED > ACCEPTED > MODIFIED > RELEASED), so
        this returns once at least one consumer accepted and none rejected."""
        message_id = self._ids.next()
        payload = messages.encode_request(address, body, message_id, None, properties)
        self._send(address, payload, timeout, False, "fanout")

    def notify(self, address: str, event_type: str, payload: Any, priority: str = "info",
               timeout: float | None = None, publisher_id: str | None = None,
               properties: Mapping[str, Any] | None = None) -> None:
        """Send a notification (see :mod:`router.rpc.messages` for its layout) and wait for a listener to
        accept it. The mesh stores nothing: with no listener this ends in :class:`RpcTimeout` (default
        timeout: the seed's 30 s)."""
        msg = messages.notification(address, event_type, payload, priority, publisher_id, properties)
        self._send(address, bytes(msg.encode()), NOTIFY_TIMEOUT if timeout is None else timeout, False,
                   "notification")

    def _send(self, address: str, payload: bytes, timeout: float | None, retry_modified: bool | None,
              label: str) -> None:
        timeout = self.timeout if timeout is None else timeout
        retry = self.retry_modified if retry_modified is None else retry_modified
        deadline = time.monotonic() + timeout
        waiter = Waiter()
        start = lambda: self._core.start_send(address, payload, deadline, timeout, retry, waiter, label)  # noqa: E731
        if not self._loop.call_soon(start):
            raise self._core.error or RpcConnectionError(f"{self._core.name}: closed")
        if not waiter.wait(timeout + SAFETY):
            waiter.set_exception(RpcTimeout(f"{label} to {address}: no outcome within {timeout:g} s"))
        waiter.result()
