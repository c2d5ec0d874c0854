"""Terminal tables of management entities for ``meshrouter stat`` (pure functions, no I/O).

A :class:`View` says which entity type a ``stat`` option shows and how each column is made from one
entity (a dict attribute -> value as the agent returned it, docs/MANAGEMENT.md). Missing attributes
and nulls show as ``-``; booleans as ``yes``/``no``; seconds as ``H:MM:SS``; long lists are cut to a
few items and ``+N more``. Tables are drawn by ``tabulate``; cells are formatted here, so tabulate
never reinterprets a string (an id like ``1e5`` stays ``1e5``). Headers are short, as in ``qdstat``
(``undel``, ``unsett``, ``deliv``...): tabulate pads every column to its header's width.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]
TABLE_FORMAT = "simple"
LIST_LIMIT = 4          # items of a list cell shown before "+N more"
MISSING = "-"
FAST_ROWS = 200         # tables longer than this are drawn by simple_table, not tabulate


# ------------------------------------------------------------------------------------------- cells


def cell(value: Any) -> str:
    """One value as text: None -> ``-``, bool -> yes/no, float without noise, list -> short list."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, (list, tuple)):
        return short_list(value)
    return str(value)


def number(value: float) -> str:
    """A float with at most one decimal and no trailing zeros: 3.0 -> ``3``, 2.25 -> ``2.2``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def duration(seconds: Any) -> str:
    """Seconds as ``H:MM:SS`` (``0:01:05``), or ``Nd H:MM:SS`` from one day on; ``-`` if not a number."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        return MISSING
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{days}d {clock}" if days else clock


def short_list(items: Sequence[Any] | None, limit: int = LIST_LIMIT) -> str:
    """``A, B, C, D +2 more`` for a list longer than ``limit``; ``-`` for an empty list or None."""
    if not items:
        return MISSING
    shown = ", ".join(str(i) for i in items[:limit])
    extra = len(items) - limit
    return f"{shown} +{extra} more" if extra > 0 else shown


def auth(row: Row) -> str:
    """A connection's authentication: the SASL mechanism (or ``yes``) when authenticated, else ``no``."""
    if row.get("authenticated"):
        return str(row.get("saslMechanism") or "yes")
    return "no"


# ------------------------------------------------------------------------------------------- views


@dataclass(frozen=True)
class Column:
    """One table column: a header, and the cell of a row (by attribute name or by a function)."""

    header: str
    attr: str
    numeric: bool = False
    fmt: Callable[[Row], str] | None = None

    def text(self, row: Row) -> str:
        return self.fmt(row) if self.fmt is not None else cell(row.get(self.attr))


@dataclass(frozen=True)
class View:
    """What one ``stat`` option shows: an entity type, a title, the columns, the row order."""

    option: str
    entity_type: str
    title: str
    columns: tuple[Column, ...]
    sort_by: tuple[str, ...] = ("identity",)
    key_value: bool = False          # one entity as (attribute, value) rows, like ``qdstat -g``
    # the attributes a table asks for (None: all); --json always asks for all
    attributes: tuple[str, ...] | None = None


def _n(header: str, attr: str) -> Column:
    return Column(header, attr, numeric=True)


def _s(header: str, attr: str) -> Column:
    return Column(header, attr)


GENERAL = View("g", "node", "Overview", (
    _s("node id", "id"),
    _s("version", "version"),
    Column("uptime", "uptimeSeconds", fmt=lambda r: duration(r.get("uptimeSeconds"))),
    _n("connections", "connectionCount"),
    _n("links", "linkCount"),
    _n("addresses", "addrCount"),
    _n("other nodes", "nodeCount"),
    _n("deliveries ingress", "deliveriesIngress"),
    _n("deliveries egress", "deliveriesEgress"),
    _n("deliveries transit", "deliveriesTransit"),
    _n("accepted", "acceptedDeliveries"),
    _n("rejected", "rejectedDeliveries"),
    _n("released", "releasedDeliveries"),
    _n("modified", "modifiedDeliveries"),
    _n("presettled", "presettledDeliveries"),
    _n("dropped presettled", "droppedPresettledDeliveries"),
    _n("unroutable", "unroutableDeliveries"),
    _n("hop-limit drops", "hopLimitDrops"),
    _n("unsettled now", "unsettledDeliveries"),
    _n("settled after > 1 s", "deliveriesDelayed1Sec"),
    _n("settled after > 10 s", "deliveriesDelayed10Sec"),
    _n("stuck > 10 s", "deliveriesStuck"),
), sort_by=(), key_value=True)

CONNECTIONS = View("c", "connection", "Connections", (
    _s("id", "identity"),
    _s("host", "host"),
    _s("container", "container"),
    _s("role", "role"),
    _s("dir", "dir"),
    _s("security", "security"),
    Column("auth", "authenticated", fmt=auth),
    _s("user", "user"),
    Column("uptime", "uptimeSeconds", numeric=True, fmt=lambda r: duration(r.get("uptimeSeconds"))),
))

LINKS = View("l", "link", "Links", (
    _s("type", "linkType"),
    _s("dir", "linkDir"),
    _s("conn", "connectionId"),
    _s("peer", "peerNode"),
    _s("addr", "owningAddr"),
    _n("cap", "capacity"),
    _n("credit", "creditAvailable"),
    _n("undel", "undeliveredCount"),
    _n("unsett", "unsettledCount"),
    _n("deliv", "deliveryCount"),
    _n("presett", "presettledCount"),
    _n("acc", "acceptedCount"),
    _n("rej", "rejectedCount"),
    _n("rel", "releasedCount"),
    _n("mod", "modifiedCount"),
    _n("zero-credit s", "zeroCreditSeconds"),
), sort_by=("connectionId", "identity"))

ADDRESSES = View("a", "address", "Addresses", (
    _s("addr", "identity"),
    _s("distrib", "distribution"),
    _n("local", "subscriberCount"),
    _n("remote", "remoteCount"),
    _s("remote nodes", "remoteHostRouters"),
    _n("in", "deliveriesIngress"),
    _n("out", "deliveriesEgress"),
    _n("thru", "deliveriesTransit"),
))

NODES = View("n", "router-node", "Nodes", (
    _s("node", "identity"),
    _s("next hop", "nextHop"),
    _n("cost", "cost"),
    _s("neighbour", "neighbour"),
    _s("reachable", "reachable"),
    _s("link state", "linkState"),
    _s("valid origins", "validOrigins"),
), attributes=("identity", "reachable", "neighbour", "nextHop", "cost", "linkState", "validOrigins",
               "instance", "lsSeq", "mobileSeq", "addrCount"))   # not mobileAddresses: every address

#: printed after NODES by ``stat -n`` when the node has any (edge mode, docs/EDGE.md)
EDGES = View("e", "edge", "Edges", (
    _s("edge / uplink", "identity"),
    _s("role", "role"),
    _s("active", "active"),
    _n("conn", "connectionId"),
    _n("cost", "cost"),
    _n("proxied", "proxiedAddresses"),
    _n("watched", "watchedAddresses"),
))

VIEWS: dict[str, View] = {v.option: v for v in (GENERAL, CONNECTIONS, LINKS, ADDRESSES, NODES)}


# ------------------------------------------------------------------------------------------ tables


def _order(value: Any) -> tuple[int, Any]:
    """Sort key mixing numbers and text: numbers (or numeric strings) first, in numeric order."""
    if isinstance(value, bool) or value is None:
        return (2, str(value))
    if isinstance(value, (int, float)):
        return (0, value)
    text = str(value)
    return (0, int(text)) if text.isdigit() else (1, text)


def sort_rows(view: View, rows: Sequence[Row]) -> list[Row]:
    """The rows in the view's order (stable; by its ``sort_by`` attributes)."""
    return sorted(rows, key=lambda r: tuple(_order(r.get(a)) for a in view.sort_by))


def render(view: View, rows: Sequence[Row]) -> str:
    """The table of ``rows`` (entities of ``view.entity_type``), or ``(none)`` when there are none."""
    from tabulate import tabulate  # here: every command's parser loads this module (the views)

    if view.key_value:
        if not rows:
            return "(none)"
        entity = rows[0]
        body = [(c.header, c.text(entity)) for c in view.columns]
        return tabulate(body, headers=("attribute", "value"), tablefmt=TABLE_FORMAT,
                        colalign=("left", "right"), disable_numparse=True)
    if not rows:
        return "(none)"
    body = [[c.text(r) for c in view.columns] for r in sort_rows(view, rows)]
    headers = [c.header for c in view.columns]
    colalign = ["right" if c.numeric else "left" for c in view.columns]
    if len(body) > FAST_ROWS:
        return simple_table(body, headers, colalign)
    return tabulate(body, headers=headers, tablefmt=TABLE_FORMAT, colalign=colalign, disable_numparse=True)


def simple_table(body: Sequence[Sequence[str]], headers: Sequence[str], colalign: Sequence[str]) -> str:
    """tabulate's ``simple`` format for cells already formatted (the same text, tested against tabulate),
    in a fraction of its time: a table of 20,000 links took tabulate most of a second."""
    widths = [max([len(h) + 2] + [len(row[i]) for row in body]) for i, h in enumerate(headers)]
    right = [a == "right" for a in colalign]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(cells, widths, right, strict=True)).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(row) for row in body)])


def heading(view: View, node_id: str) -> str:
    """The line above a table: ``Links of node A``."""
    return f"{view.title} of node {node_id}"
