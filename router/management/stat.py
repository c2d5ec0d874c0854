"""``meshrouter stat``: read a node's management entities (docs/MANAGEMENT.md) and print them.

``-g`` overview (default), ``-c`` connections, ``-l`` links, ``-a`` addresses, ``-n`` other nodes; of
the node at ``-b URL``, of node ``-r NODE`` read through the mesh, or of every reachable node
(``--all-nodes``). Tables for a terminal (router/management/tables.py) or ``--json``: an object node id
-> that node's entities (a list of objects keyed by attribute name; one object for ``-g``).

Exit codes: 0 ok; 1 cannot connect, no response in time, or an error status from an agent (one line
on stderr each); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from router.argtypes import positive_seconds
from router.management.bus import DEFAULT_BUS
from router.management.security import add_security_options, security_from_args
from router.management.tables import EDGES, GENERAL, NODES, VIEWS, View, heading, render

if TYPE_CHECKING:       # the client imports Proton: only when a command runs
    from router.management.client import ManagementClient

DEFAULT_TIMEOUT = 5.0
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

Entities = list[dict[str, Any]]


@dataclass
class Output:
    """Where ``stat`` prints: tables/JSON to ``out``, one line per problem to ``err``."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    def error(self, message: str) -> None:
        print(f"meshrouter: error: {message}", file=self.err, flush=True)

    def note(self, message: str) -> None:
        print(f"meshrouter: {message}", file=self.err, flush=True)


# ------------------------------------------------------------------------------------------ reading


def own_id(client: ManagementClient) -> str:
    """The id of the node the client is connected to."""
    rows = client.query_dicts("node", ["id"])
    if not rows or not rows[0].get("id"):
        raise ValueError("the node entity has no id")
    return str(rows[0]["id"])


def mesh_nodes(client: ManagementClient) -> tuple[str, list[str], list[str]]:
    """(connected node id, ids of the other reachable nodes, ids of known unreachable ones), sorted."""
    self_id = own_id(client)
    others = client.query_dicts("router-node", ["identity", "reachable"])
    reachable = sorted(str(r["identity"]) for r in others if r.get("reachable"))
    unreachable = sorted(str(r["identity"]) for r in others if not r.get("reachable"))
    return self_id, reachable, unreachable


def read_view(client: ManagementClient, view: View, node: str | None, everything: bool = True) -> Entities:
    """Every entity of the view's type on ``node`` (None: the connected node): all attributes, or
    (``everything=False``, for a table) the view's ``attributes`` (a router-node row's mobileAddresses
    lists every address of that node: 100,000 of them would not fit in one answer)."""
    if view is NODES and everything:
        return _router_nodes(client, node)
    if everything or view.attributes is None:
        return client.query_dicts(view.entity_type, node=node)
    return client.query_dicts(view.entity_type, list(view.attributes), node=node)


def _router_nodes(client: ManagementClient, node: str | None) -> Entities:
    """Every attribute of the router-node rows, `mobileAddresses` read in pages from the `mobile-address`
    rows (one row would not fit in one answer with 100,000 addresses; sorted, as the row gives them)."""
    names = [a for a in client.get_types(node=node).get("router-node", []) if a != "mobileAddresses"]
    rows = client.query_dicts("router-node", names, node=node)
    held: dict[str, list[str]] = {}
    for r in client.query_dicts("mobile-address", ["node", "address"], node=node):
        held.setdefault(str(r["node"]), []).append(str(r["address"]))
    for row in rows:
        row["mobileAddresses"] = sorted(held.get(str(row.get("identity")), []))
    return rows


def _id_of(client: ManagementClient, view: View, rows: Entities) -> str:
    """The connected node's id: from the rows of ``-g``, else asked for."""
    if view is GENERAL and rows and rows[0].get("id"):
        return str(rows[0]["id"])
    return own_id(client)


# ------------------------------------------------------------------------------------------- output


def print_tables(view: View, per_node: dict[str, Entities], out: TextIO) -> None:
    """One headed table per node, separated by a blank line."""
    blocks = [f"{heading(view, node_id)}\n\n{render(view, rows)}" for node_id, rows in per_node.items()]
    print("\n\n".join(blocks), file=out, flush=True)


def json_data(view: View, per_node: dict[str, Entities]) -> dict[str, Any]:
    """node id -> list of entities (``-g``: the one node entity)."""
    if view.key_value:
        return {node_id: (rows[0] if rows else None) for node_id, rows in per_node.items()}
    return dict(per_node)


# ---------------------------------------------------------------------------------------- command


def run(args: argparse.Namespace, output: Output | None = None) -> int:
    """Run ``stat`` with parsed arguments; return the exit code."""
    from router.management.client import ManagementClient, ManagementClientError, ManagementError

    output = output or Output()
    view = VIEWS[args.view]
    per_node: dict[str, Entities] = {}
    edge_rows: dict[str, Entities] = {}     # -n: each node's edges (or an edge's uplinks)
    failed = False
    try:
        with ManagementClient(args.bus, timeout=args.timeout,
                              security=security_from_args(args)) as client:
            targets: list[tuple[str | None, str | None]]     # (node id if known, node to address)
            if args.router:
                targets = [(args.router, args.router)]
            elif args.all_nodes:
                self_id, reachable, unreachable = mesh_nodes(client)
                targets = [(self_id, None)] + [(n, n) for n in reachable]
                if unreachable:
                    output.note(f"not reachable from {self_id}, skipped: {', '.join(unreachable)}")
            else:
                targets = [(None, None)]
            for known_id, node in targets:
                where = f"node {known_id}" if known_id else args.bus
                try:
                    rows = read_view(client, view, node, everything=args.json)
                    node_id = known_id or _id_of(client, view, rows)
                except ManagementError as exc:
                    output.error(f"{where}: {view.entity_type}: {exc.status_code} {exc.description}")
                    failed = True
                    continue
                except ManagementClientError as exc:    # timeout or lost: the next node may still answer
                    output.error(str(exc))
                    failed = True
                    continue
                per_node[node_id] = rows
                if view is NODES:
                    edges = _edges_of(client, node)
                    if edges:
                        edge_rows[node_id] = edges
    except ManagementClientError as exc:
        output.error(str(exc))
        failed = True
    except ValueError as exc:                 # a response that does not follow the spec
        output.error(f"{args.bus}: {exc}")
        failed = True
    if per_node:
        if args.json:
            print(json.dumps(json_data(view, per_node), indent=2), file=output.out, flush=True)
        else:
            print_tables(view, per_node, output.out)
            if edge_rows:
                print("", file=output.out)
                print_tables(EDGES, edge_rows, output.out)
    return EXIT_FAILURE if failed else EXIT_OK


def _edges_of(client: Any, node: str | None) -> Entities:
    """The `edge` entities of `node` (none from a node that does not know the type: an older one)."""
    from router.management.client import ManagementError

    try:
        return client.query_dicts("edge", node=node)
    except ManagementError:
        return []


def add_parser(commands: argparse._SubParsersAction,
               func: Callable[[argparse.Namespace], int] = run) -> argparse.ArgumentParser:
    """Add ``stat`` to the ``meshrouter`` parser."""
    p = commands.add_parser(
        "stat", help="show a node's statistics: overview, connections, links, addresses, nodes",
        description="Read the management agent of a node (or of every node of the mesh) and print "
                    "its statistics as tables, or as JSON.")
    p.add_argument("-b", "--bus", metavar="URL", default=DEFAULT_BUS,
                   help=f"URL of the node to connect to (default {DEFAULT_BUS})")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-r", "--router", metavar="NODE",
                       help="read node NODE through the mesh instead of the connected node")
    where.add_argument("--all-nodes", action="store_true",
                       help="read the connected node and every node it reaches")
    what = p.add_mutually_exclusive_group()
    for view, flags, help_text in (
        (GENERAL, ("-g", "--general"), "overview: counts, deliveries, outcomes (default)"),
        (VIEWS["c"], ("-c", "--connections"), "connections"),
        (VIEWS["l"], ("-l", "--links"), "links: credit, unsettled, delivered, outcomes"),
        (VIEWS["a"], ("-a", "--addresses"), "addresses: distribution, consumers, in/out/thru"),
        (VIEWS["n"], ("-n", "--nodes"), "other nodes: next hop, cost, reachability; edges, uplinks"),
    ):
        what.add_argument(*flags, dest="view", action="store_const", const=view.option, help=help_text)
    p.set_defaults(view=GENERAL.option, func=func)
    p.add_argument("--json", action="store_true", help="print JSON (node id -> entities) instead of tables")
    add_security_options(p)
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"give up after S seconds without a connection or response (default "
                        f"{DEFAULT_TIMEOUT:g})")
    return p
