"""qdrouterd's configuration entities from this node's configuration: ``listener``, ``connector``,
``router.config.address``, ``policy`` and ``vhostStats`` (``vhost``: router.management.qdr.vhosts).

Names: an entry's ``name`` key when it has one, else qdrouterd's default name (``listener/<host>:<port>``
with the port as bound, ``connector/<host>:<port>``, ``address/<prefix>``); the identity is the name. Values
are typed as qdrouterd's schema types them: a port is a string, mechanisms a space-separated string,
seconds an integer when they are whole.
"""

from __future__ import annotations

from typing import Any

from router.config.policy import DEFAULT_VHOST
from router.management.qdr.schema import PREFIX
from router.management.qdr.source import Source
from router.policy.levels import READ

Row = dict[str, Any]
QDR_DEFAULT_VHOST = "$default"


def vhost_name(ours: str | None) -> str | None:
    """qdrouterd's name of one of this node's vhosts (the default one is ``$default``)."""
    return QDR_DEFAULT_VHOST if ours == DEFAULT_VHOST else ours


def seconds(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


# ---- listeners ------------------------------------------------------------------------------------------
def listener_name(listener: Any) -> str:
    """The name of a bound listener (router.node.server.Listener)."""
    lc = listener.config
    return lc.name or f"listener/{lc.host}:{listener.sock.getsockname()[1]}"


def listeners(src: Source) -> list[Row]:
    node_idle = src.server.config.idle_timeout
    rows = []
    for listener in src.server.bound:
        lc = listener.config
        name = listener_name(listener)
        mechanisms = lc.sasl.mechanisms
        rows.append({
            "host": lc.host, "port": str(listener.sock.getsockname()[1]), "role": lc.role, "cost": lc.cost,
            "saslMechanisms": " ".join(mechanisms), "authenticatePeer": "ANONYMOUS" not in mechanisms,
            "requireEncryption": lc.tls is not None, "requireSsl": lc.tls is not None,
            "maxFrameSize": lc.max_frame_size, "maxSessions": lc.max_sessions,
            "idleTimeoutSeconds": seconds(node_idle if lc.idle_timeout is None else lc.idle_timeout),
            "initialHandshakeTimeoutSeconds": seconds(lc.handshake_timeout), "http": lc.websocket,
            "policyVhost": vhost_name(lc.policy_vhost), "name": name, "identity": name,
            "type": PREFIX + "listener",
        })
    return rows


# ---- connectors -----------------------------------------------------------------------------------------
def connector_name(connector: Any) -> str:
    cc = connector.config
    return cc.name or f"connector/{cc.host}:{cc.port}"


def connectors(src: Source) -> list[Row]:
    rows = []
    for connector in src.server.connectors:
        cc = connector.config
        name = connector_name(connector)
        mechanisms = cc.sasl_mechanisms
        if mechanisms is None:
            mechanisms = ("EXTERNAL", "ANONYMOUS") if cc.tls is not None and cc.tls.cert else ("ANONYMOUS",)
        rows.append({
            "host": cc.host, "port": str(cc.port), "role": cc.role, "cost": cc.cost,
            "saslMechanisms": " ".join(mechanisms),
            "verifyHostname": cc.tls.verify_peer_name if cc.tls is not None else None,
            "connectionStatus": "SUCCESS" if connector.conn is not None else "CONNECTING",
            "name": name, "identity": name, "type": PREFIX + "connector",
        })
    return rows


# ---- address rules --------------------------------------------------------------------------------------
def rule_name(rule: Any) -> str:
    return rule.name or f"address/{rule.prefix}"


def address_rules(src: Source) -> list[Row]:
    rows = []
    for rule in src.server.config.address_rules:
        name = rule_name(rule)
        rows.append({"name": name, "identity": name, "type": PREFIX + "router.config.address",
                     "prefix": rule.prefix, "distribution": rule.distribution, "waypoint": False,
                     "ingressPhase": 0, "egressPhase": 0, "priority": -1, "fallback": False})
    return rows


# ---- authorization --------------------------------------------------------------------------------------
def _by_vhost(src: Source) -> dict[str, list[Any]]:
    """vhost -> the policy counters of its (listener, group)s (router.policy.denials.Stats)."""
    out: dict[str, list[Any]] = {}
    for (_, vhost, _), stats in src.server.core.policy.denials.stats.items():
        out.setdefault(vhost, []).append(stats)
    return out


def policy(src: Source) -> list[Row]:
    """The one ``policy`` entity: the node-wide settings and counts of authorization."""
    config = src.server.config
    every = [s for stats in _by_vhost(src).values() for s in stats]

    def total(attr: str) -> int:
        return sum(getattr(s, attr) for s in every)

    denied = [total(f"denied_{kind}") for kind in ("connections", "sessions", "links", "messages")]
    return [{
        "maxConnections": sum(lc.max_connections for lc in config.listeners if lc.role == "normal"),
        "enableVhostPolicy": config.policy is not None, "enableVhostNamePatterns": False, "policyDir": "",
        "defaultVhost": QDR_DEFAULT_VHOST, "connectionsProcessed": total("opened") + denied[0],
        "connectionsDenied": denied[0], "connectionsCurrent": total("connections"), "linksDenied": denied[2],
        "totalDenials": sum(denied), "name": "policy", "identity": "policy", "type": PREFIX + "policy",
    }]


def vhost_stats(src: Source) -> list[Row]:
    """One row per vhost of the ``policy:`` section (none without it): its counts, and who is connected
    (users and hosts: empty below the ``read`` level)."""
    policy_config = src.server.config.policy
    if policy_config is None:
        return []
    counts = _by_vhost(src)
    users: dict[str, dict[str, list[str]]] = {}
    hosts: dict[str, dict[str, list[str]]] = {}
    if src.level >= READ:
        for conn in src.server.engine.conns.values():
            access = getattr(conn, "access", None)
            if conn.alive and access is not None and access.counted:
                users.setdefault(access.vhost, {}).setdefault(access.user, []).append(conn.peer)
                hosts.setdefault(access.vhost, {}).setdefault(access.host, []).append(conn.peer)
    rows = []
    for vhost in policy_config.all_vhosts():
        stats = counts.get(vhost, [])

        def total(attr: str, stats: list[Any] = stats) -> int:
            return sum(getattr(s, attr) for s in stats)

        name = vhost_name(vhost)
        receivers = total("denied_receivers")
        rows.append({
            "id": name, "hostname": name, "connectionsApproved": total("opened"),
            "connectionsDenied": total("denied_connections"), "connectionsCurrent": total("connections"),
            "perUserState": users.get(vhost, {}), "perHostState": hosts.get(vhost, {}),
            "sessionDenied": total("denied_sessions"), "senderDenied": total("denied_links") - receivers,
            "receiverDenied": receivers, "name": f"vhostStats/{name}", "identity": f"vhostStats/{name}",
            "type": PREFIX + "vhostStats",
        })
    return rows
