"""The four-node mesh of the oslo tests and the waits on its control plane.

Node views come from the node's SIGUSR1 state line (tests/integration/test_node_tables.node_state).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.integration.test_mesh_control import mesh_view

REPO_ROOT = Path(__file__).resolve().parents[2]
HELLO = 0.2
OSLO_PREFIX = "openstack.org/om"

# topologies/four-node.yaml: "from" dials the inter-router listener of "to"; started in this order
NODES = {               # node -> (has an inter-router listener, nodes it dials)
    "A": (True, ()),
    "B": (True, ("A",)),
    "C": (True, ("A", "B")),
    "D": (False, ("C", "B", "A")),
}


def shipped_rules() -> tuple[tuple[str, str], ...]:
    """The address rules of config/node.yaml, so the tests exercise the shipped oslo rules."""
    cfg = yaml.safe_load((REPO_ROOT / "config" / "node.yaml").read_text())
    rules = tuple((r["prefix"], r["distribution"]) for r in cfg["addresses"]["rules"])
    assert dict(rules).get(f"{OSLO_PREFIX}/rpc/anycast") == "balanced", rules
    assert dict(rules).get(f"{OSLO_PREFIX}/rpc/unicast") == "closest", rules
    assert dict(rules).get(f"{OSLO_PREFIX}/rpc/multicast") == "multicast", rules
    assert dict(rules).get(f"{OSLO_PREFIX}/notify") == "balanced", rules
    return rules


def start(node_factory, node_id: str, *, listen: bool, connect: Iterable[int] = (), cost: int = 1,
          sections: dict | None = None):
    """test_mesh_control.start() with the shipped address rules; ``sections`` adds config sections
    (e.g. ``brokers:``)."""
    listeners = [{"host": "127.0.0.1", "port": 0, "role": "normal"}]
    if listen:
        listeners.append({"host": "127.0.0.1", "port": 0, "role": "inter-router", "cost": cost})
    extra = {
        "listeners": listeners,
        "connectors": [{"host": "127.0.0.1", "port": port, "cost": cost} for port in connect],
        "router": {"hello_interval": HELLO, "hello_max_age": HELLO * 3, "ra_interval_flux": 1.0},
        **(sections or {}),
    }
    return node_factory(node_id, rules=shipped_rules(), extra=extra)


def wait_until(pred: Callable[[], Any], timeout: float = 10.0,
               what: str | Callable[[], str] = "condition", interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            desc = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {desc}")
        time.sleep(interval)


def views(nodes) -> str:
    return "; ".join(f"{n.node_id}: {mesh_view(n)['addresses']}" for n in nodes)


def wait_address(nodes, address: str, holders: Iterable[str], timeout: float = 10.0) -> None:
    """Wait until every node knows exactly ``holders`` (minus itself) as the nodes with consumers
    for ``address`` (mobile-address propagation)."""
    nodes = list(nodes)
    holders = set(holders)

    def ok() -> bool:
        return all(mesh_view(n)["addresses"].get(address, []) == sorted(holders - {n.node_id})
                   for n in nodes)

    wait_until(ok, timeout, lambda: f"{address} known everywhere as served by {sorted(holders)}: "
               + views(nodes))
