"""TelemetryWriter: O(1) appends on the node's hot path, formatting and I/O in the background.

``delivery(rec)`` and ``event(rec)`` append a tuple to a list and return; no formatting, no I/O, no lock.
A background thread wakes every ``flush_interval`` seconds (sooner when a list grows long), takes
what has accumulated and hands it to a sink: a child process that formats and writes
(``formatter="process"``, the default: the node's GIL is spent only on ``marshal``), or formatting
in the thread itself (``formatter="thread"``).

Any OSError (unwritable directory, full disk, the child process dying) stops telemetry for good with
one ERROR line on the ``router.telemetry`` logger; the caller never sees an exception and later
calls are no-ops. If the thread falls behind and a list holds ``max_pending`` records, new records
are dropped and counted (one WARNING line).

Call ``delivery``/``event`` from one thread (the node's event loop); ``close()`` from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from router.telemetry.child import ProcessSink
from router.telemetry.config import TelemetryConfig
from router.telemetry.jsonl import JsonlSink, file_prefix
from router.telemetry.schema import DeliveryRecord, EventRecord

log = logging.getLogger("router.telemetry")

_SCALE = 1 << 20  # sampling works in integer steps of 1/_SCALE: exact and deterministic
_KICK_AT = 100_000  # wake the thread early when a list reaches this length


class Sink(Protocol):
    """What the writer thread writes to (JsonlSink or ProcessSink)."""

    def deliveries(self, rows: list[tuple]) -> None: ...
    def events(self, rows: list[tuple]) -> None: ...
    def check(self) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def _take(buf: list) -> list:
    """Remove and return what ``buf`` holds now; appends racing with this stay in ``buf``."""
    n = len(buf)
    chunk = buf[:n]
    del buf[:n]
    return chunk


class TelemetryWriter:
    """Writes a node's telemetry records to ``config.dir`` off the hot path (see the module docstring)."""

    def __init__(self, config: TelemetryConfig, node: str, *, formatter: str = "process",
                 flush_interval: float = 0.5, max_pending: int = 1_000_000) -> None:
        if formatter not in ("process", "thread"):
            raise ValueError(f"formatter must be 'process' or 'thread', not {formatter!r}")
        self.config = config
        self.node = node
        self.formatter = formatter
        self.flush_interval = flush_interval
        self.prefix = file_prefix(node, time.time())
        self._deliveries: list[DeliveryRecord] = []
        self._events: list[EventRecord] = []
        self._max_pending = max(1, max_pending)
        self._kick_at = min(_KICK_AT, max(1, self._max_pending // 2))
        self._sampling = config.sample < 1
        self._step = round(config.sample * _SCALE)
        self._acc = 0
        self._dropped = 0
        self._drop_logged = False
        self._on = True  # False once stopped or closed: the hot path then returns at once
        self.stopped = False  # True after an error stopped telemetry
        self.error: str | None = None
        self._closing = False
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._flush_asked = 0
        self._flush_done = 0
        self._sink: Sink | None = None
        self.thread_cpu = 0.0  # CPU seconds the background thread spent handing records on
        self._thread = threading.Thread(target=self._run, name=f"telemetry-{node}", daemon=True)
        self._thread.start()

    # ---- hot path ------------------------------------------------------------------------------------
    def delivery(self, rec: DeliveryRecord) -> None:
        """Record one settled delivery: ``(address, ingress, hops, in_link, out_link, outcome, size,
        arrival, settled)``. O(1): one list append (after the sampling counter, if sampling)."""
        if self._on:
            if self._sampling:
                acc = self._acc + self._step
                if acc < _SCALE:
                    self._acc = acc
                    return
                self._acc = acc - _SCALE
            buf = self._deliveries
            n = len(buf)
            if n < self._max_pending:
                buf.append(rec)
                if n == self._kick_at:
                    self._wake.set()
            else:
                self._dropped += 1

    def event(self, rec: EventRecord) -> None:
        """Record one link/connection event: ``(event, link, address, peer, time)``. Never sampled."""
        if self._on:
            buf = self._events
            n = len(buf)
            if n < self._max_pending:
                buf.append(rec)
                if n == self._kick_at:
                    self._wake.set()
            else:
                self._dropped += 1

    # ---- control -------------------------------------------------------------------------------------
    @property
    def dropped(self) -> int:
        """Records dropped because the writer fell behind."""
        return self._dropped

    @property
    def pending(self) -> int:
        """Records waiting for the background thread."""
        return len(self._deliveries) + len(self._events)

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything recorded before this call is in the files; False on timeout or stop."""
        with self._cond:
            self._flush_asked += 1
            ticket = self._flush_asked
        self._wake.set()
        with self._cond:
            self._cond.wait_for(
                lambda: self._flush_done >= ticket or self.stopped or not self._thread.is_alive(), timeout)
            return self._flush_done >= ticket and not self.stopped

    def close(self, timeout: float = 10.0) -> None:
        """Write what is pending, close the files and stop the thread. Idempotent; never raises."""
        self._closing = True
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():  # stuck on a child process that does not read: end it
            sink = self._sink
            if isinstance(sink, ProcessSink):
                sink.kill()
            self._thread.join(1.0)
        self._on = False

    # ---- background thread ---------------------------------------------------------------------------
    def _open(self) -> Sink:
        cfg = self.config
        if self.formatter == "process":
            return ProcessSink(cfg.path, self.node, self.prefix, cfg.rotate_bytes)
        return JsonlSink(cfg.path, self.node, self.prefix, cfg.rotate_bytes)

    def _run(self) -> None:
        try:
            self._sink = sink = self._open()
        except OSError as err:
            self._fail(err)
            return
        while True:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            closing = self._closing
            asked = self._flush_asked
            cpu = time.thread_time()
            try:
                self._drain(sink)
                sink.check()
                if closing:
                    sink.close()
                elif asked != self._flush_done:
                    sink.flush()
            except OSError as err:
                self._fail(err)
                return
            self.thread_cpu += time.thread_time() - cpu
            self._log_drops()
            with self._cond:
                self._flush_done = asked
                self._cond.notify_all()
            if closing:
                return

    def _drain(self, sink: Sink) -> None:
        events = _take(self._events)
        if events:
            sink.events(events)
        deliveries = _take(self._deliveries)
        if deliveries:
            sink.deliveries(deliveries)
        if self.formatter == "thread":
            sink.flush()  # readers see records within about flush_interval

    def _log_drops(self) -> None:
        if self._dropped and not self._drop_logged:
            self._drop_logged = True
            log.warning("telemetry: writer fell behind (%d records waiting); dropping new records and "
                        "counting them", self._max_pending)

    def _fail(self, err: OSError) -> None:
        self._on = False
        self.stopped = True
        self.error = str(err)
        self._deliveries.clear()
        self._events.clear()
        log.error("telemetry stopped, routing continues without it: %s: %s", self.config.path, err)
        sink = self._sink
        try:
            if isinstance(sink, ProcessSink):
                sink.kill()
            elif sink is not None:
                sink.close()
        except OSError:
            pass
        with self._cond:
            self._cond.notify_all()
