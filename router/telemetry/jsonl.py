"""Formatting record tuples as JSON Lines (the writer's ``fmt="jsonl"``; Parquet is the default),
and the rotating files they go into.

Formatting is one ``%`` per record with cached JSON-escaped strings (addresses, node ids and link
kinds repeat). A record that cannot be formatted (a wrong type from the caller) is skipped and counted.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from router.telemetry.schema import DELIVERY_FIELDS, EVENT_FIELDS

_DELIVERY_FMT = (
    '{"kind":"delivery","node":%s,"address":%s,"ingress":%s,"hops":%d,"in_link":%s,"out_link":%s,'
    '"outcome":%s,"size":%d,"arrival":%.6f,"settled":%.6f,"egress":%s,"next_hop":%s}\n'
)
_EVENT_FMT = '{"kind":"event","node":%s,"event":%s,"link":%s,"address":%s,"peer":%s,"time":%.6f}\n'
_CACHE_LIMIT = 100_000  # distinct strings remembered (dynamic addresses make the set open-ended)


class _Escaped(dict[object, str]):
    """str -> its JSON form (quoted, escaped); None -> ``null``. Filled on demand."""

    def __missing__(self, key: object) -> str:
        if key is not None and not isinstance(key, str):
            raise TypeError(f"expected str or None, not {type(key).__name__}")
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        value = "null" if key is None else json.dumps(key, ensure_ascii=False)
        self[key] = value
        return value


def _finite(*values: float) -> None:
    for v in values:
        if not math.isfinite(v):
            raise ValueError("time is not finite")


class Formatter:
    """Turns record tuples into JSON Lines text for one node."""

    def __init__(self, node: str) -> None:
        self._esc = _Escaped()
        self._node = json.dumps(node, ensure_ascii=False)
        self.bad = 0  # records skipped because they could not be formatted

    def deliveries(self, rows: list[tuple]) -> str:
        """JSON Lines for delivery tuples (see schema.DELIVERY_FIELDS; egress and next_hop may be left
        out)."""
        e, node, fmt = self._esc.__getitem__, self._node, _DELIVERY_FMT
        try:
            return "".join([fmt % (node, e(a), e(i), h, e(il), e(ol), e(o), s, t0, t1, e(eg), e(nh))
                            for a, i, h, il, ol, o, s, t0, t1, eg, nh in rows])
        except (TypeError, ValueError):
            return self._one_by_one(rows, self._delivery)

    def events(self, rows: list[tuple]) -> str:
        """JSON Lines for event tuples (see schema.EVENT_FIELDS)."""
        return self._one_by_one(rows, self._event)

    def _delivery(self, row: tuple) -> str:
        a, i, h, il, ol, o, s, t0, t1, *rest = row
        if len(rest) > 2:
            raise ValueError("too many fields")
        eg, nh = (*rest, None, None)[:2]
        _finite(t0, t1)
        e = self._esc.__getitem__
        return _DELIVERY_FMT % (self._node, e(a), e(i), h, e(il), e(ol), e(o), s, t0, t1, e(eg), e(nh))

    def _event(self, row: tuple) -> str:
        ev, link, address, peer, t = row
        _finite(t)
        e = self._esc.__getitem__
        return _EVENT_FMT % (self._node, e(ev), e(link), e(address), e(peer), t)

    def _one_by_one(self, rows: list[tuple], one) -> str:
        out = []
        for row in rows:
            try:
                out.append(one(row))
            except (TypeError, ValueError):
                self.bad += 1
        return "".join(out)


def file_prefix(node: str, start: float) -> str:
    """``<node>-<UTC start time>``: the common part of one writer's file names."""
    return f"{node}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(start))}"


class RotatingFile:
    """Appends text to ``<dir>/<prefix>-<seq>.jsonl``, starting a new file before one passes ``limit`` bytes.

    Files are created exclusively (an existing name is skipped, never overwritten). Raises OSError.
    """

    def __init__(self, directory: str | os.PathLike[str], prefix: str, limit: int) -> None:
        self.dir = Path(directory)
        self.prefix = prefix
        self.limit = limit
        self.seq = 0
        self.size = 0
        self.paths: list[Path] = []
        self._file = None
        self.dir.mkdir(parents=True, exist_ok=True)
        self._next()

    def _next(self) -> None:
        self.close()
        while True:
            self.seq += 1
            path = self.dir / f"{self.prefix}-{self.seq:06d}.jsonl"
            try:
                self._file = open(path, "xb", buffering=1 << 20)  # closed by close()
            except FileExistsError:
                continue
            self.paths.append(path)
            self.size = 0
            return

    def write(self, text: str) -> None:
        """Append whole lines (``text`` ends with a newline)."""
        data = text.encode()
        if self.size + len(data) > self.limit:
            if len(data) > self.limit:  # split at line ends so that each file stays within the limit
                self._write_split(data)
                return
            if self.size:
                self._next()
        self._put(data)

    def _write_split(self, data: bytes) -> None:
        start = 0
        while start < len(data):
            room = self.limit - self.size
            end = data.rfind(b"\n", start, start + room) + 1 if room > 0 else 0
            if end <= start:
                if self.size:
                    self._next()
                    continue
                end = data.index(b"\n", start) + 1  # one line longer than the limit: a file of its own
            self._put(data[start:end])
            start = end

    def _put(self, data: bytes) -> None:
        assert self._file is not None
        self._file.write(data)
        self.size += len(data)

    def flush(self) -> None:
        """Hand buffered bytes to the OS."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flush and close the current file (raises OSError if the flush fails)."""
        f, self._file = self._file, None
        if f is not None:
            try:
                f.flush()
            finally:
                f.close()


class JsonlSink:
    """Formats record batches and writes them to rotating files; OSError propagates to the caller."""

    def __init__(self, directory: str | os.PathLike[str], node: str, prefix: str, limit: int) -> None:
        self.formatter = Formatter(node)
        self.file = RotatingFile(directory, prefix, limit)

    suffix = ".jsonl"

    def write(self, batch) -> None:
        """Write a RecordBatch of parquet.FILE_SCHEMA (all deliveries or all events)."""
        if not batch.num_rows:
            return
        cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        if cols["kind"][0] == "delivery":
            self.deliveries(list(zip(*(cols[k] for k in DELIVERY_FIELDS), strict=True)))
        else:
            self.events(list(zip(*(cols[k] for k in EVENT_FIELDS), strict=True)))

    def deliveries(self, rows: list[tuple]) -> None:
        """Write delivery tuples."""
        text = self.formatter.deliveries(rows)
        if text:
            self.file.write(text)

    def events(self, rows: list[tuple]) -> None:
        """Write event tuples."""
        text = self.formatter.events(rows)
        if text:
            self.file.write(text)

    def check(self) -> None:
        """Nothing to check: errors surface in the writes themselves."""

    def flush(self) -> None:
        """Hand everything written so far to the OS."""
        self.file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self.file.close()
