"""Run a node with every event-loop callback timed; the long ones are written to a JSON file at exit.

    python benchmarks/harness/turns.py OUT.json [MIN_MS] -- run CONFIG

runs ``router.cli.main(["run", CONFIG])`` (the ``router`` package found on PYTHONPATH, so a benchmark may run
another tree's node) with ``asyncio.events.Handle._run`` wrapped: each callback that took at least MIN_MS
(default 1) of wall-clock time is kept as ``[start, seconds, cpu_seconds, callback]``, ``start`` on
``time.monotonic()`` (the system-wide clock, so the benchmark can cut out its own window), ``cpu_seconds``
the thread's CPU time (on a loaded machine the wall time of any callback includes the slices other
processes took meanwhile; the CPU time is the work the callback did). A callback is one turn's unit of
work: a socket read and its pump, a timer, a scheduled pump. The wrapper costs about a microsecond each.
"""

from __future__ import annotations

import asyncio.events
import atexit
import json
import sys
import time
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)


def _name(handle: asyncio.events.Handle) -> str:
    callback = getattr(handle, "_callback", None)
    name = getattr(callback, "__qualname__", None) or type(callback).__name__
    return f"{getattr(callback, '__module__', '?')}.{name}"


def main(argv: list[str]) -> int:
    if HERE in sys.path:                    # harness/profile.py must not shadow the standard library's
        sys.path.remove(HERE)
    split = argv.index("--")
    out, min_s = Path(argv[0]), float(argv[1] if split > 1 else 1.0) / 1000
    long: list[list] = []
    run = asyncio.events.Handle._run
    clock, perf, cpu = time.monotonic, time.perf_counter, time.thread_time

    def timed(handle: asyncio.events.Handle) -> None:
        start, t0, c0 = clock(), perf(), cpu()
        run(handle)
        took = perf() - t0
        if took >= min_s:
            long.append([start, took, cpu() - c0, _name(handle)])

    asyncio.events.Handle._run = timed
    atexit.register(lambda: out.write_text(json.dumps(long)))
    from router.cli import main as router_main
    return router_main(argv[split + 1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
