"""A python-qpid-proton ``Container`` running in a background thread, and the thread-safe hand-off to it.

Proton's engine objects are not thread-safe: every connection, link and delivery of a container may only
be touched from the thread running it. Application threads therefore never call into Proton. They
:meth:`EventLoop.submit` a callable instead; it travels through a ``proton.reactor.EventInjector`` (a
queue plus a wake-up pipe the container selects on) as an ``ApplicationEvent`` and runs on the loop
thread. Results come back through :class:`~router.rpc.demux.Waiter` objects. ``Container.schedule`` is
not thread-safe (it pushes onto the timer heap without a lock and does not wake the selector), so it is
used only from the loop thread (:meth:`EventLoop.call_later`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from proton import Event, Handler
from proton.reactor import ApplicationEvent, Container, EventInjector

from .demux import Waiter

log = logging.getLogger(__name__)

TASK_EVENT = "router_rpc_task"
STOP_GRACE = 2.0   # seconds the loop waits for a polite connection close before it stops regardless


class Timer(Protocol):
    """What :meth:`EventLoop.call_later` returns (a proton ``Task``)."""

    def cancel(self) -> None: ...


class _TaskRunner(Handler):
    """Runs the callables :meth:`EventLoop.submit` injected, on the loop thread."""

    def on_router_rpc_task(self, event: Event) -> None:
        fn = event.subject
        try:
            fn()
        except Exception:       # a failing task must not kill the loop (and every other call with it)
            log.exception("router.rpc: task %r failed", fn)


class _Timer:
    """A ``Container.schedule`` handler that calls a function."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Event) -> None:
        try:
            self.fn()
        except Exception:
            log.exception("router.rpc: timer %r failed", self.fn)


class EventLoop:
    """One Container in one daemon thread. ``handler`` gets the Proton events; :meth:`submit` runs
    callables from any thread on the loop thread; :meth:`stop` runs ``on_stop`` there (which should close
    the connection), then ends the thread."""

    def __init__(self, handler: Handler, name: str = "router-rpc") -> None:
        self.name = name
        self._injector = EventInjector()
        self.container = Container(handler, _TaskRunner())
        self.container.selectable(self._injector)
        self._lock = threading.Lock()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._finished = threading.Event()
        self.error: BaseException | None = None     # what ended the loop, if it crashed

    # ---- lifecycle
    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self.container.run()
        except BaseException as exc:        # noqa: BLE001 - reported through .error, never lost
            self.error = exc
            log.exception("router.rpc: event loop %s crashed", self.name)
        finally:
            with self._lock:
                self._closing = True
            self._run_leftovers()
            self._finished.set()

    def _run_leftovers(self) -> None:
        """Tasks injected after the container stopped reading the pipe still run (on this thread, now the
        loop is over), so a waiter filed just before the end learns the verdict instead of timing out."""
        while True:
            try:
                event = self._injector.queue.get_nowait()
            except queue.Empty:
                return
            fn = getattr(event, "subject", None)
            if callable(fn):
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
        """True when called from the loop thread."""
        return threading.current_thread() is self._thread

    def stop(self, on_stop: Callable[[], None] | None = None, timeout: float = 5.0) -> bool:
        """Run ``on_stop`` on the loop (it should close connections), let the loop finish, join the
        thread for up to ``timeout`` s. True if the thread ended. Safe to call more than once and from the
        loop thread itself (then it does not join)."""
        with self._lock:
            if not self._closing:
                self._closing = True
                self._injector.trigger(ApplicationEvent(TASK_EVENT, subject=lambda: self._shutdown(on_stop)))
                self._injector.close()
        if self.in_loop():
            return False
        if self._thread.ident is None:      # never started
            self._close_pipe()
            return True
        self._finished.wait(timeout)
        ended = self._finished.is_set()
        if ended:
            self._thread.join(1.0)
            self._close_pipe()
        return ended

    def _close_pipe(self) -> None:
        """Close the injector's wake-up pipe (EventInjector never does)."""
        for fd in self._injector.pipe:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._injector.pipe = (-1, -1)

    def halt(self) -> None:
        """End the loop as soon as the current events are handled (loop thread only): the handler calls
        this once its connection is closed, so pending timers do not keep the thread alive."""
        self.container.stop()

    def _shutdown(self, on_stop: Callable[[], None] | None) -> None:
        if on_stop is not None:
            try:
                on_stop()
            except Exception:
                log.exception("router.rpc: shutdown of %s failed", self.name)
        # a peer that never answers our close must not keep the thread alive
        self.call_later(STOP_GRACE, self.halt)

    # ---- hand-off
    def submit(self, fn: Callable[[], Any]) -> bool:
        """Run ``fn()`` on the loop thread soon (any thread may call this). False if the loop is
        stopping or stopped, in which case ``fn`` never runs."""
        with self._lock:
            if self._closing:
                return False
            self._injector.trigger(ApplicationEvent(TASK_EVENT, subject=fn))
        return True

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
        """Run ``fn()`` on the loop thread after ``delay`` s. Loop thread only. The returned task has
        ``cancel()``."""
        return self.container.schedule(max(0.0, delay), _Timer(fn))
