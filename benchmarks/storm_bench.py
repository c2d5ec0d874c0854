#!/usr/bin/env python3
"""Reconnect storms (issue 33, point 1): 10,000 clients from 10 processes connecting to one node at once.

One node (a client listener on a fixed free port, ``max_connections`` 20,000, ``idle_timeout: 0``; the
listener's ``backlog`` is the node's default unless ``--backlog``). ``--processes`` client processes of
tests.support.storm hold ``--clients`` raw clients in all, each writing header, Open, Begin and
``--links`` receiver ATTACHes at once and counting as up when the node answered them all. Measured:

* **fresh**: every client dials at the same moment; the time until the last one is up;
* **restarts** (``--restarts``, default 2): the node is killed (``kill -9``) and started again with the
  same config; every client redials at once, then every 0.1 s (±50%) while refused; the time from the
  kill until the last client is up, and from the node's ``ready:`` line;
* for each: clients that had a TCP segment retransmitted (``TCP_INFO``: on loopback only a full accept
  queue, or a redial meeting one of the dead node's TIME_WAIT sockets, does that), the kernel's
  ``ListenOverflows`` counter (machine-wide: other processes count too), the node's CPU seconds per
  connection (the accept path's cost; compare ``--clients 1000``), its RSS, and its open-file limit.

    .venv/bin/python benchmarks/storm_bench.py
    .venv/bin/python benchmarks/storm_bench.py --backlog 128 --restarts 1     # the old accept queue
    .venv/bin/python benchmarks/storm_bench.py --clients 1000 --processes 2   # per-connection cost at 1/10

Prints a Markdown table and writes benchmarks/results/<timestamp>-storm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from tests.support.ports import free_port  # noqa: E402
from tests.support.storm import StormProcess  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
MIB = 1024 * 1024


class NodeRun:
    """A node process started from a config file (again after a kill, with the same file)."""

    def __init__(self, node_id: str, cfg: dict, run_dir: Path, launcher: list[str] | None = None) -> None:
        self.node_id = node_id
        self.launcher = launcher or [sys.executable, "-m", "router"]   # or benchmarks/harness/turns.py's
        self.cfg_path = run_dir / f"{node_id}.yaml"
        self.cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.run_dir = run_dir
        self.starts = 0
        self.proc: subprocess.Popen | None = None
        self.stderr = run_dir / f"{node_id}.stderr"

    def start(self, timeout: float = 60.0) -> float:
        """Start the node; return the time.monotonic() of its ``ready:`` line."""
        out = self.run_dir / f"{self.node_id}-{self.starts}.stdout"
        self.starts += 1
        with open(out, "wb") as o, open(self.stderr, "ab") as e:
            self.proc = subprocess.Popen([*self.launcher, "run", str(self.cfg_path)],
                                         stdout=o, stderr=e, stdin=subprocess.DEVNULL, cwd=REPO,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while f"ready: node={self.node_id}" not in out.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"node {self.node_id} did not start: {self.stderr.read_text()[-2000:]}")
            time.sleep(0.01)
        return time.monotonic()

    def kill9(self) -> float:
        t = time.monotonic()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        return t

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def rss(self) -> int:
        return _status_kib(self.proc.pid, "VmRSS") * 1024

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def fd_limit(self) -> str:
        for line in Path(f"/proc/{self.proc.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return "/".join(line.split()[3:5])
        return "?"


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listen_overflows() -> int:
    """The kernel's TcpExt ListenOverflows (machine-wide)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(row.get("ListenOverflows", 0))
    return 0


def somaxconn() -> int | None:
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return None


def collect(storms: list[StormProcess], timeout: float) -> list[dict] | None:
    """Every process's next round report (None if one did not come within ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    reports = []
    for s in storms:
        r = s.next_round(deadline - time.monotonic())
        if r is None:
            return None
        reports.append(r)
    return reports


def summary(reports: list[dict] | None, t0: float, ready: float | None, node: NodeRun, cpu0: float,
            overflows0: int, clients: int) -> dict[str, Any]:
    row: dict[str, Any] = {"overflows": listen_overflows() - overflows0, "rss_mib": node.rss() / MIB}
    row["node_cpu_s"] = node.cpu() - cpu0
    row["node_cpu_us_per_client"] = 1e6 * row["node_cpu_s"] / clients
    if reports is None:
        row["all_up_s"] = None
        return row
    last = max(r["all_up"] for r in reports)
    row.update(all_up_s=last - t0, after_ready_s=None if ready is None else last - ready,
               retransmitted=sum(r["retransmitted"] for r in reports),
               refused_dials=sum(r["refused_dials"] for r in reports),
               closed_by_node=sum(r["closed_by_node"] for r in reports))
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=10000)
    p.add_argument("--processes", type=int, default=10)
    p.add_argument("--links", type=int, default=1, help="receivers per client")
    p.add_argument("--backlog", type=int, help="the listener's backlog (default: the node's)")
    p.add_argument("--restarts", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every client")
    p.add_argument("--label", default="")
    args = p.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    port = free_port()
    listener: dict[str, Any] = {"host": "127.0.0.1", "port": port, "role": "normal",
                                "max_connections": 2 * args.clients}
    if args.backlog is not None:
        listener["backlog"] = args.backlog
    cfg = {"node": {"id": "S", "idle_timeout": 0, "log_level": "info"}, "listeners": [listener],
           "addresses": {"default": "balanced"}}
    out: dict[str, Any] = {"args": vars(args), "somaxconn": somaxconn(), "load_before": os.getloadavg(),
                           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rounds": []}
    storms: list[StormProcess] = []
    with tempfile.TemporaryDirectory(prefix="storm-bench-") as tmp:
        node = NodeRun("S", cfg, Path(tmp))
        try:
            node.start()
            out["fd_limit"] = node.fd_limit()
            per = args.clients // args.processes
            storms = [StormProcess(port, per, args.links, name=f"storm{i}") for i in range(args.processes)]
            time.sleep(1.0)
            cpu0, ov0 = node.cpu(), listen_overflows()
            t0 = time.monotonic()
            for s in storms:
                s.go()
            reports = collect(storms, args.timeout)
            clients = per * args.processes
            out["rounds"].append({"what": "fresh", **summary(reports, t0, None, node, cpu0, ov0, clients),
                                  "reports": reports})
            for i in range(args.restarts):
                if reports is None:
                    break
                time.sleep(2.0)
                ov0 = listen_overflows()
                t0 = node.kill9()
                ready = node.start()
                cpu0 = 0.0
                reports = collect(storms, args.timeout)
                out["rounds"].append({"what": f"restart {i + 1} (kill -9)",
                                      **summary(reports, t0, ready, node, cpu0, ov0, clients),
                                      "restart_s": ready - t0, "reports": reports})
        finally:
            for s in storms:
                s.close()
            node.stop()
    out["load_after"] = os.getloadavg()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{stamp}-storm{'-' + args.label if args.label else ''}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"{args.clients} clients x {args.links} links, {args.processes} processes, backlog "
          f"{args.backlog or 'default'} (somaxconn {out['somaxconn']}), open files {out['fd_limit']}, "
          f"load {out['load_before'][0]:.1f}")
    print("| round | all up (s) | after ready (s) | retransmitted | ListenOverflows | node CPU µs/client "
          "| RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in out["rounds"]:
        print(f"| {r['what']} | {_f(r['all_up_s'])} | {_f(r.get('after_ready_s'))} "
              f"| {r.get('retransmitted', '-')} | {r['overflows']} | {r['node_cpu_us_per_client']:.0f} "
              f"| {r['rss_mib']:.0f} |")
    print(f"\n(details: {path.relative_to(REPO)})")
    return 0 if all(r["all_up_s"] is not None for r in out["rounds"]) else 1


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
