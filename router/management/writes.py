"""Management writes: CREATE, UPDATE and DELETE of listeners, connectors, address rules and policy groups.

A write is an edit of the node's configuration: the agent copies the YAML data the node runs from, changes
one entry, checks the result exactly as a config file is checked (router.config: a bad value is a 400
naming the key), and applies the difference as a reload does (router.node.reconfigure: listeners and
connectors open or close one at a time, the other connections are untouched). The change lives in the
running node only: the file is not rewritten, so a reload or a restart goes back to the file.

Writes need the ``write`` management level (a policy group with `management: write`); below it they are
refused with 403. Entities and their identities:

* ``listener`` (config `listeners[]`): identity `host:port` as bound (the listener entity's identity);
* ``connector`` (config `connectors[]`): identity `host:port` of the peer;
* ``address-rule`` (config `addresses.rules[]`): identity its `prefix`;
* ``policy-group`` (config `policy.groups.<name>`, or `policy.vhosts.<vhost>.groups.<name>`): identity
  its name, or `vhost/name`.

The request body (CREATE, UPDATE) is a map of the entry's config keys, as in the file (`{"host": ...,
"port": 5680, "max_connections": 10, "tls": {...}}`); UPDATE merges it into the entry. The identity is
the `identity` (or `name`) application property. Answers: 201 (CREATE) or 200 (UPDATE) with the entry and
the changes applied, 204 (DELETE), 400 invalid, 403 not allowed, 404 unknown identity, 409 already there
or not possible now (a port in use), 501 a node not started from a config file.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from router.config import ConfigError, NodeConfig, parse_config
from router.node.reconfigure import ReloadResult, apply
from router.policy.levels import NAMES, WRITE

WRITE_OPERATIONS = ("CREATE", "UPDATE", "DELETE")
TYPES = ("listener", "connector", "address-rule", "policy-group")
CREATED, OK, NO_CONTENT = 201, 200, 204
BAD_REQUEST, FORBIDDEN, NOT_FOUND, CONFLICT, NOT_IMPLEMENTED = 400, 403, 404, 409, 501

Response = tuple[int, str, Any]


class Refused(Exception):
    """A write refused with an HTTP-like status and a sentence saying why."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


def forbidden_description(operation: str, level: int) -> str:
    """The 403 of a write below ``write``: what the requester has and the policy that grants the rest."""
    return (f"{operation} needs management write access and this connection has {NAMES[level]!r}: give its "
            "policy group `management: write` in the config of the node it connects to, e.g. "
            "`policy: {default_group: clients, groups: {clients: {}, operators: {users: [anonymous], "
            "remote_hosts: [localhost], management: write}}}` (docs/SECURITY.md, \"Management access\")")


class ConfigWriter:
    """Answers the write operations of one node's agent."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def answer(self, properties: Mapping[str, Any], body: object, level: int) -> Response:
        operation = str(properties.get("operation")).upper()
        entity_type = properties.get("entityType") if properties.get("type") == "org.amqp.management" \
            else properties.get("type")
        entity_type = str(entity_type or "").removeprefix("meshrouter.")
        try:
            self.allowed(operation, level)
            if entity_type not in TYPES:
                raise Refused(BAD_REQUEST, f"{operation}: entity type {entity_type!r} cannot be written; "
                                           f"writable: {', '.join(TYPES)}")
            self.started_from_file()
            identity = properties.get("identity") or properties.get("name")
            if operation != "CREATE" and not (isinstance(identity, str) and identity):
                raise Refused(BAD_REQUEST, f"{operation} needs an 'identity' (or 'name') application "
                                           "property")
            if operation != "DELETE" and not isinstance(body, Mapping):
                raise Refused(BAD_REQUEST, f"{operation} needs a body: a map of the entry's config keys")
            attrs = dict(body or {})
            return self.edit(operation, lambda data, running: _edit_entry(
                data, running, self.server, operation, entity_type, identity, attrs))
        except Refused as refused:
            return refused.status, refused.description, None

    @staticmethod
    def allowed(operation: str, level: int) -> None:
        """Raise Refused (403) unless `level` may write."""
        if level < WRITE:
            raise Refused(FORBIDDEN, forbidden_description(operation, level))

    def started_from_file(self) -> None:
        """Raise Refused (501) for a node that has no config data to edit."""
        if self.server.config_data is None:
            raise Refused(NOT_IMPLEMENTED, "this node was not started from a config file: nothing to edit")

    # ---- one write ----------------------------------------------------------------------------------------
    def edit(self, operation: str, change: Callable[[dict, NodeConfig], Any]) -> Response:
        """Apply ``change(data, running)`` to a copy of the node's config data (``running``: the config it
        runs now, parsed from that data), check the result as a config file is checked and put the
        difference in force. ``change`` returns the entry it made or changed, or raises Refused (it may
        mutate only `data`). Answers as the module docstring says."""
        server = self.server
        data = copy.deepcopy(server.config_data)
        if not isinstance(data, dict):
            data = {}
        running = parse_config(server.config_data, server.config.source)
        try:
            entry = change(data, running)
            try:
                new = parse_config(data, server.config.source)
            except ConfigError as exc:
                raise Refused(BAD_REQUEST, f"{exc.key_path}: {exc.problem}") from None
            result = ReloadResult(0, 0.0)
            apply(server, _running_restart_keys(new, server.config), result)
            if result.errors:
                raise Refused(CONFLICT, "; ".join(result.errors))
        except Refused as refused:
            return refused.status, refused.description, None
        server.config_data = data
        if operation == "DELETE":
            return NO_CONTENT, "No Content", None
        answer = {"entry": entry, "changes": result.changes}
        return (CREATED, "Created", answer) if operation == "CREATE" else (OK, "OK", answer)


def _edit_entry(data: dict, running: NodeConfig, server: Any, operation: str, entity_type: str,
                identity: str | None, attrs: dict[str, Any]) -> Any:
    """The change of one entry that a CREATE, UPDATE or DELETE of `entity_type` makes in `data`."""
    entries, key = _section(data, entity_type, identity, attrs, operation)
    if operation == "CREATE":
        return _created(entity_type, entries, key, attrs)
    where = find_entry(entity_type, entries, identity, running, server)
    if operation == "DELETE":
        return entries.pop(where)
    entry = entries[where]
    merge(entry, attrs)
    return entry


def _running_restart_keys(new: NodeConfig, running: NodeConfig) -> NodeConfig:
    """`new`, except for the keys a write cannot change (they stay as they run)."""
    import dataclasses

    from router.node.reconfigure import APPLIED

    kept = {f.name: getattr(running, f.name) for f in dataclasses.fields(NodeConfig) if f.name not in APPLIED}
    return dataclasses.replace(new, **kept)


def _section(data: dict, entity_type: str, identity: str | None, attrs: dict,
             operation: str) -> tuple[Any, Any]:
    """The list (or mapping) of entries the write edits, created if absent, and for policy groups the
    group's name."""
    if entity_type == "listener":
        return data.setdefault("listeners", []), None
    if entity_type == "connector":
        return data.setdefault("connectors", []), None
    if entity_type == "address-rule":
        return data.setdefault("addresses", {}).setdefault("rules", []), None
    name = identity if operation != "CREATE" else attrs.pop("name", None)
    if not isinstance(name, str) or not name:
        raise Refused(BAD_REQUEST, "a policy-group needs a name ('name' in the body of a CREATE)")
    policy = data.setdefault("policy", {})
    vhost, _, group = name.rpartition("/")
    holder = policy if not vhost else policy.setdefault("vhosts", {}).setdefault(vhost, {})
    return holder.setdefault("groups", {}), group


def _created(entity_type: str, entries: Any, key: Any, attrs: dict) -> dict:
    if entity_type == "policy-group":
        if key in entries:
            raise Refused(CONFLICT, f"policy group {key!r} exists already")
        entries[key] = attrs
        return attrs
    if entity_type == "address-rule" and any(r.get("prefix") == attrs.get("prefix") for r in entries
                                              if isinstance(r, Mapping)):
        raise Refused(CONFLICT, f"an address rule for prefix {attrs.get('prefix')!r} exists already")
    entries.append(attrs)
    return attrs


def find_entry(entity_type: str, entries: Any, identity: str, running: NodeConfig, server: Any) -> Any:
    """The index (or key) of the entry `identity` names in `entries`."""
    if entity_type == "policy-group":
        group = identity.rpartition("/")[2]
        if group not in entries:
            raise Refused(NOT_FOUND, f"no policy group {identity!r}")
        return group
    if entity_type == "address-rule":
        for i, rule in enumerate(entries):
            if isinstance(rule, Mapping) and rule.get("prefix") == identity:
                return i
        raise Refused(NOT_FOUND, f"no address rule for prefix {identity!r}")
    if entity_type == "connector":
        for i, cc in enumerate(running.connectors):
            if f"{cc.host}:{cc.port}" == identity:
                return i
        raise Refused(NOT_FOUND, f"no connector to {identity!r}")
    bound = next((b for b in server.bound if b.name == identity), None)
    for i, lc in enumerate(running.listeners):
        if bound is not None and lc == bound.config or f"{lc.host}:{lc.port}" == identity:
            return i
    raise Refused(NOT_FOUND, f"no listener {identity!r}")


def merge(entry: Any, attrs: Mapping[str, Any]) -> None:
    """UPDATE: `attrs` into `entry`, maps merged key by key."""
    for k, v in attrs.items():
        if isinstance(v, Mapping) and isinstance(entry.get(k), dict):
            merge(entry[k], v)
        else:
            entry[k] = v
