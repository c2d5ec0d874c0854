"""``meshrouter mesh up|status|down|run`` on copies of the shipped topologies, rewritten to free ports.

:class:`Meshes` makes the copies for one test (each with its run directory) and stops, at the end,
whatever they started; :class:`Mesh` drives the CLI on one copy; :func:`up` runs ``mesh up`` and reads
what it printed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.nodes import REPO_ROOT
from tests.support.ports import free_ports

TOPOLOGIES = REPO_ROOT / "topologies"
FAST_TIMERS = {"hello_interval": 0.2, "hello_max_age": 0.6, "ra_interval_flux": 1.0}
# `mesh up` pads the ids to the longest one ("EA1   amqp://..." beside "INT.A amqp://...")
URL_RE = re.compile(r"^(?P<node>\S+) +(?P<url>amqp://127\.0\.0\.1:(?P<port>\d+))$", re.M)
CONVERGED_RE = re.compile(r"converged in (?P<total>[\d.]+) s \((?P<after_ready>[\d.]+) s after")
CLI_TIMEOUT = 60.0


def mesh_args(command: str, topology: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "router", "mesh", command, str(topology), "--dir", str(run_dir), *extra]


def pid_running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@dataclass
class Mesh:
    """One topology copy, its run directory, and the CLI to drive it."""

    topology: Path
    run_dir: Path
    touched: list[tuple[Path, Path]] = field(default_factory=list)

    def cli(self, command: str, *extra: str, topology: Path | None = None,
            check: int | None = None) -> subprocess.CompletedProcess[str]:
        topo = topology or self.topology
        self.touched.append((topo, self.run_dir))
        args = mesh_args(command, topo, self.run_dir, *extra)
        proc = subprocess.run(args, capture_output=True, text=True, timeout=CLI_TIMEOUT, cwd=REPO_ROOT,
                              stdin=subprocess.DEVNULL)
        if check is not None:
            assert proc.returncode == check, (f"{' '.join(args[3:])} exited {proc.returncode}, expected "
                                              f"{check}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}\n"
                                              f"{self.logs()}")
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def pids(self) -> dict[str, int]:
        return {p.stem: int(p.read_text()) for p in self.run_dir.glob("*.pid")}

    def status(self) -> dict:
        return json.loads(self.cli("status", "--json").stdout)

    def logs(self, lines: int = 15) -> str:
        out = []
        for path in sorted(self.run_dir.glob("*.stderr")):
            tail = [ln for ln in path.read_text(errors="replace").splitlines() if " state {" not in ln]
            out.append(f"--- {path.name}:\n" + "\n".join(tail[-lines:]))
        return "\n".join(out)


def rewrite(source: Path, dest: Path, *, fast: bool) -> Path:
    """A copy of ``source`` on free ports (and fast control-plane timers if ``fast``)."""
    data = yaml.safe_load(source.read_text())
    ports = iter(free_ports(3 * len(data["nodes"])))
    for spec in data["nodes"].values():
        spec["client_port"] = next(ports)
        for key in ("inter_router_port", "edge_port"):      # an interior's; edge_port: edge mode's
            if key in spec:
                spec[key] = next(ports)
    if fast:
        data["router"] = dict(FAST_TIMERS)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def up(m: Mesh, *extra: str) -> tuple[dict[str, str], float, float]:
    """``mesh up``: the printed client URLs and the convergence times (total, after the last ready)."""
    proc = m.cli("up", *extra, check=0)
    urls = {match["node"]: match["url"] for match in URL_RE.finditer(proc.stdout)}
    times = CONVERGED_RE.search(proc.stdout)
    assert times, proc.stdout
    return urls, float(times["total"]), float(times["after_ready"])


class Meshes:
    """The topology copies one test made (see :meth:`make`); :meth:`down` stops what they started."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.made: list[Mesh] = []

    def make(self, name: str, *, fast: bool = True) -> Mesh:
        """A rewritten copy of topologies/NAME.yaml and its CLI (``fast``: short control-plane timers)."""
        topo = rewrite(TOPOLOGIES / f"{name}.yaml", self.tmp / f"{name}-{len(self.made)}.yaml", fast=fast)
        m = Mesh(topo, self.tmp / f"run-{name}-{len(self.made)}")
        self.made.append(m)
        return m

    def down(self) -> list[str]:
        """``mesh down`` for every mesh touched; SIGKILL any node left behind. Returns those nodes."""
        leftovers = []
        for m in self.made:
            for topo, run_dir in dict.fromkeys(m.touched):
                if topo.exists() and run_dir.exists():
                    subprocess.run(mesh_args("down", topo, run_dir), capture_output=True, timeout=CLI_TIMEOUT,
                                   cwd=REPO_ROOT)
            for node_id, pid in m.pids().items():          # down failed: never leave a node behind
                if pid_running(pid):
                    os.kill(pid, signal.SIGKILL)
                    leftovers.append(f"{node_id} pid {pid}")
        return leftovers
