"""qdrouterd's ``vhost`` entities from the ``policy:`` section, and back (for CREATE, UPDATE, DELETE).

A vhost of qdrouterd is a vhost of ``policy:``: ``$default`` is the top level (its ``groups`` and
``default_group``), any other one a ``policy.vhosts`` entry. Its user groups map key by key:

================================  =====================================================================
qdrouterd (vhostUserGroupSettings)  ``policy:`` group
================================  =====================================================================
group ``$default``                the vhost's ``default_group`` (``allowUnknownUser: true``); a new one
                                  is named ``default``
``users``, ``remoteHosts``        ``users``, ``remote_hosts`` (comma-separated text <-> lists; ``*``: any;
                                  absent: none, as in qdrouterd)
``sourcePattern``, ``sources``    ``sources`` (qdrouterd's patterns are this node's; ``sources`` are
                                  exact addresses, ``*`` any; a trailing ``*`` wildcard has no equivalent;
                                  absent: none, as in qdrouterd)
``targetPattern``, ``targets``    ``targets`` (the same)
``maxConnectionsPerUser`` ...     ``max_connections_per_user``, ``max_connections_per_host``,
                                  ``max_senders``, ``max_receivers``, ``max_sessions``,
                                  ``max_message_size``
``allowDynamicSource``,           ``allow_dynamic_source``, ``allow_anonymous_sender`` (absent: false,
``allowAnonymousSender``          as in qdrouterd)
``management``                    ``management`` (this node's own key: the group's management level)
================================  =====================================================================

``allowWaypointLinks``, ``allowDynamicLinkRoutes``, ``allowFallbackLinks`` and ``allowAdminStatusUpdate``
allow what does not exist here and are accepted with any value; ``allowUserIdProxy: true`` is how this
node behaves (user-id is not checked) and ``false`` is refused, as are ``maxFrameSize`` and
``maxSessionWindow`` (set on the listener) and the vhost-wide limits ``maxConnections``,
``maxConnectionsPerUser`` and ``maxConnectionsPerHost`` other than qdrouterd's default 65535 (set them per
group). A vhost-wide ``maxMessageSize`` becomes the limit of each group that sets none.
"""

from __future__ import annotations

import json
from typing import Any

from router.config.policy import DEFAULT_VHOST, DENY
from router.management.qdr.configured import QDR_DEFAULT_VHOST, vhost_name
from router.management.qdr.schema import PREFIX
from router.management.qdr.source import Source
from router.policy.levels import READ

Row = dict[str, Any]
NEW_DEFAULT_GROUP = "default"
QDR_DEFAULT_LIMIT = 65535

_LIMITS = {"maxConnectionsPerUser": "max_connections_per_user", "maxConnectionsPerHost":
           "max_connections_per_host", "maxSenders": "max_senders", "maxReceivers": "max_receivers",
           "maxSessions": "max_sessions", "maxMessageSize": "max_message_size"}
_FLAGS = {"allowDynamicSource": "allow_dynamic_source", "allowAnonymousSender": "allow_anonymous_sender"}
_NO_SUCH_FEATURE = ("allowWaypointLinks", "allowDynamicLinkRoutes", "allowFallbackLinks",
                    "allowAdminStatusUpdate")
_VHOST_KEYS = ("hostname", "aliases", "maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost",
               "maxMessageSize", "allowUnknownUser", "groups", "name", "identity", "type")
_ON_LISTENER = {"maxFrameSize": "max_frame_size", "maxSessionWindow": "max_frame_size and max_sessions"}


class VhostError(ValueError):
    """A vhost body that has no equivalent in ``policy:`` (the sentence says what to do instead)."""


# ---- reading --------------------------------------------------------------------------------------------
def vhosts(src: Source) -> list[Row]:
    """One row per vhost of ``policy:`` (none without it); below ``read`` the groups' settings are empty."""
    policy = src.server.config.policy
    if policy is None:
        return []
    return [vhost_row(vhost, vp, src.level >= READ) for vhost, vp in policy.all_vhosts().items()]


def vhost_row(vhost: str, vp: Any, settings: bool = True) -> Row:
    """The qdrouterd form of one vhost (router.config.policy.VhostPolicy) of this node."""
    name = vhost_name(vhost)
    groups = {_group_name(g, vp.default_group): (group_map(settings_) if settings else {})
              for g, settings_ in vp.groups.items()}
    return {"hostname": name, "maxConnections": None, "maxConnectionsPerUser": None,
            "maxConnectionsPerHost": None, "allowUnknownUser": vp.default_group != DENY, "groups": groups,
            "name": f"vhost/{name}", "identity": f"vhost/{name}", "type": PREFIX + "vhost"}


def _group_name(group: str, default_group: str) -> str:
    return "$default" if group == default_group else group


def group_map(g: Any) -> dict[str, Any]:
    """qdrouterd's settings of one group (router.config.policy.PolicyGroup); unset limits are left out."""
    out: dict[str, Any] = {}
    if g.users:
        out["users"] = ", ".join(g.users)
    if g.remote_hosts is None or g.remote_hosts:
        out["remoteHosts"] = "*" if g.remote_hosts is None else ", ".join(g.remote_hosts)
    for kind, patterns in (("source", g.sources), ("target", g.targets)):
        if patterns is None:
            out[f"{kind}s"] = "*"
        elif patterns:
            out[f"{kind}Pattern"] = ", ".join(patterns)
    for qd, ours in _LIMITS.items():
        if getattr(g, ours) is not None:
            out[qd] = getattr(g, ours)
    for qd, ours in _FLAGS.items():
        out[qd] = getattr(g, ours)
    if g.management is not None:
        out["management"] = g.management
    return out


# ---- writing --------------------------------------------------------------------------------------------
def our_vhost(hostname: str) -> str:
    """This node's name of a qdrouterd vhost hostname (``$default``: the top level)."""
    return DEFAULT_VHOST if hostname == QDR_DEFAULT_VHOST else hostname.lower()


def to_policy(attrs: dict[str, Any], old_default: str | None) -> dict[str, Any]:
    """The ``policy:`` mapping (``groups``, ``default_group``) of a vhost in qdrouterd's form; `old_default`
    names the group ``$default`` stands for now (None: a new vhost). Raises VhostError."""
    unknown = [k for k in attrs if k not in _VHOST_KEYS]
    if unknown:
        raise VhostError(f"unknown attribute {unknown[0]!r} of vhost (its attributes: "
                         f"{', '.join(_VHOST_KEYS)})")
    for key in ("aliases",):
        if attrs.get(key):
            raise VhostError(f"{key} has no equivalent here: give each hostname a vhost of its own")
    for key in ("maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost"):
        value = attrs.get(key)
        if value is not None and _integer(value, key) != QDR_DEFAULT_LIMIT:
            raise VhostError(f"{key} has no vhost-wide equivalent here: set the limit per group "
                             "(maxConnectionsPerUser, maxConnectionsPerHost), or a listener's "
                             "max_connections")
    groups = attrs.get("groups") or {}
    if isinstance(groups, str):         # qdmanage passes name=value arguments as text
        try:
            groups = json.loads(groups)
        except ValueError as exc:
            raise VhostError(f"groups: not a JSON map: {exc}") from None
    if not isinstance(groups, dict):
        raise VhostError(f"groups must be a map of group name to its settings, got {type(groups).__name__}")
    size = attrs.get("maxMessageSize")
    default_name = old_default if old_default not in (None, DENY) else NEW_DEFAULT_GROUP
    out_groups = {}
    for name, settings in groups.items():
        if not isinstance(name, str) or not isinstance(settings, dict | type(None)):
            raise VhostError(f"groups.{name}: the settings of a group are a map")
        ours = default_name if name == "$default" else name
        if ours in out_groups:
            raise VhostError(f"groups.{name}: two groups would be named {ours!r} here ($default is "
                             f"{default_name!r})")
        group = to_group(settings or {}, f"groups.{name}")
        if size is not None and "max_message_size" not in group:
            group["max_message_size"] = _integer(size, "maxMessageSize")
        out_groups[ours] = group
    unknown_users = _boolean(attrs.get("allowUnknownUser", False), "allowUnknownUser")
    default_group = default_name if unknown_users and "$default" in groups else DENY
    return {"groups": out_groups, "default_group": default_group}


def to_group(settings: dict[str, Any], path: str) -> dict[str, Any]:
    """One group's ``policy:`` keys from qdrouterd's settings. Raises VhostError."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        where = f"{path}.{key}"
        if key == "users":
            out["users"] = _names(value, where)
        elif key == "remoteHosts":
            hosts = _names(value, where)
            out["remote_hosts"] = None if "*" in hosts else hosts
        elif key in ("sources", "targets", "sourcePattern", "targetPattern"):
            _patterns(out, key, value, where)
        elif key in _LIMITS:
            out[_LIMITS[key]] = _integer(value, where)
        elif key in _FLAGS:
            out[_FLAGS[key]] = _boolean(value, where)
        elif key == "management":
            out["management"] = value
        elif key in _NO_SUCH_FEATURE:
            _boolean(value, where)
        elif key == "allowUserIdProxy":
            if not _boolean(value, where):
                raise VhostError(f"{where}: false has no equivalent here: the node does not check the "
                                 "user-id of messages (leave allowUserIdProxy out, or true)")
        elif key in _ON_LISTENER:
            raise VhostError(f"{where} has no per-group equivalent here: set listeners[].{_ON_LISTENER[key]}")
        else:
            raise VhostError(f"{where}: unknown setting {key!r}")
    # what qdrouterd's group leaves out it denies: no host, no source, no target, no dynamic source...
    for ours in ("remote_hosts", "sources", "targets"):
        out.setdefault(ours, [])
    for flag in _FLAGS.values():
        out.setdefault(flag, False)
    return out


def _patterns(out: dict[str, Any], key: str, value: Any, where: str) -> None:
    ours = "sources" if key.startswith("source") else "targets"
    items = _names(value, where)
    if "*" in items and not key.endswith("Pattern"):
        out[ours] = None              # any address
        return
    if ours in out and out[ours] is None:
        return                        # any address already
    if not key.endswith("Pattern"):
        starred = [i for i in items if i.endswith("*")]
        if starred:
            raise VhostError(f"{where}: {starred[0]!r}: a trailing '*' wildcard has no equivalent here: give "
                             f"{key[:-1]}Pattern with a '#' token instead (e.g. 'a/#')")
    have = out.get(ours) or []
    out[ours] = [*have, *(i for i in items if i not in have)]


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = value
    elif isinstance(value, str):
        items = value.replace(",", " ").split()
    else:
        raise VhostError(f"{where}: expected comma-separated text, got {type(value).__name__}")
    return [i.strip() for i in items if i.strip()]


def _integer(value: Any, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise VhostError(f"{where}: expected an integer, got {value!r}")
    return value


def _boolean(value: Any, where: str) -> bool:
    words = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
    if isinstance(value, str) and value.lower() in words:
        return words[value.lower()]
    if not isinstance(value, bool):
        raise VhostError(f"{where}: expected true or false, got {value!r}")
    return value
