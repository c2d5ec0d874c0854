"""The router's own address space, and the rules that hold on every node with or without a policy.

Routing keys (router.addressing.address_key) put every node-scoped address under ``_topo/``: `$X` and
`_local/X` key to ``_topo/0/<self>/...`` as `_topo/0/<self>/X` does. So one prefix covers them all:

* ``_topo/0/<node>/temp.<15 chars>``: a reply (dynamic) address. Only the link that asked for it (a
  receiver with a dynamic source) consumes it: no client attach names it as a source, on any node.
  Anyone may send to it: that is how replies travel.
* ``_topo/0/<node>/$management``: the management agent of that node. Clients never consume it, so a
  request reaches only the addressed node's agent; sending to it needs a management level (levels.py),
  and the ingress node routes it to the agent's address for that level (`agent_key`).
* any other ``_topo/...`` key (the agent's level addresses, other `$` services, control addresses):
  never consumed by clients; sending to a `$` service other than `$management` is refused (so the
  agent's level addresses cannot be forged), to the rest it is open and leads nowhere.

The agent's level addresses: a request granted level L at its ingress node travels to
``_topo/0/<node>/$management`` + ``AGENT_SUFFIX[L]`` and arrives on the agent's receiver for L; the
agent's plain `$management` receiver answers at ``redacted``, so a request that was never mapped gets
the least.
"""

from __future__ import annotations

from router.policy.levels import READ, REDACTED, WRITE

TOPO = "_topo/"
EDGE = "_edge/"
MANAGEMENT = "$management"
AGENT_SUFFIX = {REDACTED: "", READ: "/read", WRITE: "/write"}

ORDINARY, REPLY, AGENT, SERVICE, INTERNAL = 0, 1, 2, 3, 4
KIND_NAMES = {REPLY: "a reply address", AGENT: "a management agent's address",
              SERVICE: "a node service address", INTERNAL: "in the router's own address space"}


def classify(key: str) -> int:
    """ORDINARY, REPLY, AGENT (a node's `$management`), SERVICE (any other `$...`) or INTERNAL."""
    if not key.startswith(TOPO):
        return ORDINARY
    if key.startswith("_topo/0/"):
        end = key.find("/", 8)
        if end > 8:
            rest = key[end + 1:]
            if rest.startswith("temp."):
                return REPLY
            if rest == MANAGEMENT:
                return AGENT
            if rest.startswith("$"):
                return SERVICE
    return INTERNAL


def agent_key(key: str, level: int) -> str:
    """The agent address of `key` (a node's `$management`) for a request granted `level` (> none)."""
    return key + AGENT_SUFFIX[level]


def agent_addresses(level: int) -> str:
    """The address the agent consumes for requests of `level` (`$management`, `$management/read`...)."""
    return MANAGEMENT + AGENT_SUFFIX[level]


def edge_problem(key: str) -> str | None:
    """Why a client may not send to `key` when it is qdrouterd's edge-router space (``_edge/<id>/...``, where
    qdstat --edge-router sends): this mesh has no edge routers (None: it is not that space)."""
    if not key.startswith(EDGE):
        return None
    return (f"{key}: there are no edge routers here (every node is an interior node of the mesh): address "
            "a node's agent as _topo/0/<node>/$management (qdstat -r NODE)")


def consume_problem(key: str) -> str | None:
    """Rule 1 and 2: why a client may not receive from `key` (None: it is not reserved)."""
    kind = classify(key)
    if kind == ORDINARY:
        return None
    if kind == REPLY:
        return (f"{key} is a reply address: only the link that asked for it (a dynamic source) may "
                "receive from it")
    if kind == AGENT:
        return f"{key} is a management agent's address: only the node's own agent receives from it"
    return f"{key} is {KIND_NAMES[kind]} (_topo/, _local/, $...): clients may not receive from it"
