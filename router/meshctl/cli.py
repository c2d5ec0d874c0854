"""``meshrouter mesh up|status|down|run TOPOLOGY [--dir DIR]`` and ``mesh graph`` (graph.py): the argument
parser and dispatch.

A bad topology or bad arguments print one line and exit 2 (never a traceback); see commands.py for the
rest of the exit codes.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from router.argtypes import positive_seconds
from router.meshctl import commands
from router.meshctl.rundir import DEFAULT_ROOT, RunDir
from router.meshctl.topology import TopologyError, load_topology


def add_parser(commands_: argparse._SubParsersAction) -> None:
    """Add the ``mesh`` subcommand group to the ``meshrouter`` parser."""
    mesh = commands_.add_parser("mesh", help="start, inspect and stop a local mesh from a topology file",
                                description="Run one node process per node of a topology file "
                                            "(topologies/*.yaml) on this machine.")
    sub = mesh.add_subparsers(dest="mesh_command", metavar="MESH_COMMAND", required=True)
    specs = (
        ("up", "start every node, wait until each one reaches all others, leave them running"),
        ("status", "show each node: pid, alive, client URL, neighbours, reachable, addresses"),
        ("down", "stop every node of the mesh (SIGTERM, SIGKILL after 10 s); idempotent"),
        ("run", "like up, then keep the mesh in the foreground until Ctrl-C, then down"),
    )
    for name, help_text in specs:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("topology", metavar="TOPOLOGY", help="topology file, e.g. topologies/four-node.yaml")
        p.add_argument("--dir", metavar="DIR",
                       help=f"run directory: node configs, logs, pid files (default {DEFAULT_ROOT}/<name>)")
        if name in ("up", "run"):
            p.add_argument("--timeout", type=positive_seconds, default=commands.DEFAULT_TIMEOUT, metavar="S",
                           help=f"give up (exit 1) if not converged after S seconds "
                                f"(default {commands.DEFAULT_TIMEOUT:g})")
            p.add_argument("--tls", action="store_true",
                           help="make a private CA and a certificate per node (in DIR/pki, with the openssl "
                                "command) and run every inter-router link over mutual TLS with SASL EXTERNAL")
        if name == "run":
            p.add_argument("--demo", metavar="SERVER:CALLER",
                           help="after start-up, make a few RPC calls from node CALLER to an echo server "
                                "on node SERVER (e.g. A:C)")
        if name == "status":
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.set_defaults(func=_dispatch, mesh_action=name)
    _add_render(sub)
    from router.meshctl.graph import add_parser as add_graph

    add_graph(sub)


def _add_render(sub: argparse._SubParsersAction) -> None:
    from router.meshctl import render

    help_text = ("write each node's config and a systemd unit, for running the mesh on several machines "
                 "(node hosts from the topology's nodes.<id>.host)")
    p = sub.add_parser("render", help=help_text, description=help_text)
    p.add_argument("topology", metavar="TOPOLOGY", help="topology file")
    p.add_argument("--out", metavar="DIR", required=True, help="where to write <id>.yaml and "
                                                                "meshrouter-<id>.service")
    p.add_argument("--config-dir", default=render.DEFAULT_CONFIG_DIR, metavar="DIR",
                   help=f"where the configs go on the hosts (default {render.DEFAULT_CONFIG_DIR})")
    p.add_argument("--exec", dest="exec_path", default=render.DEFAULT_EXEC, metavar="PATH",
                   help=f"the meshrouter command on the hosts (default {render.DEFAULT_EXEC})")
    p.add_argument("--user", default=render.DEFAULT_USER, help="the user the nodes run as "
                                                               f"(default {render.DEFAULT_USER})")
    p.add_argument("--bind", metavar="ADDRESS", default=None,
                   help="listen on ADDRESS (e.g. 0.0.0.0) instead of each node's host name")
    p.add_argument("--tls", action="store_true",
                   help="inter-router links over mutual TLS + SASL EXTERNAL with a private CA made in "
                        "DIR/pki (as mesh up --tls; also with tls: true in the topology)")
    p.set_defaults(func=_render)


def _render(args: argparse.Namespace) -> int:
    from router.meshctl.pki import PkiError
    from router.meshctl.render import RenderOptions, render

    try:
        topology = load_topology(args.topology)
    except TopologyError as err:
        print(f"meshrouter: error: {err}", file=sys.stderr, flush=True)
        return commands.EXIT_USAGE
    options = RenderOptions(args.config_dir, args.exec_path, args.user, args.bind, args.tls)
    try:
        written = render(topology, Path(args.out), options)
    except PkiError as exc:
        print(f"meshrouter: error: {exc}", file=sys.stderr)
        return commands.EXIT_FAILURE
    except OSError as exc:
        print(f"meshrouter: error: {exc.filename or args.out}: {exc.strerror or exc}", file=sys.stderr)
        return commands.EXIT_FAILURE
    print(f"mesh {topology.name}: {len(written) // 2} nodes rendered into {args.out}", flush=True)
    for path in written:
        print(f"  {path}", flush=True)
    return commands.EXIT_OK


def _context(args: argparse.Namespace) -> commands.Context | None:
    try:
        topology = load_topology(args.topology)
    except TopologyError as err:
        print(f"meshrouter: error: {err}", file=sys.stderr, flush=True)
        return None
    down = ["meshrouter", "mesh", "down", args.topology] + (["--dir", args.dir] if args.dir else [])
    return commands.Context(topology, RunDir.for_topology(topology.name, args.dir), shlex.join(down))


def _demo_nodes(ctx: commands.Context, text: str) -> tuple[str, str] | None:
    server, sep, caller = text.partition(":")
    nodes = ctx.topology.node_ids
    if not sep or server not in nodes or caller not in nodes:
        ctx.error(f"--demo: expected SERVER:CALLER with node ids of {ctx.topology.name} "
                  f"({', '.join(nodes)}), got {text!r}")
        return None
    return server, caller


def _dispatch(args: argparse.Namespace) -> int:
    ctx = _context(args)
    action = args.mesh_action
    if ctx is None:
        return commands.EXIT_USAGE
    try:
        if action == "up":
            return commands.up(ctx, args.timeout, args.tls)
        if action == "run":
            demo = _demo_nodes(ctx, args.demo) if args.demo else None
            if args.demo and demo is None:
                return commands.EXIT_USAGE
            return commands.run(ctx, args.timeout, demo, args.tls)
        if action == "status":
            return commands.status(ctx, args.json)
        return commands.down(ctx)
    except OSError as exc:            # e.g. the run directory cannot be created
        where = f"{exc.filename}: " if exc.filename else ""
        ctx.error(f"{where}{exc.strerror or exc}")
        return commands.EXIT_FAILURE

