"""The router under test of node_bench.py: our node (a generated config, or one given), the throw-away
cffi prototype, or any router by URL; started, located and stopped."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.paths import HOST, BenchError, python_exe
from harness.procs import free_port, node_config_yaml, spawn, stop_process, wait_for_lines


@dataclass
class Router:
    """The router under test: how to reach it and (if we started it) how to stop it."""

    kind: str                       # node | prototype | url
    url: str                        # amqp://HOST:PORT
    pid: int | None = None
    command: list[str] | None = None
    config: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    stdout_log: Path | None = None
    stderr_log: Path | None = None
    exit_code: int | None = None

    def alive(self) -> bool:
        """True while the router process (if known) is running."""
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return True
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def start_node(a: argparse.Namespace, tmp: Path) -> Router:
    """Start our node with a generated (or the given) config and wait for its ready line."""
    if a.config is not None:
        cfg_path, cfg = a.config.resolve(), a.config.read_text()
    else:
        cfg = node_config_yaml(free_port(), a.link_capacity)
        cfg_path = tmp / "node.yaml"
        cfg_path.write_text(cfg)
    cmd = [python_exe(), "-m", "router", "run", str(cfg_path)]
    proc, out, err = spawn(cmd, tmp, "router")
    router = Router("node", "", proc.pid, cmd, cfg, proc, out, err)
    patterns = [r"listening: role=normal url=(\S+)", r"ready: node=(\S+) pid=(\d+)"]
    listening, ready = wait_for_lines("the node", proc, out, err, patterns, a.ready_timeout)
    router.url = listening.group(1)
    if int(ready.group(2)) != proc.pid:
        print(f"warning: node reports pid {ready.group(2)}, started pid {proc.pid}", flush=True)
        router.pid = int(ready.group(2))
    return router


def start_prototype(a: argparse.Namespace, tmp: Path) -> Router:
    """Start the throw-away cffi prototype router and wait for its READY line."""
    if not a.prototype.exists():
        raise BenchError(f"prototype not found: {a.prototype} (use --prototype PATH)")
    port = free_port()
    cmd = [python_exe(), str(a.prototype), str(port), HOST]
    proc, out, err = spawn(cmd, tmp, "router")
    router = Router("prototype", f"amqp://{HOST}:{port}", proc.pid, cmd, None, proc, out, err)
    patterns = [r"READY pid=(\d+) port=(\d+)"]
    (ready,) = wait_for_lines("the prototype", proc, out, err, patterns, a.ready_timeout)
    router.pid = int(ready.group(1))
    return router


def external_router(a: argparse.Namespace) -> Router:
    """A router somebody else started: check that it accepts TCP connections."""
    url = a.router[len("url:"):]
    m = re.fullmatch(r"(?:amqp://)?([^:/]+):(\d+)/?", url)
    if not m:
        raise BenchError(f"cannot parse router url {url!r} (want amqp://HOST:PORT)")
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=3).close()
    except OSError as e:
        raise BenchError(f"router at {url} does not accept connections: {e}") from e
    if a.router_pid is not None and not Path(f"/proc/{a.router_pid}").exists():
        raise BenchError(f"no process with pid {a.router_pid}")
    return Router("url", f"amqp://{m.group(1)}:{m.group(2)}", a.router_pid)


def stop_router(router: Router) -> None:
    """Stop the router if we started it and remember its exit code."""
    if router.proc is not None:
        router.exit_code = stop_process(router.proc)


def start_router(a: argparse.Namespace, tmp: Path) -> Router:
    """Start (or locate) the router chosen with --router."""
    if a.router == "node":
        return start_node(a, tmp)
    if a.router == "prototype":
        return start_prototype(a, tmp)
    return external_router(a)


def router_pids(pid: int) -> list[int]:
    """The router's process and its children (a node's telemetry writer process): the CPU measured."""
    children = []
    for tid in os.listdir(f"/proc/{pid}/task") if Path(f"/proc/{pid}/task").exists() else ():
        try:
            children += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return [pid, *children]
