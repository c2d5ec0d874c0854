"""Waiting without hanging, while every open test client keeps running.

The python-qpid-proton clients of :mod:`tests.support.clients` are single threaded: nothing happens on
them until the test *pumps*. They register here when opened (raw connections of
:mod:`tests.support.raw_amqp` too, so that :func:`close_all` can end them). Every wait below pumps
them, so a test can read link credit, outcomes and received messages directly.

* :func:`wait_for`: pump until a condition holds, at most ``DEFAULT_TIMEOUT`` s (nothing can hang).
* :func:`wait_until`: the same for longer waits (a mesh converging after a fault).
* :func:`assert_stays` / :func:`pump_for`: keep pumping for a while (and check a condition holds).
* :func:`close_all`: close every client still open (fixture teardown).

A wait that times out raises :class:`WaitTimeout` (an AssertionError) saying what was awaited.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

DEFAULT_TIMEOUT = 10.0

What = str | Callable[[], str]


class WaitTimeout(AssertionError):
    """A wait ran out of time."""


class Pumped(Protocol):
    """What :func:`pump` drives of a client (tests.support.clients.Client's I/O methods)."""

    sock: socket.socket
    closed: bool
    transport_closed: bool
    _deadline: float           # when the transport next needs a tick (0: never)
    _want_write: bool          # output is waiting for the socket

    def _may_read(self) -> bool: ...
    def _tick(self, now: float) -> None: ...
    def _read(self) -> None: ...
    def _write(self) -> None: ...
    def _process(self) -> None: ...
    def _check_closed(self) -> None: ...
    def begin_close(self) -> None: ...
    def abort(self) -> None: ...


class Closeable(Protocol):
    def close(self) -> None: ...


_CLIENTS: list[Pumped] = []
_RAWS: list[Closeable] = []


def add_client(client: Pumped) -> None:
    """Pump ``client`` from now on (until it is closed)."""
    _CLIENTS.append(client)


def add_raw(conn: Closeable) -> None:
    """Close ``conn`` in :func:`close_all`."""
    _RAWS.append(conn)


def forget_raw(conn: Closeable) -> None:
    if conn in _RAWS:
        _RAWS.remove(conn)


def pump(timeout: float = 0.05) -> None:
    """One I/O round over all open clients: wait up to ``timeout`` for input, then process it."""
    live = [c for c in _CLIENTS if not c.closed]
    now = time.monotonic()
    for c in live:
        c._tick(now)
        c._write()
    if not live:
        time.sleep(timeout)
        return
    deadlines = [c._deadline for c in live if c._deadline]
    if deadlines:
        timeout = max(0.0, min(timeout, min(deadlines) - now))
    rlist = [c.sock for c in live if c._may_read()]
    wlist = [c.sock for c in live if c._want_write]
    if rlist or wlist:
        r, _w, _ = select.select(rlist, wlist, [], timeout)
    else:
        time.sleep(timeout)
        r = []
    rset = set(r)
    now = time.monotonic()
    for c in live:
        if c.sock in rset:
            c._read()
        c._process()
        c._tick(now)
        c._write()
        c._process()
        c._check_closed()


def describe(what: What) -> str:
    """``what`` as text (a callable is asked only when the text is needed)."""
    return what() if callable(what) else what


def wait_until(pred: Callable[[], Any], timeout: float, what: What = "condition") -> Any:
    """Pump all clients until ``pred()`` is truthy; return its value, or raise WaitTimeout after
    ``timeout`` s. ``what`` (a string, or a callable giving one at failure time) names the wait."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {describe(what)}")
        pump(min(0.05, left))


def wait_for(pred: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT, what: What = "condition") -> Any:
    """:func:`wait_until` with the timeout capped at ``DEFAULT_TIMEOUT`` s."""
    return wait_until(pred, min(timeout, DEFAULT_TIMEOUT), what)


def assert_stays(pred: Callable[[], Any], duration: float, what: What = "condition") -> None:
    """Pump all clients for ``duration`` s and fail as soon as ``pred()`` turns false."""
    deadline = time.monotonic() + duration
    while True:
        if not pred():
            raise AssertionError(f"{describe(what)} no longer holds")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        pump(min(0.05, left))


def pump_for(duration: float) -> None:
    """Keep every client running (heartbeats, dispositions) for ``duration`` s."""
    assert_stays(lambda: True, duration)


def close_all(timeout: float = 2.0) -> None:
    """Close every client and raw connection still open (fixture teardown)."""
    for r in list(_RAWS):
        r.close()
    _RAWS.clear()
    clients = [c for c in _CLIENTS if not c.closed]
    for c in clients:
        c.begin_close()
    try:
        wait_for(lambda: all(c.closed or c.transport_closed for c in clients), timeout, "clients closed")
    except WaitTimeout:
        pass
    for c in clients:
        c.abort()
    _CLIENTS.clear()
