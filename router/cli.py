"""Command line: ``meshrouter run CONFIG``, ``meshrouter check-config FILE`` (see docs/CONTRACTS.md),
``meshrouter passwd FILE USER`` (router/security/users.py),
``meshrouter analyze RECORDS_DIR --out REPORT_DIR`` (router/analytics) and
``meshrouter mesh up|status|down|run|graph`` (router/meshctl) and ``meshrouter stat`` (router/management)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from router import PRODUCT, __version__
from router.config import ConfigError, NodeConfig, load_config
from router.logs import setup_logging

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2  # bad config (same code argparse uses for usage errors)

log = logging.getLogger(__name__)


def _error(message: str) -> None:
    print(f"{PRODUCT}: error: {message}", file=sys.stderr, flush=True)


def _load(path: str) -> NodeConfig | None:
    """Load a config, reporting a ConfigError as one line on stderr (None then)."""
    try:
        return load_config(path)
    except ConfigError as err:
        _error(str(err))
        return None


def _cmd_run(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return EXIT_CONFIG
    setup_logging(config.log_level, config.log_levels)
    # Imported here so that check-config and config errors never depend on the data plane.
    from router.launch import run_node

    try:
        result = run_node(config)
    except OSError as exc:  # e.g. a listener address already in use
        log.debug("node failed", exc_info=True)
        _error(str(exc))
        return EXIT_FAILURE
    return EXIT_OK if result is None else int(result)


def _cmd_check_config(args: argparse.Namespace) -> int:
    if _load(args.file) is None:
        return EXIT_CONFIG
    print(f"{args.file}: OK", flush=True)
    return EXIT_OK


def _cmd_passwd(args: argparse.Namespace) -> int:
    from router.security.users import passwd_command

    code, message = passwd_command(args.file, args.user, args.delete)
    if code:
        _error(message)
    else:
        print(message, flush=True)
    return code


CORE_COMMANDS = ("run", "check-config", "passwd")


def build_parser(only_core: bool = False) -> argparse.ArgumentParser:
    """The ``meshrouter`` argument parser; `only_core`: without the other commands' parsers, whose
    modules take ~0.1 s to import (a node's start-up does not pay for them)."""
    parser = argparse.ArgumentParser(prog=PRODUCT, description="AMQP 1.0 message-router node.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser("run", help="run a router node until SIGINT/SIGTERM")
    run.add_argument("config", metavar="CONFIG", help="YAML config file (see config/node.yaml)")
    run.set_defaults(func=_cmd_run)

    check = commands.add_parser("check-config", help="validate a config file and exit (0 = OK, 2 = bad)")
    check.add_argument("file", metavar="FILE", help="YAML config file")
    check.set_defaults(func=_cmd_check_config)

    pw = commands.add_parser("passwd", help="add or change a user of a SASL PLAIN users file "
                                           "(password from the prompt or one line of stdin)")
    pw.add_argument("file", metavar="FILE", help="users file (created if missing, mode 0600)")
    pw.add_argument("user", metavar="USER", help="user name")
    pw.add_argument("--delete", action="store_true", help="remove USER instead")
    pw.set_defaults(func=_cmd_passwd)
    if only_core:
        return parser

    from router.analytics.cli import add_parser as add_analyze  # no PySpark import until it runs

    add_analyze(commands)
    from router.meshctl.cli import add_parser as add_mesh

    add_mesh(commands)
    from router.management.stat import add_parser as add_stat  # no Proton import until it runs

    add_stat(commands)
    from router.management.reload import add_parser as add_reload

    add_reload(commands)
    from router.management.manage import add_parser as add_manage

    add_manage(commands)
    from router.management.console import add_parser as add_console

    add_console(commands)
    return parser


def parse_args(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.Namespace:
    """The command line as `parser` reads it, KEY=VALUE attributes after options included (``manage create
    --type listener port=5680``); usage errors exit as argparse's do (tests/docs parses the guides' commands
    with it)."""
    args, extra = parser.parse_known_args(list(words))
    if extra:
        if not hasattr(args, "attributes") or any(a.startswith("-") or "=" not in a for a in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.attributes += extra
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``meshrouter`` script and ``python -m router``; returns the exit code."""
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = parse_args(build_parser(only_core=bool(words) and words[0] in CORE_COMMANDS), words)
    except SystemExit as exc:  # --help, --version and usage errors: argparse has printed already
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_FAILURE)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:     # `meshrouter stat ... | head`: the reader has all it wanted
        _stdout_to_devnull()
        return EXIT_OK


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush raises nothing either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
