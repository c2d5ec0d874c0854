"""What the broker gateway needs from the node it runs in (:class:`router.node.server.NodeServer` has it).

The gateway never reads the node's tables. It gets an in-process client connection (the node serves
one end of a socketpair like an accepted client), is told when the consumers of an address change,
and asks how many consumers an address has apart from its own links.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Protocol


class GatewayNode(Protocol):
    """The node API the gateway uses."""

    def add_broker_connection(self, sock: socket.socket, peer: str) -> object:
        """Serve ``sock`` as a client connection; returns the node's record of it (an opaque handle)."""

    def watch_address(self, address: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` after every pass of the node in which the consumers of ``address``
        (local links or remote nodes) changed; returns the function that stops it."""

    def consumers_of(self, address: str, exclude_conn: object = None) -> int:
        """Local consumers of ``address`` not on connection ``exclude_conn``, plus remote nodes."""
