"""What the qdrouterd view of one request reads: the requester's view of the node's entities, the node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.management.qdr.rates import LinkRates


@dataclass
class Source:
    """``view``: router.management.access.EntityView at the request's level; ``server``: the node
    (router.node.server.NodeServer); ``rates``: the agent's link settlement rates; ``level``: the
    request's management level (router.policy.levels)."""

    view: Any
    server: Any
    rates: LinkRates
    level: int
