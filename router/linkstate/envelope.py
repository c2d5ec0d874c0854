"""Control-message envelopes: addresses, the message map handed to the engine, and :class:`Outgoing`.

A control message travels as a plain map::

    {"to": "_topo/0/all/qdrouter", "opcode": "RA", "body": {...}, "trace": ["A", "B"]}

``to`` is the AMQP ``to`` address, ``opcode`` the application property, ``body`` the map body and
``trace`` the ids of the nodes the message went through, origin first (qdrouterd's ``x-opt-qd.trace``
annotation, whose entries are ``"0/<id>"``).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

from router.linkstate.messages import ControlMessageError

LinkId = Hashable

HELLO_ADDRESS = "_local/qdhello"
ROUTER_ALL = "_topo/0/all/qdrouter"
MOBILE_ALL = "_topo/0/all/qdrouter.ma"
_TOPO = "_topo/0/"


def router_address(node_id: str) -> str:
    """Where LSR and LSU for ``node_id`` go."""
    return f"{_TOPO}{node_id}/qdrouter"


def mobile_address(node_id: str) -> str:
    """Where MAR and absolute MAU for ``node_id`` go."""
    return f"{_TOPO}{node_id}/qdrouter.ma"


class Scope(enum.Enum):
    """Who a control message is for."""

    LOCAL = "local"  # this node only (HELLO, or no address)
    ALL = "all"  # every node: flooded
    NODE = "node"  # the node named in the address


def classify(address: str | None) -> tuple[Scope, str | None]:
    """``(scope, node id)`` of a control address; the node id is set for :attr:`Scope.NODE` only."""
    if not address:
        return Scope.LOCAL, None
    if address.startswith("amqp:"):
        address = address[5:]
    address = address.lstrip("/")
    if not address.startswith(_TOPO):
        return Scope.LOCAL, None
    node, _, _ = address[len(_TOPO):].partition("/")
    if node == "all":
        return Scope.ALL, None
    return Scope.NODE, node


def unpack(message: Any) -> tuple[str | None, str, Any, Sequence[str]]:
    """``(to, opcode, body, trace)`` of a message map; the body itself is checked by ``messages``.

    Runs once per message per hop, so the common types are tested first (``type(x) is ...``).
    """
    if type(message) is not dict and not isinstance(message, Mapping):
        raise ControlMessageError(f"control message must be a map, not {type(message).__name__}")
    get = message.get
    to = get("to")
    opcode = get("opcode")
    trace = get("trace") or ()
    if to is not None and not isinstance(to, str):
        raise ControlMessageError(f"'to' must be a string, not {to!r}")
    if not isinstance(opcode, str):
        raise ControlMessageError(f"'opcode' must be a string, not {opcode!r}")
    if type(trace) is not list and not isinstance(trace, list | tuple):
        raise ControlMessageError("'trace' must be a list of node ids")
    try:
        "".join(trace)  # the cheapest check that every entry is a string
    except TypeError:
        raise ControlMessageError("'trace' must be a list of node ids") from None
    return to, opcode, get("body"), trace


class Outgoing(NamedTuple):
    """Send ``message`` (a message map, see the module doc) on each link in ``links``.

    The adapter sends one AMQP message per link: ``to`` = :attr:`address`, application property
    ``opcode``, the map :attr:`body`, and :attr:`trace` as the trace annotation. Maps may be shared
    between several ``Outgoing``: never mutate them.
    """

    message: dict[str, Any]
    links: tuple[LinkId, ...]

    @property
    def opcode(self) -> str:
        return self.message["opcode"]

    @property
    def address(self) -> str:
        return self.message["to"]

    @property
    def body(self) -> dict[str, Any]:
        return self.message["body"]

    @property
    def trace(self) -> list[str]:
        return self.message["trace"]


def outgoing(address: str, opcode: str, body: dict[str, Any], trace: list[str],
             links: Sequence[LinkId]) -> Outgoing:
    """Build an :class:`Outgoing` for ``links``."""
    return Outgoing({"to": address, "opcode": opcode, "body": body, "trace": trace}, tuple(links))
