"""Meshes of meshrouter nodes for the benchmarks, started the way `meshrouter mesh up` does
(router.meshctl: one `python -m router run` per node, own session, logs in a run directory), from
topologies generated on free ports (the shipped topologies' ports may be taken), and stopped afterwards.

:func:`make_topology` and the shapes of topologies/ (:func:`chain_topology`, :func:`four_node_topology`,
:func:`diamond_topology`, :func:`single_topology`); :class:`Mesh` (start, wait for ready / converged /
a route, a node's state line, kill one node, CPU of the nodes, stop); :func:`running_mesh`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.paths import HOST, REPO, BenchError
from harness.procs import free_ports, kill_group, tail
from harness.sample import cpu_seconds
from router.meshctl import procs
from router.meshctl.nodeconfig import write_node_configs
from router.meshctl.probe import StateReader
from router.meshctl.topology import Topology, parse_topology

TOPOLOGIES = REPO / "topologies"
STATE_POLL = 0.025     # s between state requests while waiting for convergence (as `mesh up`)

Edge = tuple[str, str, int]  # (from, to, cost): `from` dials the inter-router listener of `to`
FOUR_NODE_EDGES: list[Edge] = [("B", "A", 1), ("D", "C", 1), ("C", "A", 1), ("D", "B", 1), ("D", "A", 1),
                               ("C", "B", 1)]


def shipped_settings(name: str) -> dict[str, Any]:
    """The shared settings (address rules, timers) of topologies/<name>.yaml, if it exists."""
    path = TOPOLOGIES / f"{name}.yaml"
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {k: v for k, v in data.items() if k not in ("name", "host", "nodes", "edges")}


def make_topology(name: str, nodes: Sequence[str], edges: Sequence[Edge], settings: dict[str, Any],
                  hello_interval: float | None = None, link_capacity: int | None = None,
                  telemetry: Path | None = None) -> Topology:
    """A validated topology with fresh free ports; a node that is the target of an edge gets an
    inter-router listener. ``hello_interval`` (peers lost after 3 of them), ``link_capacity`` and
    ``telemetry`` (a records directory), when given, override the settings."""
    targets = {to for _, to, _ in edges}
    ports = iter(free_ports(len(nodes) + len(targets)))
    settings = json.loads(json.dumps(settings))  # deep copy
    if hello_interval is not None:
        router = settings.setdefault("router", {})
        router["hello_interval"] = hello_interval
        router["hello_max_age"] = 3 * hello_interval
    if link_capacity is not None:
        settings["link_capacity"] = link_capacity
    if telemetry is not None:
        settings["telemetry"] = {"dir": str(telemetry)}
    data: dict[str, Any] = {
        "name": name,
        "host": HOST,
        "nodes": {n: {"client_port": next(ports),
                      **({"inter_router_port": next(ports)} if n in targets else {})} for n in nodes},
        "edges": [{"from": f, "to": t, "cost": c} for f, t, c in edges],
        **settings,
    }
    return parse_topology(data, f"<benchmark {name}>")


def chain_topology(**overrides: Any) -> Topology:
    """topologies/chain.yaml's shape: A - B - C, cost 1 (B dials A, C dials B)."""
    edges = [("B", "A", 1), ("C", "B", 1)]
    return make_topology("chain", "ABC", edges, shipped_settings("chain"), **overrides)


def four_node_topology(**overrides: Any) -> Topology:
    """topologies/four-node.yaml's shape: every node linked to every other one, cost 1."""
    return make_topology("four-node", "ABCD", FOUR_NODE_EDGES, shipped_settings("four-node"), **overrides)


def diamond_topology(**overrides: Any) -> Topology:
    """The reroute diamond: A-B 1, B-D 1, A-C 5, C-D 5, so A reaches D through B (cost 2, else 10)."""
    edges = [("B", "A", 1), ("C", "A", 5), ("D", "B", 1), ("D", "C", 5)]
    return make_topology("diamond", "ABCD", edges, shipped_settings("diamond"), **overrides)


def single_topology(**overrides: Any) -> Topology:
    """One node, A, with the four-node topology's settings."""
    return make_topology("single", "A", [], shipped_settings("four-node"), **overrides)


@dataclass
class Mesh:
    """One running mesh: a node process per topology node, started as `meshrouter mesh up` does."""

    topology: Topology
    run_dir: Path
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    t_spawn: float = 0.0            # CLOCK_REALTIME (time.time()) just before the first spawn

    def start(self) -> float:
        """Write the node configs and spawn every node in topology order; return t_spawn."""
        configs = write_node_configs(self.topology, self.run_dir)
        self.t_spawn = time.time()
        for node_id in self.topology.node_ids:
            self.children[node_id] = procs.spawn(configs[node_id], self.stdout(node_id), self.stderr(node_id))
        return self.t_spawn

    def stdout(self, node_id: str) -> Path:
        """The node's stdout file (listening/ready lines)."""
        return self.run_dir / f"{node_id}.stdout"

    def stderr(self, node_id: str) -> Path:
        """The node's stderr file (its log, with the state lines)."""
        return self.run_dir / f"{node_id}.stderr"

    def url(self, node_id: str) -> str:
        """amqp://HOST:PORT of the node's client listener."""
        return self.topology.client_url(node_id)

    def port(self, node_id: str) -> int:
        """The node's client port."""
        return self.topology.node(node_id).client_port

    def pid(self, node_id: str) -> int:
        """The node's process id."""
        return self.children[node_id].pid

    def pids(self) -> list[int]:
        """Process ids of the nodes still meant to run (not killed on purpose)."""
        return [p.pid for n, p in self.children.items() if n not in self.killed]

    def check_alive(self) -> None:
        """Raise if a node died that was not killed on purpose."""
        for node_id, proc in self.children.items():
            if node_id not in self.killed and proc.poll() is not None:
                raise BenchError(f"node {node_id} exited with code {proc.returncode}:\n"
                                 f"{tail(self.stderr(node_id))}")

    def alive(self) -> bool:
        """True while every node not killed on purpose runs."""
        return all(p.poll() is None for n, p in self.children.items() if n not in self.killed)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for every node's `ready:` line."""
        deadline = time.monotonic() + timeout
        while not all(procs.is_ready(self.stdout(n)) for n in self.children):
            self.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"mesh {self.topology.name}: nodes not ready after {timeout:.0f} s")
            time.sleep(0.01)

    def wait_converged(self, timeout: float = 30.0, address: tuple[str, str] | None = None) -> float:
        """Poll the nodes' state lines (SIGUSR1, as `mesh up`) until each reaches all others and, if
        address=(addr, node) is given, every other node knows that node serves addr (on a fresh mesh with
        that one consumer: the state line counts remote addresses, see _sees). Seconds waited."""
        self.wait_ready(timeout)
        t0 = time.monotonic()
        readers = {n: StateReader(p.pid, self.stderr(n)) for n, p in self.children.items()}
        ids = set(self.topology.node_ids)
        while True:
            for r in readers.values():
                r.read()
            if all(self._sees(n, r, ids, address) for n, r in readers.items()):
                return time.monotonic() - t0
            self.check_alive()
            if time.monotonic() - t0 > timeout:
                views = {n: r.mesh for n, r in readers.items()}
                raise BenchError(f"mesh {self.topology.name} not converged after {timeout:.0f} s: {views}")
            for r in readers.values():
                r.request()
            time.sleep(STATE_POLL)

    @staticmethod
    def _sees(node_id: str, reader: StateReader, ids: set[str], address: tuple[str, str] | None) -> bool:
        if reader.state is None or set(reader.mesh.get("reachable") or ()) != ids - {node_id}:
            return False
        if address is None or address[1] == node_id:
            return True
        known = reader.mesh.get("addresses")
        if isinstance(known, dict):         # a state line before issue 18 (5bb4358) held the address table
            return address[1] in known.get(address[0], [])
        # since then it counts: an address with a remote destination (the scenarios that wait for an
        # address do so on a fresh mesh whose one consumer is that address)
        return (reader.state.get("remote_addresses") or 0) >= 1

    def wait_route(self, node_id: str, dest: str, via: str, timeout: float = 10.0) -> float:
        """Wait until node_id's next hop to dest is via: reachability can converge before the cheapest
        path does (a far node is first learnt through whichever link state arrived first). Seconds waited."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            view = self.state(node_id)["mesh"]
            if view["next_hops"].get(dest) == via:
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                raise BenchError(f"{node_id} does not route to {dest} through {via} after {timeout:.0f} s: "
                                 f"{view}")
            time.sleep(STATE_POLL)

    def state(self, node_id: str, timeout: float = 3.0) -> dict[str, Any]:
        """A fresh state line of one node."""
        reader = StateReader(self.pid(node_id), self.stderr(node_id))
        reader.skip_existing()
        reader.request()
        deadline = time.monotonic() + timeout
        while not reader.read():
            if time.monotonic() > deadline:
                raise BenchError(f"node {node_id} wrote no state line in {timeout:.0f} s")
            time.sleep(0.01)
        assert reader.state is not None
        return reader.state

    def kill9(self, node_id: str) -> None:
        """SIGKILL one node on purpose."""
        self.killed.add(node_id)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid(node_id), signal.SIGKILL)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of every node so far."""
        return sum(cpu_seconds(p.pid) for p in self.children.values())

    def stop(self) -> dict[str, int | None]:
        """Stop every node (SIGTERM to its process group, SIGKILL after 10 s); node -> exit code."""
        for proc in self.children.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + procs.STOP_TIMEOUT
        for proc in self.children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self.children.values():
            if proc.poll() is None:
                kill_group(proc.pid)
                proc.wait()
        return {n: p.returncode for n, p in self.children.items()}


@contextlib.contextmanager
def running_mesh(topology: Topology, tmp: Path, keep: list[Path] | None = None) -> Iterator[Mesh]:
    """A mesh in its own run directory under tmp, always stopped on the way out. A node that exited
    non-zero on SIGTERM (other than the ones killed on purpose) is reported."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{topology.name}-", dir=tmp))
    mesh = Mesh(topology, run_dir)
    try:
        yield mesh
    finally:
        codes = mesh.stop()
        bad = {n: c for n, c in codes.items() if c not in (0, None) and n not in mesh.killed}
        if bad:
            print(f"warning: mesh {topology.name}: nodes exited with {bad}; logs in {run_dir}", flush=True)
            if keep is not None:
                keep.append(run_dir)
