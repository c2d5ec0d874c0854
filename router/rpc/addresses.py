"""Address helpers for the oslo.messaging address space of the seed (``004_``, "addressing").

The router picks the distribution by the longest matching prefix; ``config/node.yaml`` and
``topologies/four-node.yaml`` map ``.../rpc/multicast`` to multicast, ``.../rpc/unicast`` to closest and
``.../rpc/anycast`` and ``.../notify`` to balanced. Any other address works too; these only save typing.
"""

from __future__ import annotations

ROOT = "openstack.org/om"


def rpc_anycast(exchange: str, topic: str, root: str = ROOT) -> str:
    """Shared subscription: one of the servers of ``topic`` gets each request."""
    return f"{root}/rpc/anycast/{exchange}/{topic}"


def rpc_unicast(exchange: str, topic: str, server: str, root: str = ROOT) -> str:
    """One named server of ``topic``."""
    return f"{root}/rpc/unicast/{exchange}/{topic}/{server}"


def rpc_multicast(exchange: str, topic: str, root: str = ROOT) -> str:
    """Fanout: every server of ``topic`` gets a copy."""
    return f"{root}/rpc/multicast/{exchange}/{topic}"


def notify(exchange: str, topic: str, priority: str | None = None, root: str = ROOT) -> str:
    """Notifications of ``topic`` (``.<priority>`` appended when given)."""
    base = f"{root}/notify/anycast/{exchange}/{topic}"
    return f"{base}.{priority}" if priority else base
