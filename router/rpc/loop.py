"""A lean event loop in a background thread: one selector, a wake-up pipe, a task queue and a timer heap.

Proton's engine objects are not thread-safe: every connection, link and delivery may only be touched from
the thread running the loop. Application threads therefore never call into Proton. They
:meth:`EventLoop.submit` a callable instead; it goes onto a queue and runs on the loop thread, and a byte
is written to the wake-up pipe only when the loop is asleep in ``select`` (a busy loop picks the task up
on its next turn without a system call). Results come back through :class:`~router.rpc.demux.Waiter`
objects. :meth:`EventLoop.call_later` (loop thread only) schedules a callable on a heap of timers.

Each turn of the loop runs the queued tasks, the timers that are due, then ``before_sleep`` (the
connection processes Proton's events and writes its output there), then waits in ``select`` for a
socket, the wake-up pipe or the next timer. This replaces python-qpid-proton's ``Container``, whose
generic event dispatch cost about 0.9 ms of CPU per call on each side (BENCHMARKS.md, "router.rpc").
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from .demux import Waiter

log = logging.getLogger(__name__)

INF = float("inf")
STOP_GRACE = 2.0   # seconds the loop waits for a polite connection close before it stops regardless


class Timer(Protocol):
    """What :meth:`EventLoop.call_later` returns."""

    def cancel(self) -> None: ...


class _Timer:
    """One scheduled call; cancelled timers stay on the heap and are skipped when due."""

    __slots__ = ("when", "fn", "cancelled", "loop")

    def __init__(self, when: float, fn: Callable[[], None], loop: EventLoop) -> None:
        self.when = when
        self.fn = fn
        self.cancelled = False
        self.loop = loop

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.loop._cancelled += 1


class EventLoop:
    """One loop in one daemon thread. :meth:`submit` runs callables from any thread on the loop thread;
    :meth:`stop` runs ``on_stop`` there (which should close the connection), then ends the thread.

    Hooks (set before :meth:`start`, all run on the loop thread): ``on_start`` once at the start,
    ``before_sleep`` on every turn before waiting, ``on_end`` once after the loop ended.
    """

    def __init__(self, name: str = "router-rpc") -> None:
        self.name = name
        self.on_start: Callable[[], None] | None = None
        self.before_sleep: Callable[[], None] | None = None
        self.on_end: Callable[[], None] | None = None
        self.selector = selectors.DefaultSelector()
        self._tasks: deque[Callable[[], Any]] = deque()
        self._timers: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()
        self._cancelled = 0             # cancelled timers still on the heap (compacted when many)
        self._lock = threading.Lock()
        self._closing = False
        self._halted = False
        self._sleeping = False          # the loop is in (or about to enter) select: a task must wake it
        self._woken = False             # a wake-up byte is in the pipe
        # Held by whoever drives the engine: the loop thread, except while it waits in select, when a
        # caller thread may take it to run its task at once (see call_soon)
        self._engine = threading.Lock()
        self._wake_at = INF             # when the sleeping loop will wake up by itself (its next timer)
        self._ended = False
        self._deferred: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []   # see defer()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._finished = threading.Event()
        self.error: BaseException | None = None     # what ended the loop, if it crashed

    # ---- lifecycle
    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        self._engine.acquire()
        try:
            if self.on_start is not None:
                self.on_start()
            self._loop()
        except BaseException as exc:        # noqa: BLE001 - reported through .error, never lost
            self.error = exc
            log.exception("router.rpc: event loop %s crashed", self.name)
        finally:
            with self._lock:
                self._closing = True
            try:
                self._run_leftovers()
                if self.on_end is not None:
                    try:
                        self.on_end()
                    except Exception:
                        log.exception("router.rpc: end of loop %s failed", self.name)
            finally:
                self._ended = True
                deferred, self._deferred = self._deferred, []
                self._engine.release()
                self._run_deferred(deferred)
                self._finished.set()

    def _loop(self) -> None:
        tasks, timers, lock, select = self._tasks, self._timers, self._lock, self.selector.select
        engine = self._engine
        while not self._halted:
            while tasks:
                fn = tasks.popleft()
                try:
                    fn()
                except Exception:       # a failing task must not kill the loop (and every other call)
                    log.exception("router.rpc: task %r failed", fn)
            if timers:
                self._run_timers()
            if self.before_sleep is not None:
                self.before_sleep()
            if self._halted:
                break
            timeout = None
            self._wake_at = INF
            if timers:
                self._wake_at = timers[0][0]
                timeout = max(0.0, self._wake_at - time.monotonic())
            with lock:
                if tasks:
                    timeout = 0.0
                else:
                    self._sleeping = True
            deferred = self._deferred
            if deferred:
                self._deferred = []
            engine.release()                # callers may drive the engine themselves meanwhile
            if deferred:
                self._run_deferred(deferred)
            try:
                events = select(timeout)
            finally:
                engine.acquire()
            with lock:
                self._sleeping = False
                woken, self._woken = self._woken, False
            if woken:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
            for key, mask in events:
                if key.data is not None:
                    key.data(mask)

    def _run_timers(self) -> None:
        timers = self._timers
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            timer = heapq.heappop(timers)[2]
            if timer.cancelled:
                self._cancelled -= 1
                continue
            timer.cancelled = True          # ran: a later cancel() is a no-op
            try:
                timer.fn()
            except Exception:
                log.exception("router.rpc: timer %r failed", timer.fn)

    def _run_leftovers(self) -> None:
        """Tasks submitted after the loop stopped taking them still run (on this thread, now the loop is
        over), so a waiter filed just before the end learns the verdict instead of timing out."""
        while True:
            try:
                fn = self._tasks.popleft()
            except IndexError:
                return
            try:
                fn()
            except Exception:
                log.exception("router.rpc: task %r failed after the loop ended", fn)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._finished.is_set()

    @property
    def closing(self) -> bool:
        return self._closing

    def in_loop(self) -> bool:
        """True when called from the loop thread (or from a thread driving the engine for it)."""
        return threading.current_thread() is self._thread

    def stop(self, on_stop: Callable[[], None] | None = None, timeout: float = 5.0) -> bool:
        """Run ``on_stop`` on the loop (it should close connections), let the loop finish, join the
        thread for up to ``timeout`` s. True if the thread ended. Safe to call more than once and from the
        loop thread itself (then it does not join)."""
        with self._lock:
            if not self._closing:
                self._closing = True
                self._push(lambda: self._shutdown(on_stop))
        if self.in_loop():
            return False
        if self._thread.ident is None:      # never started
            if self.on_end is not None:
                self.on_end()
            self._close_pipe()
            return True
        self._finished.wait(timeout)
        ended = self._finished.is_set()
        if ended:
            self._thread.join(1.0)
            self._close_pipe()
        return ended

    def _close_pipe(self) -> None:
        """Close the wake-up pipe and the selector (once the thread is over)."""
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = -1
        try:
            self.selector.close()
        except Exception:       # noqa: BLE001 - closing twice or after a crash: nothing to do
            pass

    def halt(self) -> None:
        """End the loop once the current turn is over (loop thread only): the connection calls this once
        it is closed, so pending timers do not keep the thread alive."""
        self._halted = True

    def _shutdown(self, on_stop: Callable[[], None] | None) -> None:
        if on_stop is not None:
            try:
                on_stop()
            except Exception:
                log.exception("router.rpc: shutdown of %s failed", self.name)
        # a peer that never answers our close must not keep the thread alive
        self.call_later(STOP_GRACE, self.halt)

    # ---- hand-off
    def _push(self, fn: Callable[[], Any]) -> None:
        """Queue ``fn`` and wake the loop if it sleeps (caller holds the lock)."""
        self._tasks.append(fn)
        if self._sleeping and not self._woken:
            self._woken = True
            try:
                os.write(self._wake_w, b"x")
            except OSError:             # the pipe is gone: the loop has ended, leftovers run the task
                pass

    def submit(self, fn: Callable[[], Any]) -> bool:
        """Run ``fn()`` on the loop thread soon (any thread may call this). False if the loop is
        stopping or stopped, in which case ``fn`` never runs."""
        with self._lock:
            if self._closing:
                return False
            self._push(fn)
        return True

    def call_soon(self, fn: Callable[[], Any]) -> bool:
        """Run ``fn()`` now in this thread if the loop is idle (waiting in ``select``), else hand it to the
        loop like :meth:`submit`. False if the loop is stopping or stopped (``fn`` never runs).

        The direct path saves two thread switches per request (the wake-up of the loop thread and the
        loop's hand-back). It holds the engine lock, so Proton is still driven by one thread at a time;
        ``before_sleep`` runs afterwards (the output is written now) and the loop is woken if ``fn``
        scheduled a timer earlier than the one it sleeps for.
        """
        if self.in_loop():
            fn()
            return True
        if not self._engine.acquire(blocking=False):
            return self.submit(fn)
        try:
            if self._closing or self._ended or not self._sleeping:
                # stopping, or the loop has not reached select yet (a task of ours may still be queued
                # there: keep the order) -> the queue
                return self.submit(fn)
            try:
                fn()
            except Exception:           # as on the loop thread: logged, never raised into the caller
                log.exception("router.rpc: task %r failed", fn)
            finally:
                if self.before_sleep is not None:
                    self.before_sleep()
            timers = self._timers
            if self._halted or (timers and timers[0][0] < self._wake_at):
                with self._lock:
                    if self._sleeping and not self._woken:
                        self._woken = True
                        os.write(self._wake_w, b"x")
            return True
        finally:
            deferred, self._deferred = self._deferred, []
            self._engine.release()
            if deferred:
                self._run_deferred(deferred)

    def defer(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` once the engine is released at the end of this turn (loop thread, or a thread
        on the direct path): for waking other threads. Woken while the engine's thread still runs Python,
        a thread would only wake up again to wait for the GIL; woken just before the loop waits in
        ``select`` (which releases the GIL), it runs at once. ``fn`` must not touch Proton."""
        self._deferred.append((fn, args))

    @staticmethod
    def _run_deferred(deferred: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
        for fn, args in deferred:
            try:
                fn(*args)
            except Exception:
                log.exception("router.rpc: deferred %r failed", fn)

    def run_sync(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``fn()`` on the loop thread and return its result (or raise its exception). Raises
        ``TimeoutError`` if it did not finish in ``timeout`` s, ``RuntimeError`` if the loop is stopped."""
        if self.in_loop():
            return fn()
        waiter = Waiter()

        def task() -> None:
            try:
                waiter.set_result(fn())
            except BaseException as exc:   # noqa: BLE001 - handed to the calling thread
                waiter.set_exception(exc)

        if not self.submit(task):
            raise RuntimeError(f"event loop {self.name} is stopped")
        if not waiter.wait(timeout):
            raise TimeoutError(f"event loop {self.name} did not run the task within {timeout:g} s")
        return waiter.result()

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn()`` on the loop thread after ``delay`` s. Loop thread only. The returned timer has
        ``cancel()``."""
        timer = _Timer(time.monotonic() + max(0.0, delay), fn, self)
        if self._cancelled > 512 and self._cancelled * 2 > len(self._timers):
            # every call leaves its cancelled deadline timer behind: drop them in one pass
            self._timers[:] = [t for t in self._timers if not t[2].cancelled]
            heapq.heapify(self._timers)
            self._cancelled = 0
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer
