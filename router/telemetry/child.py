"""Formatting and file writing in a child process, so that the node's GIL is not spent on JSON.

The parent (:class:`ProcessSink`, used by the writer thread) sends frames on the child's stdin: a
5-byte header ``<type:u8><length:u32 le>`` then a ``marshal`` payload (a list of record tuples).
Types: ``D`` deliveries, ``E`` events, ``F`` flush (the child answers ``ok``). On stdout the child
says ``ready`` once its first file is open, then only ``ok`` lines; on an OSError it says
``error <message>`` and exits with status 3. It exits 0 at end of input, after closing its file.

Run as ``python -m router.telemetry DIR NODE PREFIX LIMIT_BYTES`` (see ``__main__.py``).
"""

from __future__ import annotations

import marshal
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from router.telemetry.jsonl import JsonlSink

HEADER = struct.Struct("<BI")
DELIVERIES, EVENTS, FLUSH = b"D"[0], b"E"[0], b"F"[0]
CHUNK = 5000  # records per frame: bounds how long marshal holds the parent's GIL (about 1 ms)
EXIT_IO_ERROR = 3


class ProcessSink:
    """Parent side: same interface as JsonlSink; raises OSError (with the child's reason) on failure."""

    def __init__(self, directory: str | os.PathLike[str], node: str, prefix: str, limit: int) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "router.telemetry", os.fspath(directory), node, prefix, str(limit)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if first.strip() != b"ready":  # the child could not open its first file
            self._raise_failure(first)
        self.bad = 0  # records that could not be passed on (types marshal does not know)

    def deliveries(self, rows: list[tuple]) -> None:
        """Send delivery tuples."""
        self._send(DELIVERIES, rows)

    def events(self, rows: list[tuple]) -> None:
        """Send event tuples."""
        self._send(EVENTS, rows)

    def _send(self, kind: int, rows: list[tuple]) -> None:
        for i in range(0, len(rows), CHUNK):
            chunk = rows[i:i + CHUNK]
            try:
                payload = marshal.dumps(chunk)
            except ValueError:
                payload = marshal.dumps(self._marshallable(chunk))
            self._write(HEADER.pack(kind, len(payload)) + payload)
        self._flush_pipe()

    def _marshallable(self, rows: list[tuple]) -> list[tuple]:
        good = []
        for row in rows:
            try:
                marshal.dumps(row)
            except ValueError:
                self.bad += 1
            else:
                good.append(row)
        return good

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except OSError:
            self._raise_failure()

    def _flush_pipe(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.flush()
        except OSError:
            self._raise_failure()

    def check(self) -> None:
        """Raise OSError if the child has stopped (it exits only on an error or end of input)."""
        if self.proc.poll() is not None:
            self._raise_failure()

    def flush(self) -> None:
        """Wait until the child has written everything sent so far to its file."""
        self._write(HEADER.pack(FLUSH, 0))
        self._flush_pipe()
        assert self.proc.stdout is not None
        answer = self.proc.stdout.readline()
        if answer.strip() != b"ok":
            self._raise_failure(answer)

    def close(self, timeout: float = 10.0) -> None:
        """End the child's input and wait for it to finish its file."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise OSError(f"telemetry writer process did not finish within {timeout:.0f}s") from None
        if code != 0:
            self._raise_failure()

    def kill(self) -> None:
        """Stop the child at once (used when the parent gives up)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def _raise_failure(self, already_read: bytes = b"") -> None:
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        assert self.proc.stdout is not None
        reason = ""
        text = (already_read + self.proc.stdout.read()).decode(errors="replace")
        for line in text.splitlines():
            if line.startswith("error "):
                reason = line[6:]
        raise OSError(reason or f"telemetry writer process exited with status {code}")


def _read_exact(stream, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def serve(sink: JsonlSink, stdin, stdout) -> None:
    """Apply frames from ``stdin`` to ``sink`` until end of input (a torn last frame is ignored)."""
    while True:
        header = _read_exact(stdin, HEADER.size)
        if header is None:
            return
        kind, length = HEADER.unpack(header)
        payload = _read_exact(stdin, length) if length else b""
        if payload is None:
            return
        if kind == FLUSH:
            sink.flush()
            stdout.write(b"ok\n")
            stdout.flush()
            continue
        rows = marshal.loads(payload)
        if kind == DELIVERIES:
            sink.deliveries(rows)
        elif kind == EVENTS:
            sink.events(rows)
        sink.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Child entry point; returns the exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the node; we stop at end of input
    directory, node, prefix, limit = argv if argv is not None else sys.argv[1:]
    out = sys.stdout.buffer
    try:
        sink = JsonlSink(directory, node, prefix, int(limit))
        out.write(b"ready\n")
        out.flush()
        try:
            serve(sink, sys.stdin.buffer, out)
        finally:
            sink.close()
    except OSError as err:
        out.write(f"error {err}\n".encode(errors="replace"))
        out.flush()
        return EXIT_IO_ERROR
    except Exception as err:  # a bug: still one line for the parent's log, not a traceback
        out.write(f"error internal: {err!r}\n".encode(errors="replace"))
        out.flush()
        return 1
    return 0
