"""Reading qdrouterd's entity types: every entity of a type as qdrouterd's attribute maps, and the entity a
request names by ``name`` or ``identity``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from router.management.qdr import configured, stats, vhosts
from router.management.qdr.schema import QdType
from router.management.qdr.source import Source
from router.management.requests import BAD_REQUEST, NOT_FOUND, Response

Rows = Callable[[Source], list[dict[str, Any]]]
Page = Callable[[Source, int, "int | None"], list[dict[str, Any]]]
ROWS: dict[str, Rows] = {
    "management": stats.management, "router": stats.router, "router.node": stats.nodes,
    "listener": configured.listeners, "connector": configured.connectors,
    "router.config.address": configured.address_rules, "policy": configured.policy,
    "vhost": vhosts.vhosts, "vhostStats": configured.vhost_stats,
}
PAGES: dict[str, Page] = {"connection": stats.connections, "router.link": stats.links,
                          "router.address": stats.addresses}


def rows(qd_type: QdType, src: Source, offset: int = 0, count: int | None = None) -> list[dict[str, Any]]:
    """Entities `offset` to `offset + count` of a type, as qdrouterd's attribute maps."""
    page = PAGES.get(qd_type.name)
    if page is not None:
        return page(src, offset, count)
    every = ROWS[qd_type.name](src) if qd_type.name in ROWS else []
    return every[offset:None if count is None else offset + count]


def find(qd_type: QdType, properties: Mapping, src: Source) -> dict[str, Any] | Response:
    """The entity a READ, UPDATE or DELETE names by ``identity`` or ``name`` (both must agree), or the
    error response."""
    ids = {k: properties[k] for k in ("name", "identity") if properties.get(k) is not None}
    if not ids:
        if qd_type.name == "management":
            return rows(qd_type, src)[0]
        return BAD_REQUEST, f"{qd_type.long}: no name or identity given", None
    if not all(isinstance(v, str) for v in ids.values()):
        return BAD_REQUEST, "'name' and 'identity' must be strings", None
    what = " ".join(f"{k}={v}" for k, v in ids.items())
    key, value = next(iter(ids.items()))
    for row in rows(qd_type, src):
        if row.get(key) == value:
            if any(row.get(k) != v for k, v in ids.items()):
                return BAD_REQUEST, f"conflicting {what}", None
            return row
    return NOT_FOUND, f"no {qd_type.long} with {what}", None
