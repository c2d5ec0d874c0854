"""Reply demultiplexing: every call waits on a :class:`Waiter` filed under its request's message-id; a
reply goes to the waiter whose id equals the reply's correlation-id.

The seed (``004_``, "addressing") uses one reply address per connection: each call message gets a unique
message-id, the server copies it into the reply, and incoming replies are dispatched to the right waiter
by it. :class:`PendingCalls` is that table. It is thread-safe: caller threads add and remove waiters,
the event-loop thread resolves them.
"""

from __future__ import annotations

import _thread
import itertools
import threading
import uuid
from typing import Any


class Waiter:
    """A one-shot result for one caller thread: the first :meth:`set_result` or :meth:`set_exception`
    wins, later ones are ignored.

    Built on one bare lock, held from creation until completion (waiting is acquiring it), which costs a
    fraction of a ``threading.Event`` (a Python ``Condition`` and two more locks per call).
    """

    __slots__ = ("key", "_gate", "_done", "_result", "_exception")

    _completing = threading.Lock()      # makes "first completion wins" atomic; held for a few bytecodes

    def __init__(self, key: Any = None) -> None:
        self.key = key
        self._gate = _thread.allocate_lock()
        self._gate.acquire()
        self._done = False
        self._result: Any = None
        self._exception: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done

    def _complete(self, value: Any, exc: BaseException | None) -> bool:
        with Waiter._completing:
            if self._done:
                return False
            self._result = value
            self._exception = exc
            self._done = True
        self._gate.release()
        return True

    def set_result(self, value: Any) -> bool:
        """Complete with a value; False if already complete."""
        return self._complete(value, None)

    def set_exception(self, exc: BaseException) -> bool:
        """Complete with an error; False if already complete."""
        return self._complete(None, exc)

    def wait(self, timeout: float | None) -> bool:
        """Block until complete or ``timeout`` s passed; True if complete."""
        if self._done:
            return True
        gate = self._gate
        if gate.acquire(True, -1 if timeout is None else max(0.0, timeout)):
            gate.release()              # open for good: another wait returns at once
            return True
        return self._done

    def result(self) -> Any:
        """The value, or raise the error (only once complete)."""
        if not self._done:
            raise RuntimeError("waiter not complete")
        if self._exception is not None:
            raise self._exception
        return self._result


class MessageIds:
    """Unique message-ids for one client: ``<random prefix>:<counter>`` (thread-safe)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or uuid.uuid4().hex[:16]
        self._counter = itertools.count(1)   # next() on itertools.count is atomic in CPython

    def next(self) -> str:
        return f"{self.prefix}:{next(self._counter)}"


class PendingCalls:
    """Waiters by request message-id (= the reply's correlation-id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[Any, Waiter] = {}
        self.late_replies = 0       # replies for ids nobody waits for (timed out, or duplicates)

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiters)

    def add(self, message_id: Any) -> Waiter:
        """File a new waiter under ``message_id``."""
        waiter = Waiter(message_id)
        with self._lock:
            if message_id in self._waiters:
                raise KeyError(f"message-id {message_id!r} already pending")
            self._waiters[message_id] = waiter
        return waiter

    def get(self, message_id: Any) -> Waiter | None:
        with self._lock:
            return self._waiters.get(message_id)

    def discard(self, message_id: Any) -> None:
        """Forget a waiter (the caller gave up or got its answer)."""
        with self._lock:
            self._waiters.pop(message_id, None)

    def resolve(self, correlation_id: Any, value: Any) -> bool:
        """Complete the waiter for ``correlation_id`` with ``value`` and forget it. False (and counted
        as a late reply) if no call waits for that id."""
        with self._lock:
            waiter = self._waiters.pop(correlation_id, None)
            if waiter is None:
                self.late_replies += 1
                return False
        return waiter.set_result(value)

    def fail(self, message_id: Any, exc: BaseException) -> bool:
        """Complete the waiter for ``message_id`` with an error and forget it."""
        with self._lock:
            waiter = self._waiters.pop(message_id, None)
        return waiter is not None and waiter.set_exception(exc)

    def fail_all(self, exc: BaseException) -> int:
        """Fail every pending waiter (connection lost); how many there were."""
        with self._lock:
            waiters = list(self._waiters.values())
            self._waiters.clear()
        for w in waiters:
            w.set_exception(exc)
        return len(waiters)
