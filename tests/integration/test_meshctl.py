"""``meshrouter mesh up|status|down|run`` with real node processes.

Every test works on a copy of a shipped topology rewritten to free ports, in a run directory under
tmp_path; the ``mesh`` fixture runs ``mesh down`` for every mesh it touched, even when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO_ROOT / "topologies"
FAST_TIMERS = {"hello_interval": 0.2, "hello_max_age": 0.6, "ra_interval_flux": 1.0}
URL_RE = re.compile(r"^(?P<node>\S+) (?P<url>amqp://127\.0\.0\.1:(?P<port>\d+))$", re.M)
CONVERGED_RE = re.compile(r"converged in (?P<total>[\d.]+) s \((?P<after_ready>[\d.]+) s after")
CLI_TIMEOUT = 60.0


def mesh_args(command: str, topology: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "router", "mesh", command, str(topology), "--dir", str(run_dir), *extra]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports nobody listens on right now."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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


def wait_until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


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
    ports = iter(free_ports(2 * len(data["nodes"])))
    for spec in data["nodes"].values():
        spec["client_port"] = next(ports)
        if "inter_router_port" in spec:
            spec["inter_router_port"] = next(ports)
    if fast:
        data["router"] = dict(FAST_TIMERS)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Callable[..., Mesh]]:
    """``mesh("triangle", fast=True)``: a rewritten copy of topologies/triangle.yaml and its CLI."""
    made: list[Mesh] = []

    def make(name: str, *, fast: bool = True) -> Mesh:
        topo = rewrite(TOPOLOGIES / f"{name}.yaml", tmp_path / f"{name}-{len(made)}.yaml", fast=fast)
        m = Mesh(topo, tmp_path / f"run-{name}-{len(made)}")
        made.append(m)
        return m

    yield make

    leftovers = []
    for m in made:
        for topo, run_dir in dict.fromkeys(m.touched):
            if topo.exists() and run_dir.exists():
                subprocess.run(mesh_args("down", topo, run_dir), capture_output=True, timeout=CLI_TIMEOUT,
                               cwd=REPO_ROOT)
        for node_id, pid in m.pids().items():          # down failed: never leave a node behind
            if pid_running(pid):
                os.kill(pid, signal.SIGKILL)
                leftovers.append(f"{node_id} pid {pid}")
    assert not leftovers, f"mesh down left nodes running: {leftovers}"


def up(m: Mesh, *extra: str) -> tuple[dict[str, str], float, float]:
    """``mesh up``: the printed client URLs and the convergence times (total, after the last ready)."""
    proc = m.cli("up", *extra, check=0)
    urls = {match["node"]: match["url"] for match in URL_RE.finditer(proc.stdout)}
    times = CONVERGED_RE.search(proc.stdout)
    assert times, proc.stdout
    return urls, float(times["total"]), float(times["after_ready"])


def test_triangle_up_status_down(mesh):
    m = mesh("triangle")
    topo = yaml.safe_load(m.topology.read_text())
    urls, total, _ = up(m)
    assert urls == {n: f"amqp://127.0.0.1:{spec['client_port']}" for n, spec in topo["nodes"].items()}

    pids = m.pids()
    assert set(pids) == {"A", "B", "C"} and all(pid_running(p) for p in pids.values())
    status = m.status()
    assert status["running"] == 3 and status["converged"] is True
    for node_id, node in status["nodes"].items():
        assert node["alive"] is True and node["pid"] == pids[node_id]
        assert node["url"] == urls[node_id]
        assert node["reachable"] == sorted({"A", "B", "C"} - {node_id})
        assert node["neighbors"] == node["reachable"]              # a triangle: everyone is a neighbour
        assert node["addresses"] == 0
    table = m.cli("status", check=0).stdout
    assert "3/3 nodes running, converged" in table and re.search(r"^A\s+\d+\s+yes\s+amqp://", table, re.M)

    down = m.cli("down", check=0)
    assert "mesh triangle: down" in down.stdout
    assert not any(pid_running(p) for p in pids.values())
    assert m.pids() == {}
    assert "not running" in m.cli("down", check=0).stdout         # idempotent
    after = json.loads(m.cli("status", "--json", check=1).stdout)
    assert after["running"] == 0 and not any(n["alive"] for n in after["nodes"].values())


def test_four_node_mesh_converges_and_reports_its_time(mesh, record_property, capsys):
    m = mesh("four-node", fast=False)             # the shipped timers: only the ports are rewritten
    urls, total, after_ready = up(m)
    assert sorted(urls) == ["A", "B", "C", "D"]
    status = m.status()
    assert status["converged"] is True and status["running"] == 4
    assert all(len(n["neighbors"]) == 3 for n in status["nodes"].values())
    record_property("convergence_s", total)
    with capsys.disabled():
        print(f"\nfour-node mesh: converged {total:.2f} s after start, {after_ready:.2f} s after the last "
              f"node was ready (target: <= 0.5 s)")


def test_second_up_of_a_running_mesh_exits_2(mesh):
    m = mesh("chain")
    up(m)
    pids = m.pids()
    again = m.cli("up", check=2)
    assert "already running" in again.stderr and "mesh down" in again.stderr
    assert m.pids() == pids and all(pid_running(p) for p in pids.values())


def test_bad_topology_exits_2_naming_file_and_key(mesh, tmp_path):
    m = mesh("triangle")
    bad = tmp_path / "bad.yaml"
    data = yaml.safe_load(m.topology.read_text())
    data["edges"].append({"from": "C", "to": "Z"})
    bad.write_text(yaml.safe_dump(data))
    for command in ("up", "status", "down", "run"):
        proc = m.cli(command, topology=bad, check=2)
        assert proc.stderr.strip() == (f"meshrouter: error: {bad}: edges[3].to: unknown node 'Z' "
                                       f"(nodes: A, B, C)")
    assert not m.run_dir.exists()                                  # nothing was started or written


def test_up_that_times_out_reports_and_stops_the_nodes(mesh):
    m = mesh("triangle")
    proc = m.cli("up", "--timeout", "0.05", check=1)
    assert "did not converge within 0.05 s" in proc.stderr
    assert re.search(r"^  [ABC]: not ready|^  [ABC] misses", proc.stderr, re.M), proc.stderr
    assert m.pids() == {}


def test_up_refuses_a_taken_port(mesh):
    m = mesh("chain")
    port = yaml.safe_load(m.topology.read_text())["nodes"]["B"]["client_port"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        proc = m.cli("up", check=1)
    assert f"port {port} (nodes.B.client_port)" in proc.stderr
    assert m.pids() == {}


def test_run_keeps_the_mesh_until_ctrl_c_then_stops_it(mesh):
    m = mesh("chain")
    m.touched.append((m.topology, m.run_dir))
    proc = subprocess.Popen(mesh_args("run", m.topology, m.run_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("mesh running"):
                break
        assert lines and lines[-1].startswith("mesh running"), "".join(lines) + proc.stderr.read()
        pids = m.pids()
        assert len(pids) == 3 and m.status()["converged"] is True
        proc.send_signal(signal.SIGINT)                               # Ctrl-C
        out, _ = proc.communicate(timeout=CLI_TIMEOUT)
        assert proc.returncode == 0
        assert "mesh chain: down" in out
        assert not any(pid_running(p) for p in pids.values()) and m.pids() == {}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_run_with_demo_makes_rpc_calls_through_the_four_node_mesh(mesh):
    """What `make run` does: caller on C, echo server on A, replies back through the mesh."""
    m = mesh("four-node")
    m.touched.append((m.topology, m.run_dir))
    proc = subprocess.Popen(mesh_args("run", m.topology, m.run_dir) + ["--demo", "A:C"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                            start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(("mesh running", "RPC demo FAILED")):
                break
        text = "".join(lines)
        assert lines and lines[-1].startswith("mesh running"), text + proc.stderr.read()
        calls = [ln for ln in lines if ln.strip().startswith("call ")]
        assert len(calls) == 5 and all("from A" in ln for ln in calls), text
        assert "'hello 4' from A" in text
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
        assert proc.returncode == 0 and "mesh four-node: down" in out, out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_run_demo_with_unknown_node_exits_2(mesh):
    m = mesh("chain")
    proc = m.cli("run", "--demo", "A:Z", check=2)
    assert "--demo" in proc.stderr and m.pids() == {}
