"""``meshrouter manage``: change a running node over AMQP management, in the manner of qdmanage.

    meshrouter manage -b URL create --type listener host=127.0.0.1 port=5680 max_connections=100
    meshrouter manage -b URL update --type listener --identity 127.0.0.1:5680 max_connections=10
    meshrouter manage -b URL delete --type listener --identity 127.0.0.1:5680
    meshrouter manage -b URL query --type connector [--json]

Attributes are the entry's config keys (as in the YAML file); values are read as YAML scalars or flow
collections (`port=5680` is a number, `users=[alice,bob]` a list), and a dotted key (`tls.cert=...`)
sets a key of a nested map. What the node may change, and who may, is router.management.writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from router.argtypes import positive_seconds
from router.management.bus import DEFAULT_BUS
from router.management.security import add_security_options, security_from_args

DEFAULT_TIMEOUT = 10.0
OPERATIONS = ("create", "update", "delete", "query", "read")


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("manage", help="create, update, delete or read listeners, connectors, address "
                                           "rules and policy groups of a running node (AMQP management)")
    p.add_argument("operation", choices=OPERATIONS, help="what to do")
    p.add_argument("attributes", nargs="*", metavar="KEY=VALUE", help="the entry's config keys")
    p.add_argument("-b", "--bus", metavar="URL", default=DEFAULT_BUS,
                   help=f"URL of the node to connect to (default {DEFAULT_BUS})")
    p.add_argument("-r", "--router", metavar="NODE", help="manage node NODE through the mesh")
    p.add_argument("--type", required=True, metavar="TYPE",
                   help="listener, connector, address-rule, policy-group (query/read: any entity type)")
    p.add_argument("--identity", "--name", dest="identity", metavar="ID",
                   help="the entry (update, delete, read): host:port, a prefix, a group name")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_security_options(p)
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"give up after S seconds (default {DEFAULT_TIMEOUT:g})")
    p.set_defaults(func=run)


def parse_attributes(pairs: list[str]) -> dict[str, Any]:
    """``["port=5680", "tls.cert=/x.pem"]`` -> ``{"port": 5680, "tls": {"cert": "/x.pem"}}``."""
    attrs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{pair!r}: expected KEY=VALUE")
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            value = text
        where = attrs
        *parents, last = key.split(".")
        for name in parents:
            where = where.setdefault(name, {})
            if not isinstance(where, dict):
                raise ValueError(f"{pair!r}: {name} is not a map")
        where[last] = value
    return attrs


def run(args: argparse.Namespace) -> int:
    from router.management.client import ManagementClient, ManagementClientError, ManagementError

    try:
        attrs = parse_attributes(args.attributes)
    except ValueError as exc:
        print(f"meshrouter: error: {exc}", file=sys.stderr)
        return 2
    operation = args.operation.upper()
    if operation in ("UPDATE", "DELETE", "READ") and not args.identity:
        print(f"meshrouter: error: {args.operation} needs --identity", file=sys.stderr)
        return 2
    try:
        with ManagementClient(args.bus, timeout=args.timeout, security=security_from_args(args)) as client:
            if operation == "QUERY":
                answer: Any = client.query_dicts(args.type, node=args.router)
            elif operation == "READ":
                answer = client.read(args.type, args.identity, node=args.router)
            else:
                answer = client.request(operation, args.type, identity=args.identity,
                                        body=attrs if operation != "DELETE" else None, node=args.router)
    except ManagementError as exc:
        print(f"meshrouter: error: {args.operation} {args.type}: {exc.status_code} {exc.description}",
              file=sys.stderr)
        return 1
    except ManagementClientError as exc:
        print(f"meshrouter: error: {exc}", file=sys.stderr)
        return 1
    _print(operation, args, answer)
    return 0


def _print(operation: str, args: argparse.Namespace, answer: Any) -> None:
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True, default=str), flush=True)
        return
    if operation == "DELETE":
        print(f"deleted {args.type} {args.identity}", flush=True)
    elif operation in ("CREATE", "UPDATE"):
        done = "created" if operation == "CREATE" else "updated"
        print(f"{done} {args.type}: {json.dumps(answer.get('entry'), sort_keys=True)}", flush=True)
        for line in answer.get("changes") or []:
            print(f"  applied: {line}", flush=True)
    elif operation == "READ":
        print(yaml.safe_dump(answer, sort_keys=False, default_flow_style=False).rstrip(), flush=True)
    else:
        for row in answer:
            print(json.dumps(row, sort_keys=True, default=str), flush=True)
