"""``mesh up``, ``mesh status``, ``mesh down`` and ``mesh run``: each returns its exit code.

``up`` starts every node detached (own session, output to files in the run directory, a pid file each),
then polls their ``state`` lines until every node reaches every other one, and leaves them running.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from router.meshctl import procs
from router.meshctl.model import Topology
from router.meshctl.nodeconfig import write_node_configs
from router.meshctl.pki import PkiError, mesh_pki
from router.meshctl.probe import StateReader, read_states
from router.meshctl.progress import Progress
from router.meshctl.rundir import RunDir

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
DEFAULT_TIMEOUT = 30.0
POLL_INTERVAL = 0.025     # s between state requests: the resolution of the convergence time


@dataclass
class Context:
    """What every command needs: the topology, its run directory, where to print, how to stop it."""

    topology: Topology
    run_dir: RunDir
    down_command: str = "meshrouter mesh down TOPOLOGY"
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    def error(self, message: str) -> None:
        print(f"meshrouter: error: {message}", file=self.err, flush=True)


class _Failed(Exception):
    """``mesh up`` cannot complete (a node died, or no convergence in time)."""


# ---------------------------------------------------------------------------------------- helpers


def running_nodes(run_dir: RunDir) -> dict[str, int]:
    """node id -> pid of every node of this run directory that is still running."""
    pids = {n: run_dir.read_pid(n) for n in run_dir.pid_nodes()}
    return {n: pid for n, pid in pids.items() if pid and procs.is_running(pid, run_dir.config(n))}


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    return lines[-1] if lines else "(no output)"


def _misses(topology: Topology, node_id: str, reader: StateReader, preferred: bool = False) -> list[str]:
    """What `node_id` does not see yet: nodes it cannot reach, and edges of the topology (a link to a
    neighbour) that are not up, e.g. ``D (no direct link)``. An edge sees the mesh once its traffic goes
    through an uplink; with `preferred` (a mesh just started: every interior is up) through its first."""
    spec = topology.node(node_id)
    if spec.is_edge:
        uplink = ((reader.state or {}).get("edge") or {}).get("uplink")
        if not uplink:
            return [f"{', '.join(spec.uplinks)} (no uplink)"]
        if preferred and uplink != spec.uplinks[0]:
            return [f"{spec.uplinks[0]} (its uplink is still {uplink})"]
        return []
    reachable = set(reader.mesh.get("reachable") or ())
    neighbors = set(reader.mesh.get("neighbors") or ())
    edge_peers = {e.target if e.source == node_id else e.source for e in topology.edges
                  if node_id in (e.source, e.target)}
    return [n if n not in reachable else f"{n} (no direct link)" for n in topology.interior_ids
            if n != node_id and (n not in reachable or (n in edge_peers and n not in neighbors))]


def _sees_all(topology: Topology, node_id: str, reader: StateReader, preferred: bool = False) -> bool:
    return reader.state is not None and not _misses(topology, node_id, reader, preferred)


# --------------------------------------------------------------------------------------------- up


@dataclass(frozen=True)
class Converged:
    """Seconds from the first spawn until every node saw every other, and from the last node ready."""

    total: float
    after_ready: float


def _converge(ctx: Context, children: Mapping[str, subprocess.Popen[bytes]], started: float,
              timeout: float) -> Converged:
    topology, run_dir = ctx.topology, ctx.run_dir
    readers = {n: StateReader(p.pid, run_dir.stderr(n)) for n, p in children.items()}
    ready_at: dict[str, float] = {}
    total = len(children)
    progress = Progress(ctx.err)
    try:
        while True:
            now = time.monotonic()
            for node_id, proc in children.items():
                code = proc.poll()
                if code is not None:
                    raise _Failed(f"node {node_id} exited with code {code} while starting: "
                                  f"{_last_line(run_dir.stderr(node_id))}")
                if node_id not in ready_at and procs.is_ready(run_dir.stdout(node_id)):
                    ready_at[node_id] = now
            for node_id in ready_at:
                readers[node_id].read()
            done = [n for n in ready_at if _sees_all(topology, n, readers[n], preferred=True)]
            if len(done) == total:
                return Converged(now - started, now - max(ready_at.values()))
            if len(ready_at) < total:
                progress.show(f"starting: {len(ready_at)}/{total} nodes ready", now - started)
            else:
                progress.show(f"converging: {len(done)}/{total} nodes see all others", now - started)
            if now - started > timeout:
                raise _Failed(_timeout_report(topology, timeout, ready_at, readers))
            for node_id in ready_at:
                readers[node_id].request()
            time.sleep(POLL_INTERVAL)
    finally:
        progress.done()


def _timeout_report(topology: Topology, timeout: float, ready_at: Mapping[str, float],
                    readers: Mapping[str, StateReader]) -> str:
    lines = [f"mesh {topology.name} did not converge within {timeout:g} s:"]
    for node_id in topology.node_ids:
        if node_id not in ready_at:
            lines.append(f"  {node_id}: not ready (no 'ready:' line on its stdout)")
        elif readers[node_id].state is None:
            lines.append(f"  {node_id}: no state line in its log")
        elif missing := _misses(topology, node_id, readers[node_id], preferred=True):
            lines.append(f"  {node_id} misses {', '.join(missing)}")
    return "\n".join(lines)


def up(ctx: Context, timeout: float = DEFAULT_TIMEOUT, tls: bool = False) -> int:
    """Start the mesh and wait until it has converged (exit 0, nodes left running) or fail (exit 1).
    `tls`: a private CA and per-node certificates in the run directory; inter-router links over mutual
    TLS with SASL EXTERNAL (router.meshctl.pki)."""
    topology, run_dir = ctx.topology, ctx.run_dir
    running = running_nodes(run_dir)
    if running:
        pids = ", ".join(f"{n} pid {p}" for n, p in running.items())
        ctx.error(f"mesh {topology.name} is already running in {run_dir.path} ({pids}); "
                  f"stop it first: {ctx.down_command}")
        return EXIT_USAGE
    for node_id in run_dir.pid_nodes():           # stale pid files of nodes that are gone
        run_dir.remove_pid(node_id)
    busy = []
    for n in topology.nodes:
        ports = [(n.client_port, f"nodes.{n.node_id}.client_port")]
        if n.inter_router_port is not None:
            ports.append((n.inter_router_port, f"nodes.{n.node_id}.inter_router_port"))
        busy += procs.ports_in_use(topology.host_of(n.node_id), ports)
    if busy:
        ctx.error(f"cannot start mesh {topology.name}: {'; '.join(busy)}")
        return EXIT_FAILURE
    try:
        pki = mesh_pki(topology, run_dir.path / "pki", tls)
    except PkiError as exc:
        ctx.error(f"cannot start mesh {topology.name}: {exc}")
        return EXIT_FAILURE
    configs = write_node_configs(topology, run_dir.path, pki)
    children: dict[str, subprocess.Popen[bytes]] = {}
    started = time.monotonic()
    try:
        for node_id in topology.node_ids:
            proc = procs.spawn(configs[node_id], run_dir.stdout(node_id), run_dir.stderr(node_id))
            children[node_id] = proc
            run_dir.write_pid(node_id, proc.pid)
        result = _converge(ctx, children, started, timeout)
    except (_Failed, KeyboardInterrupt) as exc:
        ctx.error(str(exc) or "interrupted")
        procs.stop({n: p.pid for n, p in children.items()})
        for node_id in children:
            run_dir.remove_pid(node_id)
        print(f"stopped the nodes; their logs are in {run_dir.path}/<node>.stderr", file=ctx.err, flush=True)
        return EXIT_FAILURE
    width = max(len(n) for n in topology.node_ids)
    print(f"mesh {topology.name}: {len(children)} nodes up, converged in {result.total:.2f} s "
          f"({result.after_ready:.2f} s after the last node was ready)", file=ctx.out)
    for node_id in topology.node_ids:
        print(f"{node_id:<{width}} {topology.client_url(node_id)}", file=ctx.out)
    print(f"logs and pid files in {run_dir.path}; stop with: {ctx.down_command}", file=ctx.out, flush=True)
    return EXIT_OK


# ----------------------------------------------------------------------------------------- status


def status_data(ctx: Context) -> dict[str, Any]:
    """Every node's pid, liveness, URL and mesh view (from a fresh state line), as JSON-ready data."""
    topology, run_dir = ctx.topology, ctx.run_dir
    pids = {n: run_dir.read_pid(n) for n in topology.node_ids}
    alive = {n: bool(p) and procs.is_running(p, run_dir.config(n)) for n, p in pids.items()}
    readers = {n: StateReader(pids[n] or 0, run_dir.stderr(n)) for n in topology.node_ids
               if alive[n] and procs.is_ready(run_dir.stdout(n))}
    read_states(readers)
    nodes: dict[str, Any] = {}
    for node_id in topology.node_ids:
        reader = readers.get(node_id)
        mesh = reader.mesh if reader is not None and reader.state is not None else None
        nodes[node_id] = {
            "pid": pids[node_id] if alive[node_id] else None,
            "alive": alive[node_id],
            "url": topology.client_url(node_id),
            "neighbors": list(mesh.get("neighbors") or []) if mesh is not None else None,
            "reachable": list(mesh.get("reachable") or []) if mesh is not None else None,
            "addresses": _count(mesh.get("addresses")) if mesh is not None else None,
            "sees_all": reader is not None and _sees_all(topology, node_id, reader),
        }
        edge = (reader.state or {}).get("edge") if reader is not None else None
        if edge is not None:            # edge mode: an interior's edges, an edge's uplink
            nodes[node_id]["edge"] = edge
            if edge.get("mode") == "edge" and mesh is not None:
                nodes[node_id]["neighbors"] = [edge["uplink"]] if edge.get("uplink") else []
    return {"mesh": topology.name, "dir": str(run_dir.path), "running": sum(alive.values()),
            "converged": all(v["sees_all"] for v in nodes.values()), "nodes": nodes}


def _count(value: Any) -> int:
    """The state line's address count (older nodes logged the table itself)."""
    return value if isinstance(value, int) else len(value or ())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(value) or "(none)"
    return str(value)


def status(ctx: Context, as_json: bool = False) -> int:
    """Print the mesh's status; exit 0 when every node runs, 1 otherwise."""
    data = status_data(ctx)
    total = len(data["nodes"])
    if as_json:
        print(json.dumps(data, indent=2), file=ctx.out, flush=True)
    else:
        state = "converged" if data["converged"] else "not converged"
        print(f"mesh {data['mesh']} ({data['dir']}): {data['running']}/{total} nodes running, {state}",
              file=ctx.out)
        rows = [("NODE", "PID", "ALIVE", "URL", "NEIGHBORS", "REACHABLE", "ADDRESSES", "EDGES")]
        with_edges = any(n.get("edge") for n in data["nodes"].values())    # else no EDGES column
        interiors = len(ctx.topology.interior_ids)
        for node_id, n in data["nodes"].items():
            edge = n.get("edge") or {}
            if edge.get("mode") == "edge":
                reach = "via uplink" if edge.get("uplink") else "no uplink"
                edges = "(edge)"
            else:
                reach = "-" if n["reachable"] is None else f"{len(n['reachable'])}/{interiors - 1}"
                edges = str(edge.get("active_edges", 0)) if edge else "-"
            rows.append((node_id, _cell(n["pid"]), _cell(n["alive"]), n["url"], _cell(n["neighbors"]),
                         reach, _cell(n["addresses"]), edges))
        if not with_edges:
            rows = [r[:-1] for r in rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=ctx.out)
        ctx.out.flush()
    return EXIT_OK if data["running"] == total else EXIT_FAILURE


# ------------------------------------------------------------------------------------- down / run


def down(ctx: Context) -> int:
    """Stop every node with a pid file in the run directory (SIGTERM, SIGKILL after 10 s); idempotent."""
    run_dir = ctx.run_dir
    running = running_nodes(run_dir)
    for node_id in run_dir.pid_nodes():
        if node_id not in running:
            run_dir.remove_pid(node_id)
    if not running:
        print(f"mesh {ctx.topology.name}: not running", file=ctx.out, flush=True)
        return EXIT_OK
    result = procs.stop(running)
    for node_id, pid in running.items():
        run_dir.remove_pid(node_id)
        print(f"{node_id}: {result[node_id]} (pid {pid})", file=ctx.out)
    print(f"mesh {ctx.topology.name}: down", file=ctx.out, flush=True)
    return EXIT_OK


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(ctx: Context, timeout: float = DEFAULT_TIMEOUT, demo: tuple[str, str] | None = None,
        tls: bool = False) -> int:
    """``up``, optionally an RPC demo (server node, caller node), then keep the mesh until Ctrl-C (or
    SIGTERM), then ``down``. A failed demo stops the mesh and exits 1. Ctrl-C at any moment after ``up``
    (during the demo too) stops the mesh."""
    code = up(ctx, timeout, tls)
    if code != EXIT_OK:
        return code
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if demo is not None and not _demo(ctx, demo):
            down(ctx)
            return EXIT_FAILURE
        print("mesh running; press Ctrl-C to stop it", file=ctx.out, flush=True)
        watched = running_nodes(ctx.run_dir)
        while watched:
            time.sleep(1.0)
            for node_id, pid in list(watched.items()):
                if not procs.is_running(pid):
                    print(f"node {node_id} (pid {pid}) exited; see {ctx.run_dir.stderr(node_id)}",
                          file=ctx.err, flush=True)
                    del watched[node_id]
        print(f"every node of mesh {ctx.topology.name} has stopped", file=ctx.out, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return down(ctx)


def _demo(ctx: Context, demo: tuple[str, str]) -> bool:
    from router.meshctl.demo import rpc_demo

    server, caller = demo
    topology = ctx.topology
    return rpc_demo(topology.client_url(server), server, topology.client_url(caller), caller, ctx.out)
