"""``meshrouter reload CONFIG``: make the running node of CONFIG read it again, and say what changed.

The file is checked first, here: an invalid one is reported (file, key, problem; exit 2) and the node is
not disturbed. Then the node process running that file gets SIGHUP (router.node.reconfigure applies the
difference) and the command reads the outcome from the node's management (`node.lastReload`): one line per
change, the keys that need a restart, and errors (exit 1 if any).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from router.config import ConfigError, NodeConfig, load_config

DEFAULT_TIMEOUT = 10.0


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("reload", help="make a running node re-read its config file and apply the "
                                           "difference (as SIGHUP does); prints what changed")
    p.add_argument("config", metavar="CONFIG", help="the config file the node runs with")
    p.add_argument("-b", "--bus", metavar="URL", default=None,
                   help="the node's AMQP URL for reading the outcome (default: its first normal listener)")
    p.add_argument("--pid", type=int, default=None, help="the node's pid (default: found from CONFIG)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"seconds to wait for the outcome (default {DEFAULT_TIMEOUT:g})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        _say(f"{exc}; the node was not asked to reload", error=True)
        return 2
    pids = [args.pid] if args.pid else node_pids(Path(args.config))
    if not pids:
        _say(f"no running node uses {args.config} (give --pid)", error=True)
        return 1
    if len(pids) > 1:
        _say(f"several nodes use {args.config} (pids {', '.join(map(str, pids))}): give --pid", error=True)
        return 1
    url = args.bus or local_url(config)
    before = _reloads(url, args.timeout) if url else None
    try:
        os.kill(pids[0], signal.SIGHUP)
    except ProcessLookupError:
        _say(f"node pid {pids[0]} is gone", error=True)
        return 1
    if url is None or before is None:
        print(f"node pid {pids[0]} asked to reload; its log says what changed (no management URL to read "
              "the outcome: give -b)", flush=True)
        return 0
    outcome = _wait_outcome(url, before, args.timeout)
    if outcome is None:
        _say(f"node pid {pids[0]} did not report a reload within {args.timeout:g} s", error=True)
        return 1
    return _report(outcome)


def node_pids(config: Path) -> list[int]:
    """Pids of node processes (``... run CONFIG``) started with this config file."""
    try:
        target = config.resolve(strict=True)
    except OSError:
        return []
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            args = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if "run" not in args or not any("router" in a for a in args[:3]):
            continue
        path = args[args.index("run") + 1] if args.index("run") + 1 < len(args) else ""
        try:
            if path and (cwd / path).resolve() == target:
                found.append(int(proc.name))
        except OSError:
            continue
    return sorted(found)


def local_url(config: NodeConfig) -> str | None:
    """The URL of the node's first normal listener with a fixed port, seen from this host."""
    for lc in config.listeners:
        if lc.role == "normal" and lc.port and lc.tls is None:
            host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(lc.host, lc.host)
            return f"amqp://{host}:{lc.port}"
    return None


def _reloads(url: str, timeout: float) -> int | None:
    node = _node(url, timeout)
    return None if node is None else int(node.get("reloads") or 0)


def _node(url: str, timeout: float) -> dict[str, Any] | None:
    from router.management.client import ManagementClient, ManagementClientError

    try:
        with ManagementClient(url, timeout=timeout) as client:
            (row,) = client.query_dicts("node", ["reloads", "lastReload"])
    except (ManagementClientError, ValueError):
        return None
    return row


def _wait_outcome(url: str, before: int, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = _node(url, max(0.5, deadline - time.monotonic()))
        if node is not None and int(node.get("reloads") or 0) > before and node.get("lastReload"):
            return node["lastReload"]
        time.sleep(0.1)
    return None


def _report(outcome: dict[str, Any]) -> int:
    changes, restart, errors = outcome.get("changes") or [], outcome.get("restart") or [], \
        outcome.get("errors") or []
    for line in changes:
        print(f"applied: {line}", flush=True)
    if restart:
        print(f"needs a restart (not applied): {', '.join(restart)}", flush=True)
    for line in errors:
        _say(line, error=True)
    if not (changes or restart or errors):
        print("nothing changed", flush=True)
    return 1 if errors else 0


def _say(message: str, error: bool = False) -> None:
    print(f"meshrouter: {'error: ' if error else ''}{message}", file=sys.stderr if error else sys.stdout,
          flush=True)
