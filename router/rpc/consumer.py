"""A consumer of one address with a credit window and a worker pool: the core of `RpcServer` and
`NotificationListener`.

Each message received is handed to ``process(message)`` in a worker thread (``workers=0``: on the event-loop
thread, which suits only handlers that never block). ``process`` returns the reply to send (a
``proton.Message`` or its encoded bytes, addressed to the request's ``reply_to``) or None, and may raise
:class:`~router.rpc.errors.Requeue`. Back on the loop thread, the reply goes out through the anonymous relay
(with the seed's reply deadline, 10 s: a reply that cannot be delivered by then is logged, never raised), and
only then is the request settled: ACCEPTED, or RELEASED for ``Requeue``. Accepting after the handler ran means
a consumer that dies mid-request leaves the request unsettled, and the router turns it into
MODIFIED(delivery-failed) for the caller instead of a silent loss.

Credit: a :class:`~router.rpc.credit.CreditWindow` of ``credit`` (100), so at most that many requests are
held (running or waiting for a worker) at any time.

Stopping (:meth:`ConsumerCore.begin_stop`): no more credit is granted and the outstanding credit is drained;
requests that arrive meanwhile, and those still waiting for a worker, are RELEASED (they never reached the
application, so their senders re-send them, to another server if there is one); requests already running
finish and are answered while the stop timeout lasts.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proton import Message

from .connection import ConnectionCore
from .credit import CreditWindow
from .errors import Requeue, RpcConnectionError, RpcException
from .sending import SendOp
from .wire import ACCEPTED, REJECTED, RELEASED, Condition, Link, Wire, describe

log = logging.getLogger(__name__)

Process = Callable[[Message], "Message | bytes | None"]


@dataclass(eq=False)
class _Job:
    link: Link
    delivery: Any                   # pn_delivery_t*
    message: Message
    presettled: bool
    cancelled: bool = False       # released by a stop before a worker picked it up


class WorkerPool:
    """``size`` daemon threads running ``fn(arg)`` jobs from one queue, started on the first job.

    Lighter than ``concurrent.futures.ThreadPoolExecutor`` (no future, no work item, no idle semaphore
    per job): a job is one ``SimpleQueue.put`` and wakes one idle thread.
    """

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Callable[[Any], None], Any] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[[Any], None], arg: Any) -> bool:
        """Queue ``fn(arg)``; False once the pool is shut down."""
        if self._closed:
            return False
        if not self._threads:
            self._start()
        self._queue.put((fn, arg))
        return True

    def _start(self) -> None:
        with self._lock:
            if self._threads or self._closed:
                return
            for i in range(self.size):
                t = threading.Thread(target=self._work, name=f"{self.name}_{i}", daemon=True)
                t.start()
                self._threads.append(t)

    def _work(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            fn, arg = item
            try:
                fn(arg)
            except Exception:
                log.exception("%s: job %r failed", self.name, fn)

    def shutdown(self) -> None:
        """Drop the jobs not started and end the threads once their current job is done."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            for _ in self._threads:
                self._queue.put(None)


class ConsumerCore(ConnectionCore):
    """Receives from ``address``, runs ``process`` per message, sends replies, settles."""

    def __init__(self, url: str, address: str, process: Process, credit: int, workers: int,
                 reply_timeout: float, name: str) -> None:
        super().__init__(url, name, max_links=4)
        self.address = address
        self.process = process
        self.credit = CreditWindow(credit, f"{name} receiver {address}")
        self.reply_timeout = reply_timeout
        self.executor = WorkerPool(workers, f"{name}-worker") if workers > 0 else None
        self.receiver: Link | None = None
        self.stopping = False                   # read by worker threads
        self.in_progress = 0                    # loop thread writes; others only read
        self.received = 0
        self.accepted = 0
        self.released = 0
        self.replies_failed = 0
        self._waiting: set[_Job] = set()        # handed to the pool, not started yet
        self._waiting_lock = threading.Lock()

    # ---- links
    def open_links(self, wire: Wire) -> None:
        self.receiver = wire.open_receiver(self.address)

    def on_link_opened(self, link: Link) -> None:
        if self.receiver is not None and link.name == self.receiver.name and link.is_receiver:
            self.credit.open(link)
            self.mark_ready()

    def on_receiver_closed(self, link: Link, condition: Condition | None) -> None:
        if self.receiver is not None and link.name == self.receiver.name:
            why = describe(condition) or "no condition"
            self.lost(f"receiver on {self.address} closed by the router: {why}")

    # ---- messages
    def on_message(self, link: Link, delivery: Any, data: bytes, settled: bool) -> None:
        message = Message()
        try:
            message.decode(data)
        except Exception as exc:          # noqa: BLE001 - not a message: refuse it, never hand it on
            log.warning("%s: undecodable message on %s rejected: %s", self.name, self.address, exc)
            self.credit.on_delivery(link, settled=True)
            if not settled:
                self.wire.settle(delivery, REJECTED)
            return
        job = _Job(link, delivery, message, presettled=settled)
        self.received += 1
        self.credit.on_delivery(link, settled=job.presettled)
        if self.stopping:
            self._settle(job, RELEASED)
            return
        self.in_progress += 1
        if self.executor is None:
            self._complete(job, *self._run(job))
        else:
            with self._waiting_lock:
                self._waiting.add(job)
            self.loop.defer(self._dispatch, job)      # a worker wakes once the engine is released

    def _dispatch(self, job: _Job) -> None:
        """Hand a job to the pool (outside the engine: no Proton here)."""
        assert self.executor is not None
        if not self.executor.submit(self._work, job):
            with self._waiting_lock:
                self._waiting.discard(job)
            if not self.loop.submit(lambda: self._complete(job, RELEASED, None)):
                log.debug("%s: loop stopped, a request not handed to a worker dropped", self.name)

    def _work(self, job: _Job) -> None:
        """Worker thread: run the handler, hand the verdict back to the loop."""
        with self._waiting_lock:
            if job.cancelled:
                return
            self._waiting.discard(job)
        verdict = self._run(job)
        if not self.loop.call_soon(lambda: self._complete(job, *verdict)):
            log.debug("%s: loop stopped, result for a request dropped", self.name)

    def _run(self, job: _Job) -> tuple[int, bytes | None]:
        """The outcome and the encoded reply (if any) for one message; never raises."""
        if self.stopping:
            return RELEASED, None
        try:
            reply = self.process(job.message)
            payload = reply.encode() if isinstance(reply, Message) else reply
            return ACCEPTED, payload
        except Requeue:
            return RELEASED, None
        except Exception:
            log.exception("%s: processing a message from %s failed", self.name, self.address)
            return ACCEPTED, None

    def _complete(self, job: _Job, outcome: int, reply: bytes | None) -> None:
        """Loop thread: send the reply, then settle the request."""
        self.in_progress -= 1
        if reply is not None and self.error is None:
            deadline = time.monotonic() + self.reply_timeout
            self.outbox.send(SendOp(reply, None, deadline, on_done=self._reply_done, label="reply",
                                    key=job.message))
        self._settle(job, outcome)

    def _reply_done(self, op: SendOp, error: RpcException | None) -> None:
        if error is not None:
            self.replies_failed += 1
            log.error("%s: reply to %s: %s", self.name, op.key.reply_to, error)

    def _settle(self, job: _Job, outcome: int) -> None:
        if outcome == RELEASED:
            self.released += 1
        else:
            self.accepted += 1
        if not job.presettled:
            link = job.link
            if link.active:
                self.wire.settle(job.delivery, outcome)
                self.credit.on_settled(link)

    # ---- stopping
    def begin_stop(self) -> None:
        """Loop thread: grant no more credit and drain what is outstanding."""
        self.stopping = True
        self.credit.freeze()
        link = self.receiver
        if link is not None and link.local_active and link.credit > 0:
            link.drain(0)
            self.wire.dirty = True
        with self._waiting_lock:
            not_started = list(self._waiting)
            self._waiting.clear()
            for job in not_started:
                job.cancelled = True
        for job in not_started:
            self._complete(job, RELEASED, None)

    def idle(self) -> bool:
        """Nothing running and every reply settled (loop thread)."""
        return self.in_progress == 0 and self.outbox.unsettled == 0 and self.outbox.queued == 0

    def shutdown(self) -> None:
        super().shutdown()
        if self.executor is not None:
            self.executor.shutdown()

    def stats(self) -> dict[str, object]:
        """Counters (loop thread; from another thread only once the loop has ended)."""
        link = self.receiver if self.loop.in_loop() else None
        return {
            "address": self.address,
            "received": self.received,
            "accepted": self.accepted,
            "released": self.released,
            "in_progress": self.in_progress,
            "replies_sent": self.outbox.sent,
            "replies_failed": self.replies_failed,
            "credit": link.credit if link is not None else 0,
            "credit_blocked": self.credit.blocked,
            "connected": self.error is None,
        }


class Consumer:
    """The thread-facing half shared by `RpcServer` and `NotificationListener`: start, stop, stats."""

    def __init__(self, core: ConsumerCore) -> None:
        self._core = core
        self._loop = core.loop
        self._started = False
        self._stopped = False

    @property
    def address(self) -> str:
        return self._core.address

    @property
    def running(self) -> bool:
        return self._started and not self._stopped and self._core.error is None and self._loop.running

    @property
    def error(self) -> RpcException | None:
        """Why the connection ended, if it did."""
        return None if self._stopped else self._core.error

    def start(self, timeout: float) -> None:
        if self._started:
            return
        self._started = True
        self._core.connect_timeout = timeout                # the TCP connect's own limit
        self._loop.start()
        if not self._core.ready.wait(timeout) or self._core.error is not None:
            why = self._core.error or f"{self._core.url}: not attached to {self.address} within {timeout:g} s"
            self._stop_loop(1.0)
            raise RpcConnectionError(str(why))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop consuming: RELEASE what has not started, give running handlers up to ``timeout`` s to finish
        and be answered, then close the connection. Idempotent."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        deadline = time.monotonic() + timeout
        try:
            self._loop.run_sync(self._core.begin_stop, timeout=max(0.1, timeout))
        except (RuntimeError, TimeoutError):
            pass
        while self._loop.running and time.monotonic() < deadline:
            try:
                if self._loop.run_sync(self._core.idle, timeout=max(0.1, deadline - time.monotonic())):
                    break
            except (RuntimeError, TimeoutError):
                break
            time.sleep(0.01)
        self._stop_loop(max(1.0, deadline - time.monotonic()))

    def _stop_loop(self, timeout: float) -> None:
        self._loop.stop(self._core.shutdown, timeout=timeout)
        if self._core.executor is not None:
            self._core.executor.shutdown()

    def stats(self, timeout: float = 5.0) -> dict[str, object]:
        """Counters of this consumer (for tests and monitoring)."""
        try:
            return self._loop.run_sync(self._core.stats, timeout)
        except RuntimeError:              # stopped: the counters no longer change
            return self._core.stats()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
