"""TelemetryWriter: O(1) appends, conversion and I/O in a background thread.

A node runs it in its writer process (router.telemetry.child, fed by router.telemetry.process); it
works in any process.

The hot path appends to lists; no formatting, no I/O, no lock. Deliveries come as numbers only, the
route as an id indexing ``routes``, the list of distinct ``(address, ingress, hops, in_link, out_link,
egress, next_hop)`` seen so far (``route``): the node fills ``DeliveryColumns`` batches (one list append per
record, see columns.py) and hands each over whole (``deliveries``, about twice a second); other callers
``put`` compact tuples ``(route id, outcome code, size, arrival, settled)``; ``delivery()`` takes the
full tuple and does both steps.

A background thread wakes every ``flush_interval`` seconds (sooner when a list grows long), converts
what has accumulated to Arrow record batches (one C-level conversion per batch; strings are looked up
by index in Arrow, not per record in Python) and writes them to Parquet (``fmt="parquet"``, the
default: encoding, compression and writes run in Arrow's C++ code without the GIL), or formats JSON
Lines in the thread (``fmt="jsonl"``: readable with ``tail -f``, about ten times the CPU).

Any error in the thread (unwritable directory, full disk, ...) stops telemetry for good with one ERROR
line on the ``router.telemetry`` logger; the caller never sees an exception and later calls are
no-ops. If the thread falls behind and a list holds ``max_pending`` records, new records are dropped
and counted (one WARNING line).

Call ``delivery``/``put``/``deliveries``/``route``/``event`` from one thread (the node's event loop);
``close()`` from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from router.telemetry.columns import DeliveryColumns
from router.telemetry.config import TelemetryConfig
from router.telemetry.jsonl import JsonlSink
from router.telemetry.parquet import (
    COMPACT_TYPE,
    EVENT_TYPE,
    ParquetSink,
    RouteTable,
    compact_batch,
    delivery_batch,
    delivery_columns,
    event_batch,
    file_prefix,
    warm_up,
)
from router.telemetry.schema import (
    OUTCOME_CODES,
    CompactRecord,
    DeliveryRecord,
    EventRecord,
    Route,
    check_route,
)

log = logging.getLogger("router.telemetry")

_SCALE = 1 << 20  # sampling works in integer steps of 1/_SCALE: exact and deterministic
_KICK_AT = 100_000  # wake the thread early when a list reaches this length
CHUNK = 20_000  # records converted per GIL-holding step (about 3 ms)
OUTCOME_OF_NAME = {name: code for code, name in OUTCOME_CODES.items()}


class Sink(Protocol):
    """What the writer thread writes to (ParquetSink or JsonlSink)."""

    def write(self, batch: pa.RecordBatch) -> None: ...
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

    def __init__(self, config: TelemetryConfig, node: str, *, fmt: str = "parquet",
                 flush_interval: float = 1.0, max_pending: int = 1_000_000,
                 roll_seconds: float = 60.0) -> None:
        if fmt not in ("parquet", "jsonl"):
            raise ValueError(f"fmt must be 'parquet' or 'jsonl', not {fmt!r}")
        self.config = config
        self.node = node
        self.fmt = fmt
        self.flush_interval = flush_interval
        self.roll_seconds = roll_seconds
        self.prefix = file_prefix(node, time.time())
        self.routes: list[Route] = []          # route id -> route (append-only)
        self._route_ids: dict[Route, int] = {}
        self._deliveries: list[CompactRecord] = []
        self._batches: list[DeliveryColumns] = []
        self._added = 0   # records in batches handed over (caller's thread)
        self._taken = 0   # and taken by the background thread
        self._events: list[EventRecord] = []
        self._max_pending = max(1, max_pending)
        self._kick_at = min(_KICK_AT, max(1, self._max_pending // 2))
        self._sampling = config.sample < 1
        self._step = round(config.sample * _SCALE)
        self._acc = 0
        self._batch_acc = 0  # the sampling counter of batches (background thread)
        self._dropped = 0
        self._drop_logged = False
        self._on = True  # False once stopped or closed: the hot path then returns at once
        self.stopped = False  # True after an error stopped telemetry
        self.error: str | None = None
        self.bad = 0  # records skipped because they had values of the wrong type
        self._closing = False
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._flush_asked = 0
        self._flush_done = 0
        self._sink: Sink | None = None
        self._table = RouteTable()
        self.thread_cpu = 0.0  # CPU seconds the background thread spent converting and writing
        self._thread = threading.Thread(target=self._run, name=f"telemetry-{node}", daemon=True)
        self._thread.start()

    # ---- hot path ------------------------------------------------------------------------------------
    def route(self, route: Route) -> int:
        """The id of ``(address, ingress, hops, in_link, out_link, egress, next_hop)`` (next_hop may be
        left out), for ``put``; TypeError if a field has the wrong type."""
        rid = self._route_ids.get(route)
        if rid is None:
            full = check_route(route)
            rid = self._route_ids[route] = len(self.routes)
            self.routes.append(full)
        return rid

    def deliveries(self, batch: DeliveryColumns) -> None:
        """Take a complete batch of delivery records (the caller no longer touches it). O(1)."""
        n = len(batch)
        if self._on and n:
            if self._added - self._taken + n > self._max_pending:
                self._dropped += n
                return
            self._batches.append(batch)
            self._added += n
            if self._added - self._taken >= self._kick_at:
                self._wake.set()

    def put(self, rec: CompactRecord) -> None:
        """Record one settled delivery in compact form ``(route id, outcome code, size, arrival,
        settled)``. O(1): one list append (after the sampling counter, if sampling)."""
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

    def delivery(self, rec: DeliveryRecord) -> None:
        """Record one settled delivery: ``(address, ingress, hops, in_link, out_link, outcome, size,
        arrival, settled, egress, next_hop)`` (see schema.DELIVERY_FIELDS; egress and next_hop may be left
        out)."""
        if self._on:
            address, ingress, hops, in_link, out_link, outcome, size, arrival, settled, *rest = rec
            code = OUTCOME_OF_NAME.get(outcome, -1) if isinstance(outcome, str) else -1
            if code < 0:
                self.bad += 1
                return
            try:
                rid = self.route((address, ingress, hops, in_link, out_link, *rest[:2],
                                  *(None,) * (2 - len(rest[:2]))))
            except TypeError:
                self.bad += 1
                return
            self.put((rid, code, size, arrival, settled))

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
        return len(self._deliveries) + len(self._events) + self._added - self._taken

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything recorded before this call is in complete files; False on timeout or
        stop. With Parquet this closes the current file (the next records start a new one)."""
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
        self._on = False

    # ---- background thread ---------------------------------------------------------------------------
    def _open(self) -> Sink:
        cfg = self.config
        if self.fmt == "parquet":
            return ParquetSink(cfg.path, self.prefix, cfg.rotate_bytes, self.roll_seconds)
        return JsonlSink(cfg.path, self.node, self.prefix, cfg.rotate_bytes)

    def _run(self) -> None:
        try:
            self._sink = sink = self._open()
            warm_up(self.node, self.fmt == "parquet")
        except Exception as err:  # noqa: BLE001 - whatever it is, telemetry stops and routing goes on
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
            except Exception as err:  # noqa: BLE001
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
            sink.write(event_batch(self._arrow(events, EVENT_TYPE), self.node))
        batches = _take(self._batches)
        if batches:
            self._table.update(self.routes, len(self.routes))  # every id in `batches` is below
            for b in batches:
                cols = self._columns(b)
                self._taken += len(b)
                if cols is not None and len(cols[0]):
                    sink.write(delivery_batch(*cols, self._table, self.node))
        deliveries = _take(self._deliveries)
        if deliveries:
            self._table.update(self.routes, len(self.routes))  # every id in `deliveries` is below
            for i in range(0, len(deliveries), CHUNK):
                rows = self._known_routes(self._arrow(deliveries[i:i + CHUNK], COMPACT_TYPE))
                if len(rows):
                    sink.write(compact_batch(rows, self._table, self.node))
        if self.fmt == "jsonl":
            sink.flush()  # readers see records within about flush_interval

    def _columns(self, b: DeliveryColumns) -> tuple[pa.Array, ...] | None:
        """The Arrow columns of batch ``b`` (sampled); None if it is malformed (its records count as bad)."""
        try:
            cols = delivery_columns(b)
            if pc.max(cols[0]).as_py() >= self._table.size:
                raise ValueError("unknown route id")
        except (pa.ArrowException, TypeError, ValueError, OverflowError, IndexError):
            self.bad += len(b)
            return None
        if self._sampling:
            keep = self._sample_mask(len(b))
            cols = tuple(c.filter(keep) for c in cols)
        return cols

    def _sample_mask(self, n: int) -> pa.Array:
        """Which of the next ``n`` records of batches sampling keeps: the ones at which the counter
        ``acc + step`` passes a multiple of the scale, as ``put`` does one by one."""
        acc = self._batch_acc
        total = pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(self._step, pa.int64()), n)), acc)
        turns = pc.shift_right(total, _SCALE.bit_length() - 1)
        before = pa.concat_arrays([pa.array([0], pa.int64()), turns.slice(0, n - 1)])
        self._batch_acc = (acc + n * self._step) % _SCALE
        return pc.not_equal(turns, before)

    def _known_routes(self, rows: pa.StructArray) -> pa.StructArray:
        """``rows`` (COMPACT_TYPE) without those whose route id the writer never gave (counted as bad)."""
        ids = rows.field(0)
        if len(rows) and (pc.min(ids).as_py() < 0 or pc.max(ids).as_py() >= self._table.size):
            n = len(rows)
            rows = rows.filter(pc.and_(pc.greater_equal(ids, 0), pc.less(ids, self._table.size)))
            self.bad += n - len(rows)
        return rows

    def _arrow(self, rows: list[tuple], typ: pa.StructType) -> pa.StructArray:
        """``rows`` as a StructArray; rows with values of the wrong type are skipped and counted."""
        try:
            arr = pa.array(rows, typ)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            good = []
            for row in rows:
                try:
                    pa.array([row], typ)
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    self.bad += 1
                else:
                    good.append(row)
            arr = pa.array(good, typ)
        required = range(5) if typ is COMPACT_TYPE else (0, 4)  # compact: all; events: event, time
        if arr.null_count or any(arr.field(i).null_count for i in required):
            n = len(arr)
            arr = arr.filter(_complete(arr, required))
            self.bad += n - len(arr)
        return arr

    def _log_drops(self) -> None:
        if self._dropped and not self._drop_logged:
            self._drop_logged = True
            log.warning("telemetry: writer fell behind (%d records waiting); dropping new records and "
                        "counting them", self._max_pending)

    def _fail(self, err: Exception) -> None:
        self._on = False
        self.stopped = True
        self.error = str(err)
        self._deliveries.clear()
        self._batches.clear()
        self._events.clear()
        log.error("telemetry stopped, routing continues without it: %s: %s", self.config.path, err)
        sink = self._sink
        try:
            if sink is not None:
                sink.close()
        except Exception:  # noqa: BLE001,S110 - already stopping
            pass
        with self._cond:
            self._cond.notify_all()


def _complete(arr: pa.StructArray, required) -> pa.Array:
    """Mask of the rows whose ``required`` fields are all set."""
    mask = pc.is_valid(arr)
    for i in required:
        mask = pc.and_(mask, pc.is_valid(arr.field(i)))
    return mask
