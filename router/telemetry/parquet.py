"""Columnar record batches (Arrow) and the rotating Parquet files they go into.

The writer thread turns the hot path's compact tuples into one Arrow RecordBatch per batch of records
(``compact_batch``): one C-level conversion of the numbers, then the route and outcome strings are taken
from small lookup arrays by index (Arrow compute, no Python per record). ``ParquetSink`` writes each batch
as a row group; Parquet encoding, compression and the file writes run in Arrow's C++ code.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from router.telemetry.columns import DeliveryColumns
from router.telemetry.schema import FILE_COLUMNS, OUTCOME_CODES, ROUTE_FIELDS

_TYPES = {"hops": pa.int64(), "size": pa.int64(), "arrival": pa.float64(), "settled": pa.float64(),
          "time": pa.float64()}
FILE_SCHEMA = pa.schema([(name, _TYPES.get(name, pa.string())) for name in FILE_COLUMNS])
# What the writer hands to Parquet: the strings dictionary-encoded (they are strings in the file)
_DICT = pa.dictionary(pa.int32(), pa.string())
BATCH_SCHEMA = pa.schema([(f.name, _DICT if f.type == pa.string() else f.type) for f in FILE_SCHEMA])
COMPACT_TYPE = pa.struct([("route", pa.int32()), ("outcome", pa.int32()), ("size", pa.int64()),
                          ("arrival", pa.float64()), ("settled", pa.float64())])
EVENT_TYPE = pa.struct([("event", pa.string()), ("link", pa.string()), ("address", pa.string()),
                        ("peer", pa.string()), ("time", pa.float64())])
ROUTE_TYPE = pa.struct([(name, pa.int64() if name == "hops" else pa.string()) for name in ROUTE_FIELDS])
STRING_COLUMNS = [f.name for f in FILE_SCHEMA if f.type == pa.string()]
# outcome code (0..255) -> index into OUTCOME_NAMES; codes the node does not name are "released"
OUTCOME_NAMES = pa.array(sorted(set(OUTCOME_CODES.values())), pa.string())
_NAMES = OUTCOME_NAMES.to_pylist()
OUTCOME_INDEX = pa.array([_NAMES.index(OUTCOME_CODES.get(i, "released")) for i in range(256)], pa.int32())


class RouteTable:
    """The writer's route list as Arrow columns, grown as the list grows (read by the writer thread).

    String fields are kept dictionary-encoded, so a batch's column is the route ids mapped to
    dictionary indices (an int32 take) over the same small dictionary: no string is copied or hashed
    per record, here or in the Parquet writer."""

    def __init__(self) -> None:
        self.size = 0
        self._plain: dict[str, pa.Array] = {name: pa.array([], ROUTE_TYPE.field(name).type)
                                            for name in ROUTE_FIELDS}
        self.columns: dict[str, pa.Array] = {}
        self._encode()

    def _encode(self) -> None:
        for name, col in self._plain.items():
            self.columns[name] = col if name == "hops" else pc.dictionary_encode(col)

    def update(self, routes: list, n: int) -> None:
        """Make the columns cover ``routes[:n]``."""
        if n > self.size:
            new = pa.array(routes[self.size:n], ROUTE_TYPE)
            for i, name in enumerate(ROUTE_FIELDS):
                self._plain[name] = pa.concat_arrays([self._plain[name], new.field(i)])
            self.size = n
            self._encode()

    def column(self, name: str, ids: pa.Array) -> pa.Array:
        """The ``name`` field of the routes ``ids``."""
        col = self.columns[name]
        if name == "hops":
            return col.take(ids)
        return pa.DictionaryArray.from_arrays(col.indices.take(ids), col.dictionary)


class _Fill:
    """Index zeros and null columns of any length, sliced from cached ones (no allocation per batch)."""

    def __init__(self) -> None:
        self.size = 0
        self.zeros = pa.array([], pa.int32())
        self.nulls: dict[pa.DataType, pa.Array] = {}

    def _grow(self, n: int) -> None:
        size = max(n, 1 << 16)
        self.zeros = pa.repeat(pa.scalar(0, pa.int32()), size)
        self.nulls = {t: pa.nulls(size, t) for t in (_DICT, *_TYPES.values())}
        self.size = size

    def zero(self, n: int) -> pa.Array:
        if n > self.size:
            self._grow(n)
        return self.zeros.slice(0, n)

    def null(self, n: int, typ: pa.DataType) -> pa.Array:
        if n > self.size:
            self._grow(n)
        col = self.nulls.get(typ)
        return col.slice(0, n) if col is not None else pa.nulls(n, typ)


_FILL = _Fill()


def _constant(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(_FILL.zero(n), pa.array([value]))


def compact_batch(rows: pa.StructArray, routes: RouteTable, node: str) -> pa.RecordBatch:
    """Delivery rows (COMPACT_TYPE) as a RecordBatch of FILE_SCHEMA (strings dictionary-encoded)."""
    return delivery_batch(rows.field(0), rows.field(1), rows.field(2), rows.field(3), rows.field(4), routes,
                          node)


def delivery_columns(b: DeliveryColumns) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]:
    """``(route ids, outcome codes, sizes, arrival, settled)`` of a complete DeliveryColumns batch.

    A handful of C-level calls: one list conversion and run-end decoding.
    Raises (pa.ArrowException, TypeError, ValueError, OverflowError) on a malformed batch."""
    n = len(b.sizes)
    if not n or not b.ends or b.ends[-1] != n:
        raise ValueError("incomplete delivery batch")
    size = pa.array(b.sizes, pa.int64())
    if size.null_count or pc.min(size).as_py() < 0:
        raise ValueError("missing or negative size")
    settled = _runs(b.ends, pa.array(b.times, pa.float64()))
    k = len(b.starts) - (b.starts[-1] == n)     # the last run may be empty
    ends = b.starts[1:k] + [n]
    ids = _runs(ends, pa.array(b.routes[:k], pa.int32()))
    codes = _runs(ends, pa.array(b.codes[:k], pa.int32()))
    arrival = _runs(ends, pa.array(b.arrivals[:k], pa.float64()))
    if ids.null_count or arrival.null_count or settled.null_count or codes.null_count:
        raise ValueError("missing route, time or outcome")
    return ids, codes, size, arrival, settled


def _runs(ends: list[int], values: pa.Array) -> pa.Array:
    """The plain array of ``values[k]`` repeated up to ``ends[k]`` (run-end decoding); ``ends`` must
    increase strictly."""
    if len(ends) != len(values):
        raise ValueError("runs and values differ in number")
    if len(ends) == 1:
        return pa.repeat(values[0], ends[0])
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(pa.array(ends, pa.int32()), values))


def delivery_batch(ids: pa.Array, codes: pa.Array, size: pa.Array, arrival: pa.Array, settled: pa.Array,
                   routes: RouteTable, node: str) -> pa.RecordBatch:
    """Delivery columns as a RecordBatch of FILE_SCHEMA (strings dictionary-encoded)."""
    n = len(ids)
    lo_hi = pc.min_max(codes)
    if lo_hi["min"].as_py() < 0 or lo_hi["max"].as_py() > 255:
        codes = pc.if_else(pc.and_(pc.greater_equal(codes, 0), pc.less_equal(codes, 255)), codes, 0)
    by_name = {
        "kind": _constant("delivery", n), "node": _constant(node, n),
        "outcome": pa.DictionaryArray.from_arrays(OUTCOME_INDEX.take(codes), OUTCOME_NAMES),
        "size": size, "arrival": arrival, "settled": settled,
    }
    for name in ROUTE_FIELDS:
        by_name[name] = routes.column(name, ids)
    return _batch(by_name, n)


def event_batch(rows: pa.StructArray, node: str) -> pa.RecordBatch:
    """Event rows (EVENT_TYPE) as a RecordBatch of FILE_SCHEMA."""
    n = len(rows)
    by_name = {"kind": _constant("event", n), "node": _constant(node, n)}
    for i, field in enumerate(EVENT_TYPE):
        by_name[field.name] = pc.dictionary_encode(rows.field(i)) if i < 4 else rows.field(i)
    return _batch(by_name, n)


def _batch(by_name: dict[str, pa.Array], n: int) -> pa.RecordBatch:
    cols = []
    for f in BATCH_SCHEMA:
        col = by_name.get(f.name)
        if col is None:
            col = _FILL.null(n, f.type)
        elif f.type == _DICT and not pa.types.is_dictionary(col.type):
            col = pc.dictionary_encode(col)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=BATCH_SCHEMA)


def _parquet_writer(sink: object) -> pq.ParquetWriter:
    """Dictionary pages for the strings only (numbers would be hashed for nothing), no statistics, pages
    filled a batch at a time: about 60 ns of C++ per record instead of about 300."""
    return pq.ParquetWriter(sink, BATCH_SCHEMA, compression="snappy", write_statistics=False,
                            use_dictionary=STRING_COLUMNS, write_batch_size=1 << 16)


def warm_up(node: str, parquet: bool) -> None:
    """Convert (and with ``parquet`` write, to memory) a one-record batch of each kind: the first calls of
    the Arrow kernels and of a Parquet writer cost about 20 ms, better spent at start than on the first
    batch of records."""
    b = DeliveryColumns(0, 0x24, 0.0)
    b.sizes.append(0)
    b.settle(0.0)
    routes = RouteTable()
    routes.update([("", "", 0, "", "", "", "")], 1)
    rows = pa.array([("", "", "", "", 0.0)], EVENT_TYPE)
    batches = [delivery_batch(*delivery_columns(b), routes, node), event_batch(rows, node)]
    if parquet:
        with _parquet_writer(io.BytesIO()) as writer:
            for batch in batches:
                writer.write_batch(batch)


def file_prefix(node: str, start: float) -> str:
    """``<node>-<UTC start time>``: the common part of one writer's file names."""
    return f"{node}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(start))}"


_FOOTER_BASE = 3000      # bytes of a footer with one row group (16 columns), about
_FOOTER_PER_GROUP = 1600  # and per further row group


class ParquetSink:
    """Writes RecordBatches to ``<dir>/<prefix>-<seq>.parquet``, one row group per batch.

    A file is complete (readable) once closed: at ``flush()``, ``close()``, when it is ``roll_seconds``
    old, or before it would pass ``limit`` bytes (estimated from the bytes per row so far). Files are
    created exclusively, never overwritten. Raises OSError.
    """

    suffix = ".parquet"

    def __init__(self, directory: str | os.PathLike[str], prefix: str, limit: int,
                 roll_seconds: float = 60.0) -> None:
        self.dir = Path(directory)
        self.prefix = prefix
        self.limit = limit
        self.roll_seconds = roll_seconds
        self.seq = 0
        self.paths: list[Path] = []
        self._file = None
        self._writer: pq.ParquetWriter | None = None
        self._rows = 0
        self._groups = 0
        self._opened = 0.0
        self._per_row = 40.0  # bytes per row, learnt from what was written
        self.dir.mkdir(parents=True, exist_ok=True)

    def _open(self) -> None:
        while True:
            self.seq += 1
            path = self.dir / f"{self.prefix}-{self.seq:06d}{self.suffix}"
            try:
                self._file = open(path, "xb")  # closed by _close()
            except FileExistsError:
                continue
            break
        self.paths.append(path)
        self._writer = _parquet_writer(self._file)
        self._rows = self._groups = 0
        self._opened = time.monotonic()

    def _room(self) -> float:
        """Bytes left in the current file for row data."""
        used = self._file.tell() if self._file is not None else 4
        return self.limit - used - _FOOTER_BASE - _FOOTER_PER_GROUP * (self._groups + 1)

    def write(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` (split over files when it would not fit)."""
        start, n = 0, batch.num_rows
        while start < n:
            if self._writer is not None and self._rows and self._room() < self._per_row:
                self._close()
            if self._writer is None:
                self._open()
            fit = max(1, int(self._room() / self._per_row))
            piece = batch.slice(start, min(fit, n - start))
            before = self._file.tell()
            self._writer.write_batch(piece)
            self._rows += piece.num_rows
            self._groups += 1
            grown = self._file.tell() - before
            if grown > 0:
                self._per_row = max(self._per_row * 0.5, grown / piece.num_rows)
            start += piece.num_rows
        self.check()

    def check(self) -> None:
        """Close the current file if it is old enough, so that readers see it."""
        if self._writer is not None and time.monotonic() - self._opened >= self.roll_seconds:
            self._close()

    def flush(self) -> None:
        """Complete the current file (the next write starts a new one)."""
        self._close()

    def close(self) -> None:
        self._close()

    def _close(self) -> None:
        writer, f = self._writer, self._file
        self._writer = self._file = None
        try:
            if writer is not None:
                writer.close()
        finally:
            if f is not None:
                f.close()
