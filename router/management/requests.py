"""Management requests → responses (sans-IO): operation, type and attribute checks, QUERY / READ.

`answer(properties, body, source)` takes a request's application properties and decoded body and
returns (status code, status description, response body). It never raises for a bad request: every
problem becomes a 4xx status naming it, and a failure while reading entities a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from router.management.entities import ATTRIBUTES, canonical_type

log = logging.getLogger(__name__)

OK, BAD_REQUEST, NOT_FOUND, INTERNAL = 200, 400, 404, 500
OPERATIONS = ("QUERY", "READ", "GET-TYPES")

Response = tuple[int, str, Any]


class EntitySource(Protocol):
    def rows(self, entity_type: str) -> list[dict[str, Any]]: ...


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
            return _query(entity_type, body, source)
        return _read(entity_type, properties, source)
    except Exception:                       # a bug reading the node must not cost the node
        log.exception("management: internal error answering %s %s", operation, entity_type)
        return INTERNAL, "internal error reading the node's state (logged on the node)", None


MANAGEMENT_NODE = "org.amqp.management"   # the AMQP Management draft's own type (qdmanage, rhea...)


def _type_name(properties: Mapping) -> object:
    """The entity type a request names: `type`, or in the AMQP Management draft's form (`type`
    org.amqp.management, `name` self) its `entityType`."""
    type_name = properties.get("type")
    if type_name == MANAGEMENT_NODE:
        return properties.get("entityType")
    return type_name


def _query(entity_type: str, body: object, source: EntitySource) -> Response:
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
    results = [[row.get(n) for n in names] for row in source.rows(entity_type)]
    return OK, "OK", {"attributeNames": names, "results": results}


def _read(entity_type: str, properties: Mapping, source: EntitySource) -> Response:
    identity = properties.get("identity") or properties.get("name")
    if not isinstance(identity, str) or not identity:
        return BAD_REQUEST, "READ needs an 'identity' (or 'name') application property", None
    for row in source.rows(entity_type):
        if str(row.get("identity", row.get("id"))) == identity:
            return OK, "OK", row
    return NOT_FOUND, f"no {entity_type} with identity {identity!r}", None
