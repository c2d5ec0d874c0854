"""``meshrouter mesh graph [TOPOLOGY | -b URL] --out PREFIX``: draw the live mesh to PREFIX.png/.svg.

The live state comes from the management agents (docs/MANAGEMENT.md): ``router-node`` of every node
gives the link state of every node (``linkState``: ``peer:cost``), hence the edges and their costs;
``address`` of every node gives the addresses it serves (``subscriberCount`` > 0).

- With a TOPOLOGY (of a mesh started by ``mesh up``), every node of the file is read at its own client
  URL; a node that is not running or does not answer is drawn as unreachable, and an edge of the file
  that no live link state reports is drawn as down.
- With ``-b URL``, the node there is read, then every node it reaches, through the mesh; nodes it
  knows but cannot reach are drawn as unreachable.

Exit codes: 0 written (problems with single nodes are noted on stderr); 1 no node could be read,
matplotlib is missing, or the files cannot be written; 2 bad arguments or topology.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from router.argtypes import positive_seconds
from router.management.security import ClientSecurity, add_security_options, security_from_args
from router.meshctl.commands import running_nodes
from router.meshctl.model import Topology
from router.meshctl.rundir import DEFAULT_ROOT, RunDir
from router.meshctl.topology import TopologyError, load_topology

if TYPE_CHECKING:           # Proton and networkx: imported only when the command runs
    import networkx as nx

    from router.management.client import ManagementClient

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
DEFAULT_TIMEOUT = 5.0
DEFAULT_OUT = "mesh-graph"


@dataclass
class NodeState:
    """What was read from one node (``read`` False: it did not answer, or was not tried)."""

    node_id: str
    read: bool = False
    served: list[str] = field(default_factory=list)


@dataclass
class MeshState:
    """The nodes and the link states (node -> peer -> cost) read from the mesh."""

    title: str
    nodes: dict[str, NodeState] = field(default_factory=dict)
    link_states: dict[str, dict[str, int]] = field(default_factory=dict)
    configured: list[tuple[str, str, int]] = field(default_factory=list)   # topology edges
    problems: list[str] = field(default_factory=list)

    def node(self, node_id: str) -> NodeState:
        return self.nodes.setdefault(node_id, NodeState(node_id))


# ------------------------------------------------------------------------------------------ reading


def parse_link_state(entries: Iterable[Any] | None) -> dict[str, int]:
    """``["B:1", "C:5"]`` -> ``{"B": 1, "C": 5}`` (malformed entries are skipped)."""
    out: dict[str, int] = {}
    for entry in entries or ():
        peer, sep, cost = str(entry).rpartition(":")
        if sep and peer and cost.isdigit():
            out[peer] = int(cost)
    return out


def served_addresses(rows: Iterable[Mapping[str, Any]], reply_to: str = "") -> list[str]:
    """Addresses with a local consumer, named ones first; node-local ``$`` addresses (``$management``,
    listed as ``_topo/0/<node>/$management``) and the reader's own reply address left out."""
    own = reply_to.rsplit("/", 1)[-1] if reply_to else None
    names = []
    for r in rows:
        ident = str(r.get("identity") or "")
        count = r.get("subscriberCount")
        if not ident or ident.startswith("$") or "/$" in ident or not isinstance(count, int) or count <= 0:
            continue
        if own and ident.endswith(own):
            continue
        names.append(ident)
    return sorted(names, key=lambda a: ("/temp." in a, a))


def _read_node(client: ManagementClient, state: MeshState, node_id: str, node: str | None) -> None:
    """router-node and address of one node into ``state`` (problems noted, node left unread)."""
    from router.management.client import ManagementClientError

    try:
        others = client.query_dicts("router-node", ["identity", "linkState"], node=node)
        addresses = client.query_dicts("address", ["identity", "subscriberCount"], node=node)
    except ManagementClientError as exc:
        state.problems.append(f"node {node_id}: {exc}")
        state.node(node_id)
        return
    for row in others:
        state.node(str(row["identity"]))
        if row.get("linkState") is not None:
            state.link_states[str(row["identity"])] = parse_link_state(row["linkState"])
    info = state.node(node_id)
    info.read = True
    info.served = served_addresses(addresses, client.reply_to)


def read_from_bus(url: str, timeout: float, security: ClientSecurity | None = None) -> MeshState:
    """The mesh as seen from the node at ``url``: that node, then every node it reaches."""
    from router.management.client import ManagementClient
    from router.management.stat import mesh_nodes

    with ManagementClient(url, timeout=timeout, security=security) as client:
        self_id, reachable, unreachable = mesh_nodes(client)
        state = MeshState(f"mesh seen from node {self_id} ({url})")
        _read_node(client, state, self_id, None)
        for node_id in reachable:
            _read_node(client, state, node_id, node_id)
        for node_id in unreachable:
            state.node(node_id)
            state.problems.append(f"node {node_id}: not reachable from {self_id}")
    return state


def read_from_topology(topology: Topology, run_dir: RunDir, timeout: float,
                       security: ClientSecurity | None = None) -> MeshState:
    """Every node of a topology, each read at its own client URL."""
    from router.management.client import ManagementClient, ManagementClientError
    from router.management.stat import own_id

    state = MeshState(f"mesh {topology.name}")
    state.configured = [(e.source, e.target, e.cost) for e in topology.edges]
    running = running_nodes(run_dir)
    for node_id in topology.node_ids:
        state.node(node_id)
        if node_id not in running:
            state.problems.append(f"node {node_id}: not running (no live pid in {run_dir.path})")
            continue
        url = topology.client_url(node_id)
        try:
            with ManagementClient(url, timeout=timeout, security=security) as client:
                seen = own_id(client)
                if seen != node_id:
                    state.problems.append(f"node {node_id}: {url} is node {seen}")
                    continue
                _read_node(client, state, node_id, None)
        except (ManagementClientError, ValueError) as exc:
            state.problems.append(f"node {node_id}: {exc}")
    return state


# ------------------------------------------------------------------------------------------- graph


def build_graph(state: MeshState) -> nx.Graph:
    """Nodes (``reachable``, ``served``) and edges (``cost``, ``up``): an edge is up when a node that
    answered reports it and both ends answered; configured edges nobody reports are down."""
    import networkx as nx

    g = nx.Graph(title=state.title)
    for node_id in sorted(state.nodes):
        info = state.nodes[node_id]
        g.add_node(node_id, reachable=info.read, served=list(info.served))
    for node_id, peers in state.link_states.items():
        for peer, cost in peers.items():
            for n in (node_id, peer):
                if n not in g:
                    g.add_node(n, reachable=False, served=[])
            up = g.nodes[node_id]["reachable"] and g.nodes[peer]["reachable"]
            if g.has_edge(node_id, peer):
                edge = g.edges[node_id, peer]
                edge["cost"] = max(edge["cost"], cost)
                edge["up"] = edge["up"] and up
            else:
                g.add_edge(node_id, peer, cost=cost, up=up)
    for a, b, cost in state.configured:
        if not g.has_edge(a, b):
            g.add_edge(a, b, cost=cost, up=False)
    return g


# ---------------------------------------------------------------------------------------- command


def command(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``mesh graph``; return the exit code."""
    from router.management.client import ManagementClientError
    from router.meshctl.graphplot import PlotUnavailable, draw

    out, err = out or sys.stdout, err or sys.stderr

    def error(message: str) -> None:
        print(f"meshrouter: error: {message}", file=err, flush=True)

    if (args.topology is None) == (args.bus is None):
        error("mesh graph: give either a TOPOLOGY file or -b URL")
        return EXIT_USAGE
    try:
        if args.topology is not None:
            topology = load_topology(args.topology)
            state = read_from_topology(topology, RunDir.for_topology(topology.name, args.dir), args.timeout,
                                       security_from_args(args))
        else:
            state = read_from_bus(args.bus, args.timeout, security_from_args(args))
    except TopologyError as exc:
        error(str(exc))
        return EXIT_USAGE
    except (ManagementClientError, ValueError) as exc:
        error(str(exc))
        return EXIT_FAILURE
    for problem in state.problems:
        print(f"meshrouter: {problem}", file=err, flush=True)
    if not any(n.read for n in state.nodes.values()):
        error("no node of the mesh could be read")
        return EXIT_FAILURE
    graph = build_graph(state)
    try:
        paths = draw(graph, Path(args.out))
    except PlotUnavailable as exc:
        error(str(exc))
        return EXIT_FAILURE
    except OSError as exc:
        error(f"cannot write {args.out}: {exc.strerror or exc}")
        return EXIT_FAILURE
    up = sum(1 for _, d in graph.nodes(data=True) if d["reachable"])
    print(f"{state.title}: {graph.number_of_nodes()} nodes ({up} read), {graph.number_of_edges()} edges; "
          f"wrote {' and '.join(str(p) for p in paths)}", file=out, flush=True)
    return EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``graph`` to the ``mesh`` subcommands."""
    help_text = "draw the live mesh (nodes, edges with costs, served addresses) to PREFIX.png and .svg"
    p = sub.add_parser("graph", help=help_text, description=help_text)
    p.add_argument("topology", metavar="TOPOLOGY", nargs="?",
                   help="topology file of a mesh started by 'mesh up' (or use -b)")
    p.add_argument("-b", "--bus", metavar="URL", help="URL of any node: discover the mesh from there")
    p.add_argument("--dir", metavar="DIR",
                   help=f"run directory of the TOPOLOGY mesh (default {DEFAULT_ROOT}/<name>)")
    p.add_argument("--out", metavar="PREFIX", default=DEFAULT_OUT,
                   help=f"write PREFIX.png and PREFIX.svg (default {DEFAULT_OUT})")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"per-node connection/response timeout (default {DEFAULT_TIMEOUT:g})")
    add_security_options(p)
    p.set_defaults(func=command)
