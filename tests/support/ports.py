"""Ports: free ones to configure, and the ones a running node printed when it started listening.

A node prints ``listening: role=ROLE url=URL`` on stdout for each listener (tests.support.nodes keeps
those lines as ``NodeProcess.stdout_lines``); the helpers here read them.
"""

from __future__ import annotations

import re
import socket
from typing import Any

LISTENING_RE = re.compile(r"^listening: role=(?P<role>\S+) url=(?P<url>(?P<scheme>amqps?|http)://"
                          r"(?P<host>[^:\s]+):(?P<port>\d+)\S*)\s*$")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports of 127.0.0.1 nobody listens on right now."""
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


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on right now (connecting to it is refused)."""
    return free_ports(1)[0]


def listening(node: Any, role: str | None = None, scheme: str | None = None) -> list[re.Match]:
    """The node's ``listening:`` lines (of ``role`` / ``scheme`` if given), in config order."""
    found = [m for line in node.stdout_lines if (m := LISTENING_RE.match(line))]
    return [m for m in found
            if (role is None or m["role"] == role) and (scheme is None or m["scheme"] == scheme)]


def inter_router_port(node: Any) -> int:
    """The port of the node's (first, plain) inter-router listener."""
    found = listening(node, "inter-router", "amqp")
    if not found:
        raise AssertionError(f"node {node.node_id} has no inter-router listener: {node.stdout_lines}")
    return int(found[0]["port"])


def listener_urls(node: Any) -> list[str]:
    """URLs (amqp:// or amqps://) of the node's AMQP listeners, in config order."""
    return [m["url"] for m in listening(node) if m["role"] in ("normal", "inter-router", "edge")]


def metrics_url(node: Any) -> str:
    """The URL of the node's ``/metrics`` endpoint."""
    found = listening(node, "metrics", "http")
    if not found:
        raise AssertionError(f"no metrics listening line in {node.stdout_lines}")
    return found[0]["url"]
