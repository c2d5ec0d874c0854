"""qdmanage bodies -> config entries: a ``listener``, ``connector`` or ``router.config.address`` in
qdrouterd's attributes becomes a ``listeners[]``, ``connectors[]`` or ``addresses.rules[]`` entry.

Values may come typed as qdrouterd's schema types them: a port is a string (``"5680"``, or a service name
such as ``"amqp"``), SASL mechanisms a space-separated string, booleans may be ``yes``/``no``. An
attribute with no equivalent here is refused (:class:`Untranslatable`) with a sentence saying what to use
instead, unless its value is what this node does anyway (``stripAnnotations: both``, ``waypoint: false``).
This node's own config keys (``max_connections``, ``tls``...) are accepted as they are.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from router.config.keys import layout
from router.config.model import AddressRule, ConnectorConfig, ListenerConfig
from router.management.qdr.configured import QDR_DEFAULT_VHOST
from router.management.qdr.schema import TYPES

Entry = dict[str, Any]
WELL_KNOWN_PORTS = {"amqp": 5672, "amqps": 5671}
_TLS = TYPES["sslProfile"].absent


class Untranslatable(ValueError):
    """An attribute (or value) without an equivalent here; the message says what to use instead."""


def port(value: Any, where: str = "port") -> int:
    """A qdrouterd port: an integer, its digits, or a TCP service name (``amqp``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        if text in WELL_KNOWN_PORTS:
            return WELL_KNOWN_PORTS[text]
        try:
            return socket.getservbyname(text, "tcp")
        except (OSError, UnicodeError):
            pass
    raise Untranslatable(f"{where}: {value!r} is neither a port number nor a known service name")


def integer(value: Any, where: str) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Untranslatable(f"{where}: expected an integer, got {value!r}")
    return value


def boolean(value: Any, where: str) -> bool:
    words = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
    if isinstance(value, str) and value.lower() in words:
        return words[value.lower()]
    if not isinstance(value, bool):
        raise Untranslatable(f"{where}: expected true or false, got {value!r}")
    return value


def _only(expected: Any, why: str) -> Callable[[Any, str], None]:
    """An attribute accepted only with the value this node behaves as (`why` otherwise)."""
    def check(value: Any, where: str) -> None:
        got = boolean(value, where) if isinstance(expected, bool) else value
        if isinstance(expected, int) and not isinstance(expected, bool):
            got = integer(value, where)
        if got != expected:
            raise Untranslatable(f"{where}: {value!r} {why}")
    return check


def _never(why: str) -> Callable[[Any, str], None]:
    def check(value: Any, where: str) -> None:
        if value is not None and value != "":
            raise Untranslatable(f"{where} {why}")
    return check


_STRIP = _only("both", "has no equivalent here: router annotations are always stripped from client "
                       "messages both ways (stripAnnotations: both)")
_MSG_LOG = _only("none", "has no equivalent here: record deliveries with the config file's telemetry: "
                         "section")
_FAILOVER = _never("has no equivalent here: give clients every node's URL (any node of the mesh reaches "
                   "every address)")
_OPEN_PROPERTIES = _never("has no equivalent here: the node's Open carries its own properties only")
_FAMILY = _never("has no equivalent here: the host's form (an IPv4 or IPv6 address) chooses the family")
_PER_NODE = _never("has no per-listener equivalent here: node.link_capacity sets the credit of every link")


def _any_boolean(value: Any, where: str) -> None:
    boolean(value, where)


def _tls(value: Any, where: str) -> None:
    if value not in (None, "", False):
        raise Untranslatable(f"{where}: {_TLS}")


def _role(allowed: tuple[str, ...], why: str) -> Callable[[Any, str], dict]:
    def check(value: Any, where: str) -> dict:
        if value not in allowed:
            raise Untranslatable(f"{where}: {value!r} {why}")
        return {"role": value}
    return check


def _mechanisms(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [m.upper() for m in value.replace(",", " ").split()]
    raise Untranslatable(f"{where}: expected space-separated mechanism names, got {value!r}")


def _sasl(attrs: dict[str, Any], current: Entry | None) -> dict | None:
    """A listener's ``sasl.mechanisms`` from ``saslMechanisms`` and ``authenticatePeer`` (qdrouterd: a client
    that need not authenticate may skip SASL, which is this node's ANONYMOUS; authenticatePeer is false
    unless given)."""
    if "saslMechanisms" not in attrs and "authenticatePeer" not in attrs:
        return None
    sasl = (current or {}).get("sasl") or {}
    now = [str(m).upper() for m in sasl.get("mechanisms") or ["ANONYMOUS"]]
    if "saslMechanisms" in attrs:
        mechanisms = _mechanisms(attrs["saslMechanisms"], "saslMechanisms")
    else:
        mechanisms = now
    if "authenticatePeer" in attrs:
        must = boolean(attrs["authenticatePeer"], "authenticatePeer")
    else:                       # an UPDATE keeps the listener's; qdrouterd's default is false
        must = current is not None and "ANONYMOUS" not in now
    if must:
        mechanisms = [m for m in mechanisms if m != "ANONYMOUS"]
        if not mechanisms:
            raise Untranslatable("authenticatePeer: true needs saslMechanisms other than ANONYMOUS (PLAIN, "
                                 "EXTERNAL)")
    elif "ANONYMOUS" not in mechanisms:
        mechanisms.append("ANONYMOUS")
    return {**sasl, "mechanisms": mechanisms}


# ---- listener -------------------------------------------------------------------------------------------
_LISTENER: dict[str, Callable[[Any, str], dict | None]] = {
    "host": lambda v, w: {"host": v or "0.0.0.0"},
    "port": lambda v, w: {"port": port(v, w)},
    "role": _role(("normal", "inter-router"), "has no equivalent here: listeners are for clients (normal) "
                                              "or for nodes of the mesh (inter-router)"),
    "cost": lambda v, w: {"cost": integer(v, w)},
    "maxFrameSize": lambda v, w: {"max_frame_size": integer(v, w)},
    "maxSessions": lambda v, w: {"max_sessions": integer(v, w)},
    "idleTimeoutSeconds": lambda v, w: {"idle_timeout": integer(v, w)},
    "initialHandshakeTimeoutSeconds": lambda v, w: {"handshake_timeout": integer(v, w)},
    "http": lambda v, w: {"websocket": boolean(v, w)},
    "websockets": _only(True, "has no equivalent here: an http listener serves AMQP over WebSocket"),
    "healthz": _only(False, "has no equivalent here: there is no health page (use /metrics)"),
    "metrics": _only(False, "has no per-listener equivalent here: the config file's metrics: section serves "
                            "/metrics"),
    "httpRootDir": _never("has no equivalent here: the node serves no web console files"),
    "policyVhost": lambda v, w: {"policy_vhost": "default" if v == QDR_DEFAULT_VHOST else v},
    "requireSsl": _tls, "requireEncryption": _tls, "sslProfile": _tls, "trustedCertsFile": _tls,
    "multiTenant": _only(False, "has no equivalent here: addresses are not prefixed by vhost"),
    "stripAnnotations": _STRIP, "messageLoggingComponents": _MSG_LOG, "failoverUrls": _FAILOVER,
    "openProperties": _OPEN_PROPERTIES, "socketAddressFamily": _FAMILY, "linkCapacity": _PER_NODE,
    "saslPlugin": _never("has no equivalent here: SASL PLAIN users come from listeners[].sasl.users_file or "
                         "listeners[].sasl.sasldb"),
    "maxSessionFrames": _never("has no equivalent here: a session's window follows max_frame_size"),
}

# ---- connector ------------------------------------------------------------------------------------------
_CONNECTOR: dict[str, Callable[[Any, str], dict | None]] = {
    "host": lambda v, w: {"host": v},
    "port": lambda v, w: {"port": port(v, w)},
    "role": _role(("inter-router",), "has no equivalent here: connectors join nodes of the mesh (role "
                                     "inter-router); a broker is bridged by the config file's brokers: "
                                     "section"),
    "cost": lambda v, w: {"cost": integer(v, w)},
    "sslProfile": _tls, "verifyHostname": _only(True, f"needs TLS here: {_TLS}"),
    "saslUsername": _never("has no equivalent here: connectors authenticate with ANONYMOUS or EXTERNAL (a "
                           "TLS client certificate)"),
    "saslPassword": _never("has no equivalent here: connectors authenticate with ANONYMOUS or EXTERNAL (a "
                           "TLS client certificate)"),
    "allowRedirect": lambda v, w: _any_boolean(v, w),     # peers of the mesh never redirect
    "stripAnnotations": _STRIP, "messageLoggingComponents": _MSG_LOG, "failoverUrls": _FAILOVER,
    "openProperties": _OPEN_PROPERTIES, "protocolFamily": _FAMILY, "linkCapacity": _PER_NODE,
    "maxFrameSize": _never("has no per-connector equivalent here"),
    "maxSessions": _never("has no per-connector equivalent here"),
    "maxSessionFrames": _never("has no per-connector equivalent here"),
    "idleTimeoutSeconds": _never("has no per-connector equivalent here: node.idle_timeout applies"),
    "policyVhost": _never("has no equivalent here: policy applies to the connections a node accepts"),
}

# ---- router.config.address ------------------------------------------------------------------------------
_NO_PHASES = _only(0, "has no equivalent here: addresses have no phases")


def _pattern(value: Any, where: str) -> dict:
    """A pattern that is a prefix and everything under it (``a/b/#``) is the rule for prefix ``a/b``."""
    if isinstance(value, str):
        body = value.removesuffix("/#").removesuffix(".#")
        if body != value and body and not any(ch in body for ch in "*#"):
            return {"prefix": body}
    raise Untranslatable(f"{where}: {value!r} has no equivalent here: address rules match a prefix and every "
                         "address under it; give prefix (the pattern 'a/b/#' is the prefix 'a/b'; '#' alone "
                         "is addresses.default)")


_ADDRESS: dict[str, Callable[[Any, str], dict | None]] = {
    "prefix": lambda v, w: {"prefix": v},
    "pattern": _pattern,
    "distribution": lambda v, w: {"distribution": v} if v != "unavailable" else _unavailable(w),
    "waypoint": _only(False, "has no equivalent here: the node has no waypoints; bridge to a broker with the "
                             "config file's brokers: section"),
    "ingressPhase": _NO_PHASES, "egressPhase": _NO_PHASES,
    "priority": _only(-1, "has no equivalent here: the node does not order messages by priority"),
    "enableFallback": _only(False, "has no equivalent here: there are no fallback destinations"),
    "fallback": _only(False, "has no equivalent here: there are no fallback destinations"),
}


def _unavailable(where: str) -> dict:
    raise Untranslatable(f"{where}: 'unavailable' has no equivalent here: to refuse an address, leave it out "
                         "of the policy groups' targets")


_TABLES = {"listener": (_LISTENER, ListenerConfig), "connector": (_CONNECTOR, ConnectorConfig),
           "router.config.address": (_ADDRESS, AddressRule)}


def entry(qd_type: str, attrs: dict[str, Any], current: Entry | None = None) -> Entry:
    """The config entry (CREATE) or the keys to merge into `current` (UPDATE) for qdrouterd attributes."""
    table, config = _TABLES[qd_type]
    ours = layout(config)
    if qd_type == "connector" and current is None and "role" not in attrs:
        raise Untranslatable("role: a connector here joins nodes of the mesh: give role=inter-router "
                             "(qdrouterd's default, normal, has no equivalent: a broker is bridged by the "
                             "config file's brokers: section)")
    out: Entry = {}
    for key, value in attrs.items():
        if key == "saslMechanisms" and qd_type == "connector":
            out["sasl"] = {"mechanisms": _mechanisms(value, key)}
            continue
        if key in ("saslMechanisms", "authenticatePeer") and qd_type == "listener":
            continue
        if key == "name":
            out["name"] = value
        elif key in table:
            part = table[key](value, key)
            if part:
                out.update(part)
        elif key in ours:
            out[key] = value
        else:
            raise Untranslatable(f"unknown attribute {key!r} of {qd_type} (qdrouterd's: {', '.join(table)}; "
                                 f"or this node's {config.__name__} keys: {', '.join(ours)})")
    sasl = _sasl(attrs, current) if qd_type == "listener" else None
    if sasl is not None:
        out["sasl"] = sasl
    return out
