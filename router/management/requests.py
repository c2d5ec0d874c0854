"""Management requests → responses (sans-IO): operation, type and attribute checks, QUERY / READ.

`answer(properties, body, source)` takes a request's application properties and decoded body and
returns (status code, status description, response body). It never raises for a bad request: every
problem becomes a 4xx status naming it, and a failure while reading entities a 500.

Paging (as qdrouterd's agent and the AMQP management draft): a QUERY's application properties `offset`
(first row, default 0) and `count` (at most that many rows, default all) select a page of the table. A
response body that a peer could not decode (more than `MAX_VALUES` AMQP values: python-qpid-proton's
decoder silently drops what passes 65,535) is never sent: the requester gets `TOO_LARGE` (413) with a
description saying how many rows a page may hold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from router.management.entities import ATTRIBUTES, canonical_type

log = logging.getLogger(__name__)

OK, BAD_REQUEST, NOT_FOUND, TOO_LARGE, INTERNAL = 200, 400, 404, 413, 500
# values (each map, list, key and primitive is one) an answer's body may hold: below the 65,535 nodes of
# Proton-C's pn_data_t, which truncates a bigger body without an error
MAX_VALUES = 60_000
OPERATIONS = ("QUERY", "READ", "GET-TYPES")

Response = tuple[int, str, Any]


class EntitySource(Protocol):
    def rows(self, entity_type: str) -> list[dict[str, Any]]: ...


def _page(source: EntitySource, entity_type: str, offset: int, count: int | None) -> list[dict[str, Any]]:
    """Rows `offset` to `offset + count` of the source (through its `page` when it has one)."""
    page = getattr(source, "page", None)
    if page is not None:
        return page(entity_type, offset, count)
    return source.rows(entity_type)[offset:None if count is None else offset + count]


def answer(properties: object, body: object, source: EntitySource) -> Response:
    """The response to one management request."""
    if not isinstance(properties, Mapping):
        return BAD_REQUEST, "the request has no application properties (operation, type)", None
    operation = properties.get("operation")
    if not isinstance(operation, str) or operation.upper() not in OPERATIONS:
        return BAD_REQUEST, f"unknown operation {operation!r}: expected one of {', '.join(OPERATIONS)}", None
    operation = operation.upper()
    if operation == "GET-TYPES":
        return OK, "OK", {name: list(attrs) for name, attrs in ATTRIBUTES.items()}
    type_name = _type_name(properties)
    if not isinstance(type_name, str) or not type_name:
        return BAD_REQUEST, (f"{operation} needs a 'type' application property (or, with type "
                             f"{MANAGEMENT_NODE}, an 'entityType')"), None
    entity_type = canonical_type(type_name)
    if entity_type is None:
        return NOT_FOUND, f"unknown entity type {type_name!r}: expected one of {', '.join(ATTRIBUTES)}", None
    try:
        if operation == "QUERY":
            response = _query(entity_type, body, source, properties)
        else:
            response = _read(entity_type, properties, source)
    except Exception:                       # a bug reading the node must not cost the node
        log.exception("management: internal error answering %s %s", operation, entity_type)
        return INTERNAL, "internal error reading the node's state (logged on the node)", None
    return _bounded(operation, entity_type, response)


MANAGEMENT_NODE = "org.amqp.management"   # the AMQP Management draft's own type (qdmanage, rhea...)


def _type_name(properties: Mapping) -> object:
    """The entity type a request names: `type`, or in the AMQP Management draft's form (`type`
    org.amqp.management, `name` self) its `entityType`."""
    type_name = properties.get("type")
    if type_name == MANAGEMENT_NODE:
        return properties.get("entityType")
    return type_name


def _bounded(operation: str, entity_type: str, response: Response) -> Response:
    """`response`, or a 413 when its body holds more values than a peer can decode."""
    status, _, body = response
    if status != OK:
        return response
    values = count_values(body)
    if values <= MAX_VALUES:
        return response
    if operation == "QUERY":
        rows = len(body["results"])
        fixed = count_values({**body, "results": []})
        per_row = -(-(values - fixed) // rows)        # rounded up: rows with lists cost more
        fit = max(1, (MAX_VALUES - fixed) // per_row)
        return TOO_LARGE, (f"a QUERY answer of {rows} {entity_type} rows would hold {values} values, more "
                           f"than a message can carry ({MAX_VALUES}): ask for pages with the 'offset' and "
                           f"'count' application properties (about {fit} rows a page)"), None
    return TOO_LARGE, (f"the {operation} answer would hold {values} values, more than a message can "
                       f"carry ({MAX_VALUES}): QUERY fewer attributes"), None


def count_values(value: object) -> int:
    """The AMQP values `value` encodes to: one per primitive, map, list, and every key and item in them."""
    if isinstance(value, Mapping):
        return 1 + sum(1 + count_values(v) for v in value.values())
    if isinstance(value, list | tuple):
        return 1 + sum(count_values(v) if v.__class__ in (list, dict, tuple) else 1 for v in value)
    return 1


def _paging(properties: Mapping) -> tuple[int, int | None] | str:
    """(offset, count) of a QUERY's application properties, or what is wrong with them."""
    offset, count = properties.get("offset", 0), properties.get("count")
    if offset is None:
        offset = 0
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return f"'offset' must be a non-negative integer, not {offset!r}"
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        return f"'count' must be a non-negative integer, not {count!r}"
    return offset, count


def _query(entity_type: str, body: object, source: EntitySource, properties: Mapping) -> Response:
    known = ATTRIBUTES[entity_type]
    if body is None:
        names: list[str] = []
    elif not isinstance(body, Mapping):
        return BAD_REQUEST, "a QUERY body must be a map with 'attributeNames' (or absent)", None
    else:
        names = body.get("attributeNames") or []
        if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
            return BAD_REQUEST, "'attributeNames' must be a list of strings", None
    unknown = [n for n in names if n not in known]
    if unknown:
        return BAD_REQUEST, f"unknown attribute(s) of {entity_type}: {', '.join(unknown)}", None
    names = list(names) or list(known)
    paging = _paging(properties)
    if isinstance(paging, str):
        return BAD_REQUEST, paging, None
    offset, count = paging
    results = [[row.get(n) for n in names] for row in _page(source, entity_type, offset, count)]
    return OK, "OK", {"attributeNames": names, "results": results}


def _read(entity_type: str, properties: Mapping, source: EntitySource) -> Response:
    identity = properties.get("identity") or properties.get("name")
    if not isinstance(identity, str) or not identity:
        return BAD_REQUEST, "READ needs an 'identity' (or 'name') application property", None
    for row in source.rows(entity_type):
        if str(row.get("identity", row.get("id"))) == identity:
            return OK, "OK", row
    return NOT_FOUND, f"no {entity_type} with identity {identity!r}", None
