#!/usr/bin/env python3
"""Where the memory of an idle client connection goes (issue 33, point 2: "<= 16 KiB per idle connection").

* **node**: one node (a client listener, ``max_connections`` 20,000, ``idle_timeout: 0``); 200 idle
  connections to warm it up, then ``--connections`` more (raw sockets, an AMQP header and an Open each, as
  benchmarks/scale_bench.py opens them); the node's RSS before and 5 s after: KiB per connection;
* **Proton alone**, in this process: ``--connections`` of each of ``pn_connection()``, ``pn_transport()``, and
  a server transport bound to a connection that took the same header and Open and answered them (what the
  node's Connection holds on the C side); RSS growth per object.

The rest of the node's figure is Python: the adapter's ``Connection``, its socket object, the event loop's
reader handle and selector key, the handshake timer (until ``handshake_timeout``), the policy's ``Access``.
The table's title names the transport buffers of the Proton in use: 1 KiB as `make` builds it
(scripts/build_proton.py), 8 KiB for the stock python-qpid-proton (20.3 against 11.0 KiB per connection).

    .venv/bin/python benchmarks/conn_memory_bench.py
    .venv/bin/python benchmarks/conn_memory_bench.py --connections 2000
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO / "benchmarks", REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import yaml  # noqa: E402
from harness.paths import HOST, python_exe  # noqa: E402
from harness.procs import free_ports, spawn, stop_process, wait_for_lines  # noqa: E402
from harness.rawamqp import open_frames  # noqa: E402
from harness.report import machine, markdown_table  # noqa: E402
from harness.sample import rss_bytes  # noqa: E402
from scale_bench import open_idle  # noqa: E402

KIB = 1024


def node_per_connection(n: int, logs: Path) -> tuple[float, float, float]:
    """(RSS before MiB, after MiB, KiB per idle connection) of a node given `n` idle connections."""
    (port,) = free_ports(1)
    cfg = logs / "node.yaml"
    cfg.write_text(yaml.safe_dump({"node": {"id": "M", "idle_timeout": 0}, "listeners": [
        {"host": HOST, "port": port, "role": "normal", "max_connections": 20_000}]}))
    proc, out, err = spawn([python_exe(), "-m", "router", "run", str(cfg)], logs, "node")
    try:
        wait_for_lines("node", proc, out, err, [r"ready: node="], 60)
        warm = open_idle(port, 200)
        time.sleep(2.0)
        before = rss_bytes(proc.pid)
        socks = open_idle(port, n)
        time.sleep(5.0)
        after = rss_bytes(proc.pid)
        for s in warm + socks:
            s.close()
    finally:
        stop_process(proc)
    return before / KIB / KIB, after / KIB / KIB, (after - before) / n / KIB


def proton_per_object(n: int) -> list[tuple[str, float]]:
    """KiB of RSS per Proton object, `n` of each made in this process (kept alive)."""
    from cproton_ffi import ffi, lib

    data = open_frames("bench")
    inp, out = ffi.new("char[]", data), ffi.new("char[]", 65536)
    collector = lib.pn_collector()

    def opened() -> tuple:
        c, t = lib.pn_connection(), lib.pn_transport()
        lib.pn_transport_set_server(t)
        lib.pn_transport_set_max_frame(t, 16384)
        lib.pn_sasl_allowed_mechs(lib.pn_sasl(t), b"ANONYMOUS")
        lib.pn_transport_require_auth(t, False)
        lib.pn_connection_collect(c, collector)
        lib.pn_transport_bind(t, c)
        lib.pn_transport_push(t, inp, len(data))
        while (e := lib.pn_collector_peek(collector)) != ffi.NULL:
            if lib.pn_event_type(e) == lib.PN_CONNECTION_REMOTE_OPEN:
                lib.pn_connection_open(c)
            lib.pn_collector_pop(collector)
        while (k := lib.pn_transport_pending(t)) > 0:
            lib.pn_transport_peek(t, out, min(k, 65536))
            lib.pn_transport_pop(t, min(k, 65536))
        return c, t

    kept: list = []
    rows = []
    make: Callable[[], object]
    for label, make in (("pn_connection()", lib.pn_connection), ("pn_transport()", lib.pn_transport),
                        ("server transport + connection, header and Open both ways", opened)):
        kept += [make() for _ in range(200)]
        gc.collect()
        before = rss_bytes(os.getpid())
        kept += [make() for _ in range(n)]
        rows.append((label, (rss_bytes(os.getpid()) - before) / n / KIB))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=5000)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.connections + 300 > hard:
        raise SystemExit(f"conn_memory_bench: {args.connections} connections need more than {hard} files")
    with tempfile.TemporaryDirectory(prefix="conn-memory-") as tmp:
        before, after, per = node_per_connection(args.connections, Path(tmp))
    rows = [[f"node: {args.connections} idle connections (RSS {before:.1f} -> {after:.1f} MiB)",
             f"{per:.2f}"]]
    rows += [[f"Proton alone: {label}", f"{kib:.2f}"] for label, kib in proton_per_object(args.connections)]
    from router.adapter.pnbuffers import initial_buffer

    print(f"\nMemory per idle client connection ({machine()}; Proton's transport buffers start at "
          f"{initial_buffer()} bytes)\n")
    print(markdown_table(["what", "KiB each"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
