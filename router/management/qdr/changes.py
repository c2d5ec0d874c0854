"""CREATE, UPDATE and DELETE of qdrouterd's ``listener``, ``connector``, ``router.config.address`` and
``vhost``: each is an edit of the node's configuration, checked and put in force by
router.management.writes.ConfigWriter (so: the ``write`` management level, a node started from a config
file, the running node only).

As qdrouterd's agent: the ``type`` and ``name`` of the application properties and of the body must agree;
a CREATE may not give an ``identity``; the answer of a CREATE (201) or UPDATE (200) is the entity's
attributes, that of a DELETE 204. Unlike qdrouterd, listeners, connectors and addresses can also be
updated (qdrouterd deletes and creates them again). A type whose concept has no equivalent here answers
501 with what to use instead; a type that is not written (``router``, ``connection``...) 501 as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.config.model import NodeConfig
from router.config.policy import DEFAULT_VHOST, DENY
from router.management.qdr import configured
from router.management.qdr.reading import find, rows
from router.management.qdr.schema import QdType, resolve
from router.management.qdr.source import Source
from router.management.qdr.translate import Untranslatable, entry
from router.management.qdr.vhosts import VhostError, our_vhost, to_policy, vhost_row
from router.management.requests import BAD_REQUEST, NOT_FOUND, Response
from router.management.writes import CONFLICT, Refused, find_entry, merge

NOT_IMPLEMENTED = 501
WRITTEN = ("listener", "connector", "router.config.address", "vhost")
_SECTIONS = {"listener": ("listeners", "listener"), "connector": ("connectors", "connector"),
             "router.config.address": ("rules", "address-rule")}


def write(operation: str, qd_type: QdType, properties: Mapping, body: object, src: Source,
          writer: Any) -> Response:
    """The response to a CREATE, UPDATE or DELETE of `qd_type`."""
    try:
        writer.allowed(operation, src.level)
        if qd_type.absent is not None:
            raise Refused(NOT_IMPLEMENTED, f"{operation} {qd_type.long}: {qd_type.absent}")
        if qd_type.name not in WRITTEN or operation not in qd_type.operations:
            raise Refused(NOT_IMPLEMENTED, f"operation {operation!r} is not implemented for {qd_type.long} "
                                           f"(it supports: {', '.join(qd_type.operations)})")
        writer.started_from_file()
        attrs = _attributes(operation, qd_type, properties, body)
        target = None
        if operation != "CREATE":
            target = find(qd_type, properties, src)
            if isinstance(target, tuple):
                return target
        status, description, _ = writer.edit(operation, lambda data, running: _change(
            operation, qd_type, attrs, target, data, running, src))
    except Refused as refused:
        return refused.status, refused.description, None
    except (Untranslatable, VhostError) as exc:
        return BAD_REQUEST, str(exc), None
    if status >= 300 or operation == "DELETE":
        return status, description, None
    name = attrs.get("name") or (target or {}).get("name")
    made = [r for r in rows(qd_type, src) if r.get("name") == name] if name else []
    if not made:            # a CREATE without a name: the entity with the default name of its entry
        made = [r for r in rows(qd_type, src) if _is_new(qd_type, r, attrs)][-1:]
    return status, description, made[0] if made else None


def _attributes(operation: str, qd_type: QdType, properties: Mapping, body: object) -> dict[str, Any]:
    """The body's attributes, with the properties' ``name`` (CREATE), checked against the properties."""
    if operation == "DELETE":
        return {}
    if body is None:
        body = {}
    if not isinstance(body, Mapping) or not all(isinstance(k, str) for k in body):
        raise Refused(BAD_REQUEST, f"{operation} needs a body: a map of attribute names to values")
    attrs = dict(body)
    given = attrs.pop("type", None)
    if given is not None and resolve(given, {qd_type.name}) is not qd_type:
        raise Refused(BAD_REQUEST, f"conflicting values for 'type': {given!r} and {qd_type.long!r}")
    if operation == "CREATE" and attrs.get("identity") is not None:
        raise Refused(BAD_REQUEST, "'identity' attribute cannot be specified in a CREATE")
    attrs.pop("identity", None)
    name = properties.get("name")
    if operation == "CREATE" and name is not None:
        if attrs.get("name") not in (None, name):
            raise Refused(BAD_REQUEST, f"conflicting values for 'name': {attrs['name']!r} and {name!r}")
        attrs["name"] = name
    if "name" in attrs and not isinstance(attrs["name"], str):
        raise Refused(BAD_REQUEST, "'name' must be a string")
    return attrs


def _change(operation: str, qd_type: QdType, attrs: dict[str, Any], target: dict[str, Any] | None,
            data: dict, running: NodeConfig, src: Source) -> Any:
    """The edit of `data` (the node's config data, a copy) that the write makes; returns the entry."""
    if qd_type.name == "vhost":
        return _vhost(operation, attrs, target, data, running)
    section, ours = _SECTIONS[qd_type.name]
    holder = data.setdefault("addresses", {}) if section == "rules" else data
    entries = holder.setdefault(section, [])
    if not isinstance(entries, list):
        raise Refused(CONFLICT, f"the node's {section} are not a list")
    if operation == "CREATE":
        new = entry(qd_type.name, attrs)
        if qd_type.name == "router.config.address" and any(
                isinstance(e, Mapping) and e.get("prefix") == new.get("prefix") for e in entries):
            raise Refused(CONFLICT, f"an address rule for prefix {new.get('prefix')!r} exists already")
        entries.append(new)
        return new
    where = find_entry(ours, entries, _our_identity(qd_type, target, src), running, src.server)
    if operation == "DELETE":
        return entries.pop(where)
    current = entries[where]
    merge(current, entry(qd_type.name, {k: v for k, v in attrs.items() if k != "name" or v != target["name"]},
                         current))
    return current


def _our_identity(qd_type: QdType, target: dict[str, Any] | None, src: Source) -> str:
    """This node's identity (router.management.writes) of the entity a qdrouterd row names."""
    assert target is not None
    if qd_type.name == "router.config.address":
        return target["prefix"]
    if qd_type.name == "connector":
        return f"{target['host']}:{target['port']}"
    for listener in src.server.bound:
        if configured.listener_name(listener) == target["name"]:
            return listener.name
    raise Refused(NOT_FOUND, f"no listener {target['name']!r}")


def _is_new(qd_type: QdType, row: dict[str, Any], attrs: dict[str, Any]) -> bool:
    """Whether `row` is the entity a CREATE of `attrs` without a name made (the last such row)."""
    if qd_type.name == "router.config.address":
        return row.get("prefix") == entry(qd_type.name, attrs).get("prefix")
    if qd_type.name == "vhost":
        return row.get("hostname") == attrs.get("hostname")
    made = entry(qd_type.name, attrs)
    port = made.get("port")
    return row.get("host") == made.get("host") and (not port or row.get("port") == str(port))


# ---- vhosts ---------------------------------------------------------------------------------------------
def _vhost(operation: str, attrs: dict[str, Any], target: dict[str, Any] | None, data: dict,
           running: NodeConfig) -> Any:
    if running.policy is None:
        raise Refused(CONFLICT, "this node has no policy: section, so no vhost policy is in force (every "
                                "client may connect): add a policy: section to its config file first")
    policy = data.setdefault("policy", {})
    if not isinstance(policy, dict):
        raise Refused(CONFLICT, "the node's policy: section is not a mapping")
    if operation == "CREATE":
        hostname = attrs.get("hostname")
        name = attrs.get("name")
        if not isinstance(hostname, str) or not hostname:
            raise Refused(BAD_REQUEST, "a vhost needs a 'hostname'")
        if name is not None and name not in (hostname, f"vhost/{hostname}"):
            raise Refused(BAD_REQUEST, f"a vhost is named after its hostname here: 'vhost/{hostname}', not "
                                       f"{name!r}")
        vhost = our_vhost(hostname)
        existing = running.policy.all_vhosts().get(vhost)
        if existing is not None and (vhost != DEFAULT_VHOST or existing.groups):
            raise Refused(CONFLICT, f"vhost {hostname!r} exists already")
        old = None
    else:
        assert target is not None
        vhost = our_vhost(target["hostname"])
        old = running.policy.all_vhosts()[vhost]
        if operation == "UPDATE" and attrs.get("hostname") not in (None, target["hostname"]):
            raise Refused(BAD_REQUEST, "a vhost's hostname cannot change: delete it and create another")
    holder = _vhost_holder(policy, vhost, create=operation != "DELETE")
    if operation == "DELETE":
        if vhost == DEFAULT_VHOST:
            policy.pop("groups", None)
            policy.pop("default_group", None)
        else:
            holder.pop(vhost)
        return None
    if operation == "UPDATE":
        attrs = {**vhost_row(vhost, old), **attrs}
    settings = to_policy(attrs, old.default_group if old is not None and old.default_group != DENY else None)
    if vhost == DEFAULT_VHOST:
        policy["groups"], policy["default_group"] = settings["groups"], settings["default_group"]
        return settings
    holder[vhost] = settings
    return settings


def _vhost_holder(policy: dict, vhost: str, create: bool) -> dict:
    """The mapping that holds vhost `vhost` (``policy.vhosts``), its key renamed to `vhost`'s case."""
    if vhost == DEFAULT_VHOST:
        return policy
    vhosts = policy.setdefault("vhosts", {}) if create else policy.get("vhosts") or {}
    for key in list(vhosts):
        if isinstance(key, str) and key.lower() == vhost and key != vhost:
            vhosts[vhost] = vhosts.pop(key)
    return vhosts

