"""Requests in qdrouterd's terms -> responses: the management node's operations, QUERY and READ of
qdrouterd's entity types, and their writes (router.management.qdr.changes).

A request is one of these (:func:`handles`) when its operation is one only qdrouterd's management node
has (``GET-ATTRIBUTES``, ``GET-OPERATIONS``, ``GET-ANNOTATIONS``, ``GET-MGMT-NODES``...), when it is
``GET-TYPES`` addressed to the management node (``type`` ``org.amqp.management``, as qdmanage sends it), or
when the type it names (``entityType`` for the management node, else ``type``) is one of qdrouterd's:
a long name, or a short one this node does not use for its own types (``router.link``, ``vhost``).

As qdrouterd's core agent: a QUERY's ``attributeNames`` may name attributes the type does not have (their
values are null); ``offset`` and ``count`` page the table. Unlike it, a list of more than
`MAX_ATTRIBUTE_NAMES` names is refused (qdrouterd silently answers every attribute then).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from router.management.entities import ATTRIBUTES
from router.management.qdr import changes, stats
from router.management.qdr.reading import find, rows
from router.management.qdr.schema import (
    MANAGEMENT_NODE,
    NODE_OPERATIONS,
    TYPES,
    QdType,
    get_attributes,
    get_operations,
    get_schema,
    get_types,
    resolve,
)
from router.management.qdr.source import Source
from router.management.requests import BAD_REQUEST, INTERNAL, NOT_FOUND, OK, Response, _bounded, _paging
from router.management.writes import TYPES as OUR_WRITABLE

log = logging.getLogger(__name__)

NOT_IMPLEMENTED = 501
MAX_ATTRIBUTE_NAMES = 63
#: qdrouterd's short names that are not this node's own type names
SHORT = frozenset(TYPES) - frozenset(ATTRIBUTES)
_ONLY_QDR = ("GET-ATTRIBUTES", "GET-OPERATIONS", "GET-ANNOTATIONS", "GET-MGMT-NODES", "GET-SCHEMA",
             "GET-JSON-SCHEMA", "GET-LOG", "PROFILE")
_ENTITY_OPERATIONS = ("QUERY", "READ", "CREATE", "UPDATE", "DELETE")
_UNSUPPORTED = {
    "GET-LOG": "GET-LOG has no equivalent here: the node logs to its stderr (node.log_level and "
               "node.log_levels say what it writes)",
    "PROFILE": "PROFILE has no equivalent here: profile the node process with a Python profiler",
}


def _operation(properties: Mapping) -> str | None:
    operation = properties.get("operation")
    return operation.upper() if isinstance(operation, str) else None


def _type_name(properties: Mapping) -> object:
    if properties.get("type") == MANAGEMENT_NODE:
        return properties.get("entityType")
    return properties.get("type")


def handles(properties: object) -> bool:
    """Whether a request's application properties make it one of qdrouterd's (module docstring)."""
    if not isinstance(properties, Mapping):
        return False
    operation = _operation(properties)
    if operation in _ONLY_QDR:
        return True
    if operation == "GET-TYPES":
        return properties.get("type") == MANAGEMENT_NODE
    return resolve(_type_name(properties), SHORT) is not None


def answer(properties: Mapping, body: object, src: Source, writer: Any) -> Response:
    """The response to a request that `handles` says is qdrouterd's."""
    operation = _operation(properties)
    name = _type_name(properties)
    qd_type = resolve(name, SHORT)
    try:
        if operation in ("GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-ANNOTATIONS",
                         "GET-MGMT-NODES"):
            return _node_operation(operation, name, qd_type, src)
        if operation == "GET-SCHEMA":
            return OK, "OK", get_schema()
        if operation == "GET-JSON-SCHEMA":
            indent = properties.get("indent")
            wanted = indent if isinstance(indent, int) and not isinstance(indent, bool) and 0 <= indent <= 8 \
                else None
            return OK, "OK", json.dumps(get_schema(), indent=wanted)
        if operation in _UNSUPPORTED:
            return NOT_IMPLEMENTED, _UNSUPPORTED[operation], None
        if qd_type is None:
            return NOT_FOUND, f"unknown entity type {name!r}", None
        if operation not in _ENTITY_OPERATIONS:
            return BAD_REQUEST, (f"unknown operation {properties.get('operation')!r}: expected one of "
                                 f"{', '.join(_ENTITY_OPERATIONS + NODE_OPERATIONS[1:])}"), None
        if operation == "QUERY":
            return _bounded(operation, qd_type.long, _query(qd_type, body, properties, src))
        if operation == "READ":
            return _bounded(operation, qd_type.long, _read(qd_type, properties, src))
        return changes.write(operation, qd_type, properties, body, src, writer)
    except Exception:                       # a bug must not cost the node
        log.exception("management: internal error answering %s %s", operation, name)
        return INTERNAL, "internal error reading the node's state (logged on the node)", None


# ---- the management node ----------------------------------------------------------------------------------
def _node_operation(operation: str, name: object, qd_type: QdType | None, src: Source) -> Response:
    if operation == "GET-MGMT-NODES":
        return OK, "OK", stats.mgmt_nodes(src)
    if operation == "GET-ANNOTATIONS":
        return OK, "OK", {}
    ours = name in ATTRIBUTES
    if name is not None and qd_type is None and not ours:
        return NOT_FOUND, f"unknown entity type {name!r}", None
    if operation == "GET-TYPES":
        answer = get_types(qd_type) if not ours else {}
        own = {t: [] for t in ATTRIBUTES}
    elif operation == "GET-ATTRIBUTES":
        answer = get_attributes(qd_type) if not ours else {}
        own = {t: list(a) for t, a in ATTRIBUTES.items()}
    else:
        answer = get_operations(qd_type) if not ours else {}
        own = {t: list(("CREATE", "READ", "UPDATE", "DELETE") if t in OUR_WRITABLE else ("READ",))
               for t in ATTRIBUTES}
    if name is None:
        answer.update(own)
    elif ours:
        answer = {name: own[name]}
    return OK, "OK", answer


# ---- QUERY and READ ------------------------------------------------------------------------------------
def _query(qd_type: QdType, body: object, properties: Mapping, src: Source) -> Response:
    if body is None:
        names: Any = []
    elif not isinstance(body, Mapping):
        return BAD_REQUEST, "a QUERY body must be a map with 'attributeNames' (or absent)", None
    else:
        names = body.get("attributeNames") or []
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        return BAD_REQUEST, "'attributeNames' must be a list of strings", None
    if len(names) > MAX_ATTRIBUTE_NAMES:
        return BAD_REQUEST, (f"'attributeNames' names {len(names)} attributes: at most {MAX_ATTRIBUTE_NAMES} "
                             f"(an empty list means all of them)"), None
    names = list(names) or list(qd_type.attributes)
    paging = _paging(properties)
    if isinstance(paging, str):
        return BAD_REQUEST, paging, None
    offset, count = paging
    results = [[row.get(n) for n in names] for row in rows(qd_type, src, offset, count)]
    return OK, "OK", {"attributeNames": names, "results": results}


def _read(qd_type: QdType, properties: Mapping, src: Source) -> Response:
    found = find(qd_type, properties, src)
    if isinstance(found, tuple):
        return found
    return OK, "OK", found
