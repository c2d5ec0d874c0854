"""WriterProcess: the node's side of a telemetry writer that runs in a child process.

The node hands its records to :class:`WriterProcess` with the calls it would make on a
:class:`router.telemetry.writer.TelemetryWriter` (``route``, ``deliveries``, ``event``, ``close``). They
are pickled into an output buffer, and ``send`` (called about twice a second, and when a batch is handed
over) writes that buffer to a pipe without ever blocking: what the pipe cannot take now waits for the
next call. The child (``python -m router.telemetry.child``) reads the pipe and runs the writer:
conversion, Arrow, Parquet and file I/O. So the node process has no second thread and never loads
pyarrow; being multi-threaded alone cost the node ~3% per message (glibc's malloc locks once a process
has a second thread), and converting and writing another ~4% (BENCHMARKS.md, "Telemetry overhead").

Failures never reach routing:

* the child stops on an error of its own (unwritable directory, full disk): it logs the one line and
  exits with :data:`EXIT_STOPPED`; the node stops sending, silently;
* the child dies or cannot start: the node logs one line when it notices (a write fails) and stops;
* the child falls behind: what waits in the node is bounded by ``max_backlog`` bytes; batches beyond
  that are dropped and counted (one WARNING line).

If the node dies, the child sees the pipe close, writes what it has and exits.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from router.telemetry.columns import DeliveryColumns
from router.telemetry.config import TelemetryConfig
from router.telemetry.schema import EventRecord, Route, check_route

log = logging.getLogger("router.telemetry")

FRAME = struct.Struct(">I")          # each message: its pickle's length, then the pickle
EXIT_STOPPED = 3                     # the child stopped on an error it has already logged
PIPE_BYTES = 1 << 20                 # pipe capacity asked for (Linux caps it at pipe-max-size)
MAX_BACKLOG = 64 << 20               # bytes the node keeps for a child that falls behind
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])   # the directory that holds `router`

# message kinds (the first item of each pickled tuple): new routes and events, in order; a batch
NEWS, BATCH = "n", "d"


class WriterProcess:
    """Telemetry records of one node, written by a child process (see the module docstring).

    Call everything from the node's event loop.
    """

    def __init__(self, config: TelemetryConfig, node: str, *, log_level: str = "info",
                 log_levels: Mapping[str, str] | None = None, max_backlog: int = MAX_BACKLOG) -> None:
        self.config = config
        self.node = node
        self.routes: list[Route] = []          # route id -> route (the child assigns the same ids)
        self._route_ids: dict[Route, int] = {}
        self._routes: list[Route] = []         # new routes and events not yet queued (one message for all)
        self._events: list[EventRecord] = []
        self._out: list[bytes] = []            # framed messages not yet written to the pipe
        self._queued = 0                       # their bytes
        self._max_backlog = max_backlog
        self.dropped = 0                       # delivery records dropped because the child was behind
        self._drop_logged = False
        self.stopped = False                   # True once telemetry stopped (the child is gone)
        spec = {"dir": str(config.dir), "rotate_mb": config.rotate_mb, "sample": config.sample,
                "node": node, "log_level": log_level, "log_levels": dict(log_levels or {})}
        read_end, self._fd = os.pipe()
        try:
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:                        # capped lower: the default 64 KiB works, in more writes
            pass
        os.set_blocking(self._fd, False)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-m", "router.telemetry.child", json.dumps(spec)],
                stdin=read_end, stdout=subprocess.DEVNULL, env=env)
        except OSError as err:
            self._proc = None
            self._stop(f"cannot start the writer process: {err}")
        finally:
            os.close(read_end)

    # ---- what the node calls ------------------------------------------------------------------------------
    def route(self, route: Route) -> int:
        """The id of ``(address, ingress, hops, in_link, out_link, egress, next_hop)`` (next_hop may be
        left out); TypeError if a field has the wrong type."""
        rid = self._route_ids.get(route)
        if rid is None:
            full = check_route(route)
            rid = self._route_ids[route] = len(self.routes)
            self.routes.append(full)
            self._routes.append(full)
        return rid

    def deliveries(self, batch: DeliveryColumns) -> None:
        """Take a complete batch of delivery records (the caller no longer touches it) and send."""
        if self.stopped or not len(batch):
            return
        if self._queued > self._max_backlog:
            self.dropped += len(batch)
            if not self._drop_logged:
                self._drop_logged = True
                log.warning("telemetry: the writer process fell behind (%d bytes waiting); dropping new "
                            "records and counting them", self._queued)
            return
        self._queue_news()
        self._queue((BATCH, batch))
        self.send()

    def event(self, rec: EventRecord) -> None:
        """Record one link/connection event: ``(event, link, address, peer, time)``; sent with the next
        ``send``."""
        if not self.stopped:
            self._events.append(rec)

    def send(self) -> None:
        """Write what the pipe takes now of what is queued (never blocks)."""
        if self._routes or self._events:
            self._queue_news()
        if not self._out or self.stopped:
            return
        buf = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        try:
            n = os.write(self._fd, buf)
        except BlockingIOError:
            n = 0
        except OSError as err:                 # EPIPE: the child is gone
            self._child_gone(err)
            return
        rest = buf[n:]
        self._out = [rest] if rest else []
        self._queued = len(rest)

    @property
    def pending(self) -> int:
        """Bytes queued for the child and not yet written to the pipe."""
        return self._queued

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued, close the pipe and wait for the child to write everything and exit
        (killed after ``timeout`` seconds). Idempotent; never raises."""
        proc, self._proc = self._proc, None
        if self._fd < 0:
            return
        if not self.stopped:
            self._queue_news()
        try:
            if self._out and not self.stopped:
                os.set_blocking(self._fd, True)
                os.write(self._fd, b"".join(self._out))   # a pipe write may be partial only on signals
        except OSError:
            pass
        self._out = []
        os.close(self._fd)
        self._fd = -1
        if proc is not None:
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                log.error("telemetry: the writer process did not finish within %.0f s; killed", timeout)
                return
            if code not in (0, EXIT_STOPPED) and not self.stopped:
                self._stop(f"the writer process exited with code {code}")

    # ---- internals ----------------------------------------------------------------------------------------
    def _queue_news(self) -> None:
        if not self.stopped:
            self._queue((NEWS, (self._routes, self._events)))
        self._routes = []
        self._events = []

    def _queue(self, message: tuple) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        self._out.append(FRAME.pack(len(data)))
        self._out.append(data)
        self._queued += len(data) + FRAME.size

    def _child_gone(self, err: OSError) -> None:
        proc = self._proc
        code = proc.poll() if proc is not None else None
        if code is None and proc is not None:
            try:
                code = proc.wait(0.5)
            except subprocess.TimeoutExpired:
                code = None
        if code == EXIT_STOPPED:               # it logged why
            self.stopped = True
            self._out = []
            self._queued = 0
        else:
            how = f"exited with code {code}" if code is not None else f"cannot be written to ({err})"
            self._stop(f"the writer process {how}")

    def _stop(self, why: str) -> None:
        self.stopped = True
        self._out = []
        self._queued = 0
        log.error("telemetry stopped, routing continues without it: %s: %s", self.config.path, why)
