"""The telemetry writer process: reads a node's records from stdin and runs a TelemetryWriter.

Started by :class:`router.telemetry.process.WriterProcess` as ``python -m router.telemetry.child SPEC``
(SPEC: JSON with the ``telemetry:`` config, the node id and its log levels). Stdin carries framed
pickles (``process.FRAME``): new routes and events, batches of delivery records. It ignores SIGINT
and SIGTERM (a Ctrl-C meant for the node must not cut its records short), runs at a lower priority
(nice 10) and ends when stdin closes: it writes what it has and exits 0, or
:data:`process.EXIT_STOPPED` if its writer stopped on an error, which the writer logged. The writer fails
in its own thread while this process may be waiting for the node's next message (an idle node sends
none): a watcher then interrupts that wait with SIGUSR1, so the process ends at once either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import sys
import threading
import time

from router.logs import setup_logging
from router.telemetry.config import TelemetryConfig
from router.telemetry.process import BATCH, EXIT_STOPPED, FRAME, NEWS

NICENESS = 10          # the writer's priority below the node's: it runs when routing leaves a core idle
HIGH_WATER = 500_000   # records waiting in the writer before this process stops reading the pipe
WATCH_INTERVAL = 0.1   # seconds between the watcher's looks at the writer


class WriterStopped(Exception):
    """Raised in the main thread (by the SIGUSR1 handler) when the writer stopped on an error."""


def _interrupt(signum: int, frame: object) -> None:
    raise WriterStopped


def watch(writer, main_thread: int) -> None:
    """Wake the main thread out of its read once ``writer`` stopped on an error."""
    while not writer.stopped:
        time.sleep(WATCH_INTERVAL)
    signal.pthread_kill(main_thread, signal.SIGUSR1)


def serve(stream, writer) -> None:
    """Feed ``writer`` from ``stream`` until it ends (a truncated last message is ignored) or the
    writer stops. While the writer has HIGH_WATER records waiting, nothing more is read: the pipe fills
    and the node keeps (boundedly) what it could not write, so records are dropped in one place only,
    the node, and counted there."""
    read = stream.read
    while not writer.stopped:
        while writer.pending >= HIGH_WATER and not writer.stopped:
            time.sleep(0.005)
        head = read(FRAME.size)
        if len(head) < FRAME.size:
            return
        (n,) = FRAME.unpack(head)
        data = read(n)
        if len(data) < n:
            return
        kind, payload = pickle.loads(data)
        if kind == BATCH:
            writer.deliveries(payload)
        elif kind == NEWS:
            routes, events = payload
            for route in routes:
                writer.route(route)
            for event in events:
                writer.event(event)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    setup_logging(spec["log_level"], spec["log_levels"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)           # background work: routing gets the CPU first
    from router.telemetry.writer import TelemetryWriter  # pyarrow: only this process loads it

    config = TelemetryConfig(dir=spec["dir"], rotate_mb=spec["rotate_mb"], sample=spec["sample"])
    writer = TelemetryWriter(config, spec["node"])
    signal.signal(signal.SIGUSR1, _interrupt)
    try:
        try:
            threading.Thread(target=watch, args=(writer, threading.get_ident()), daemon=True,
                             name="writer-watch").start()
            with os.fdopen(sys.stdin.fileno(), "rb", buffering=1 << 20, closefd=False) as stream:
                serve(stream, writer)
        finally:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # from here on the close is not interrupted
    except WriterStopped:
        pass
    writer.close()
    return EXIT_STOPPED if writer.stopped else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
