"""qdrouterd's entity types as this node serves them: attributes, operations, base types.

Each :class:`QdType` lists the attributes a QUERY without ``attributeNames`` returns, in qdrouterd's order
(``name``, ``identity`` and ``type`` included). An attribute of qdrouterd's schema that has no figure here is
left out of that list (qdstat then leaves out its row or column, as it does for an older router) and is
null when a request names it, as qdrouterd's core agent answers an unknown attribute. A type whose
concept does not exist here (link routes, auto-links, memory pools...) has no entities, and ``absent``
says what to use instead: a write of it is a 501 with that sentence.

The answers of the management node's own operations (``GET-TYPES``, ``GET-ATTRIBUTES``,
``GET-OPERATIONS``, ``GET-ANNOTATIONS``) are built here from the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "org.apache.qpid.dispatch."
MANAGEMENT_NODE = "org.amqp.management"
CONFIGURATION, OPERATIONAL = "configurationEntity", "operationalEntity"
#: the operations of the management node itself (type org.amqp.management, name self)
NODE_OPERATIONS = ("QUERY", "GET-TYPES", "GET-ANNOTATIONS", "GET-OPERATIONS", "GET-ATTRIBUTES",
                   "GET-MGMT-NODES")
CRUD = ("CREATE", "READ", "UPDATE", "DELETE")
BASE = ("name", "identity", "type")


@dataclass(frozen=True)
class QdType:
    """One qdrouterd entity type: its short name (``router.link``), base type, attributes, operations."""

    name: str
    base: str
    attributes: tuple[str, ...]
    operations: tuple[str, ...] = ("READ",)
    absent: str | None = None          # no entities of this type here: what to use instead

    @property
    def long(self) -> str:
        return PREFIX + self.name


_LINK_ROUTES = ("link routes have no equivalent here: a node never hands a link over to a broker or a "
                "route container; bridge addresses to a RabbitMQ broker with the config file's brokers: "
                "section")

TYPES: dict[str, QdType] = {t.name: t for t in (
    QdType("management", OPERATIONAL, BASE, NODE_OPERATIONS + ("READ",)),
    QdType("router", CONFIGURATION, (
        "name", "identity", "id", "type", "mode", "area", "version", "addrCount", "linkCount", "nodeCount",
        "linkRouteCount", "autoLinkCount", "connectionCount", "presettledDeliveries",
        "droppedPresettledDeliveries", "acceptedDeliveries", "rejectedDeliveries", "releasedDeliveries",
        "modifiedDeliveries", "deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck",
        "deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "deliveriesIngressRouteContainer",
        "deliveriesEgressRouteContainer", "deliveriesRedirectedToFallback", "uptimeSeconds", "memoryUsage",
        "workerThreads")),
    QdType("connection", OPERATIONAL, (
        "name", "identity", "host", "role", "protocol", "dir", "container", "sasl", "isAuthenticated", "user",
        "isEncrypted", "sslProto", "sslCipher", "type", "ssl", "opened", "active", "adminStatus",
        "operStatus", "uptimeSeconds")),
    QdType("router.link", OPERATIONAL, (
        "name", "identity", "type", "linkName", "linkType", "linkDir", "owningAddr", "capacity", "peer",
        "undeliveredCount", "unsettledCount", "deliveryCount", "connectionId", "adminStatus", "operStatus",
        "presettledCount", "droppedPresettledCount", "acceptedCount", "rejectedCount", "releasedCount",
        "modifiedCount", "deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck", "settleRate",
        "creditAvailable", "zeroCreditSeconds")),
    QdType("router.address", OPERATIONAL, (
        "name", "identity", "type", "key", "distribution", "inProcess", "subscriberCount", "remoteCount",
        "containerCount", "remoteHostRouters", "deliveriesIngress", "deliveriesEgress", "deliveriesTransit",
        "deliveriesToContainer", "deliveriesFromContainer", "deliveriesEgressRouteContainer",
        "deliveriesIngressRouteContainer", "priority", "deliveriesRedirectedToFallback")),
    QdType("router.node", OPERATIONAL, (
        "id", "instance", "linkState", "nextHop", "validOrigins", "address", "routerLink", "cost",
        "lastTopoChange", "name", "identity", "type")),
    QdType("listener", CONFIGURATION, (
        "host", "port", "role", "cost", "saslMechanisms", "authenticatePeer", "requireEncryption",
        "requireSsl", "maxFrameSize", "maxSessions", "idleTimeoutSeconds", "initialHandshakeTimeoutSeconds",
        "http", "policyVhost", "name", "identity", "type"), CRUD),
    QdType("connector", CONFIGURATION, (
        "host", "port", "role", "cost", "saslMechanisms", "verifyHostname", "connectionStatus",
        "connectionMsg", "name", "identity", "type"), CRUD),
    QdType("router.config.address", CONFIGURATION, (
        "name", "identity", "type", "prefix", "distribution", "waypoint", "ingressPhase", "egressPhase",
        "priority", "fallback"), CRUD),
    QdType("policy", CONFIGURATION, (
        "maxConnections", "enableVhostPolicy", "enableVhostNamePatterns", "policyDir", "defaultVhost",
        "connectionsProcessed", "connectionsDenied", "connectionsCurrent", "linksDenied", "totalDenials",
        "name", "identity", "type")),
    QdType("vhost", CONFIGURATION, (
        "hostname", "maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost", "allowUnknownUser",
        "groups", "name", "identity", "type"), CRUD),
    QdType("vhostStats", OPERATIONAL, (
        "id", "hostname", "connectionsApproved", "connectionsDenied", "connectionsCurrent", "perUserState",
        "perHostState", "sessionDenied", "senderDenied", "receiverDenied", "name", "identity", "type")),
    QdType("router.config.linkRoute", CONFIGURATION, (
        "name", "identity", "type", "prefix", "pattern", "addExternalPrefix", "delExternalPrefix",
        "containerId", "connection", "distribution", "direction", "operStatus"), absent=_LINK_ROUTES),
    QdType("router.connection.linkRoute", CONFIGURATION, (
        "name", "identity", "type", "pattern", "direction", "containerId"), absent=_LINK_ROUTES),
    QdType("router.config.autoLink", CONFIGURATION, (
        "name", "identity", "type", "address", "direction", "phase", "containerId", "connection",
        "externalAddress", "fallback", "linkRef", "operStatus", "lastError"),
        absent="auto-links have no equivalent here: a node never attaches to a broker's queues itself; "
        "bridge addresses to a RabbitMQ broker with the config file's brokers: section"),
    QdType("router.config.exchange", CONFIGURATION, (
        "name", "identity", "type", "address", "phase", "alternateAddress", "alternatePhase", "matchMethod",
        "bindingCount", "receivedCount", "droppedCount", "forwardedCount", "divertedCount"),
        absent="exchanges and bindings have no equivalent here: give the address a multicast distribution "
        "(addresses.rules[].distribution: multicast) and let each consumer receive from it"),
    QdType("router.config.binding", CONFIGURATION, (
        "name", "identity", "type", "exchangeName", "bindingKey", "nextHopAddress", "nextHopPhase",
        "matchedCount"),
        absent="exchanges and bindings have no equivalent here: give the address a multicast distribution "
        "(addresses.rules[].distribution: multicast) and let each consumer receive from it"),
    QdType("allocator", OPERATIONAL, (
        "name", "identity", "type", "typeName", "typeSize", "transferBatchSize", "localFreeListMax",
        "globalFreeListMax", "totalAllocFromHeap", "totalFreeToHeap", "heldByThreads",
        "batchesRebalancedToThreads", "batchesRebalancedToGlobal"),
        absent="the node has no memory pools (it is a Python process): its size is router.memoryUsage"),
    QdType("sslProfile", CONFIGURATION, (
        "name", "identity", "type", "ciphers", "protocols", "caCertFile", "certFile", "privateKeyFile",
        "passwordFile", "uidFormat"),
        absent="TLS is set on each listener and connector here: listeners[].tls and connectors[].tls in the "
        "config file, applied by meshrouter reload"),
    QdType("authServicePlugin", CONFIGURATION, (
        "name", "identity", "type", "authService", "host", "port", "realm", "sslProfile"),
        absent="there is no external authentication service here: SASL PLAIN users come from "
        "listeners[].sasl.users_file or listeners[].sasl.sasldb"),
    QdType("log", CONFIGURATION, (
        "name", "identity", "type", "module", "enable", "includeTimestamp", "includeSource", "outputFile"),
        absent="logging is set by node.log_level and node.log_levels in the config file, applied by "
        "meshrouter reload; the node logs to stderr"),
    QdType("logStats", OPERATIONAL, (
        "name", "identity", "type", "traceCount", "debugCount", "infoCount", "noticeCount", "warningCount",
        "errorCount", "criticalCount"),
        absent="the node does not count its log lines: read its stderr"),
)}

_BY_LONG = {t.long: t for t in TYPES.values()}


def resolve(name: object, short: frozenset[str] | set[str]) -> QdType | None:
    """The type a request's type name means: a long name (``org.apache.qpid.dispatch.router.link``), or one
    of the ``short`` names (qdrouterd's short names that are not this node's own type names)."""
    if not isinstance(name, str):
        return None
    found = _BY_LONG.get(name)
    if found is None and name in short:
        found = TYPES[name]
    return found


def _bases(t: QdType) -> list[str]:
    if t.name == "management":
        return [PREFIX + MANAGEMENT_NODE, PREFIX + OPERATIONAL, PREFIX + "entity"]
    return [PREFIX + t.base, PREFIX + "entity"]


def get_types(only: QdType | None = None) -> dict[str, list[str]]:
    """GET-TYPES: type -> its base types (qdrouterd's answer), for every type or `only`."""
    if only is not None:
        return {only.long: _bases(only)}
    out: dict[str, list[str]] = {PREFIX + "entity": [],
                                 PREFIX + MANAGEMENT_NODE: [PREFIX + OPERATIONAL, PREFIX + "entity"],
                                 PREFIX + CONFIGURATION: [PREFIX + "entity"],
                                 PREFIX + OPERATIONAL: [PREFIX + "entity"]}
    out.update((t.long, _bases(t)) for t in TYPES.values())
    return out


def get_attributes(only: QdType | None = None) -> dict[str, list[str]]:
    """GET-ATTRIBUTES: type -> its attribute names."""
    return {t.long: list(t.attributes) for t in TYPES.values() if only is None or t is only}


#: the settings of a vhost's user group, with the defaults that hold here when a group leaves one out (the
#: settings without an equivalent have none): qdstat --vhostgroups reads them from GET-SCHEMA
GROUP_SETTINGS = {
    "users": {}, "remoteHosts": {}, "maxConnectionsPerUser": {}, "maxConnectionsPerHost": {},
    "maxMessageSize": {}, "maxFrameSize": {}, "maxSessionWindow": {}, "maxSessions": {}, "maxSenders": {},
    "maxReceivers": {}, "allowDynamicSource": {"default": False}, "allowAnonymousSender": {"default": False},
    "allowUserIdProxy": {"default": True}, "allowWaypointLinks": {}, "allowDynamicLinkRoutes": {},
    "allowAdminStatusUpdate": {}, "allowFallbackLinks": {}, "sources": {}, "targets": {}, "sourcePattern": {},
    "targetPattern": {}, "management": {},
}


def get_schema() -> dict[str, object]:
    """GET-SCHEMA: the types in qdrouterd's schema layout (``entityTypes``: base, operations, attributes),
    without the attributes' value types and descriptions (docs/QDROUTERD-TOOLS.md has those)."""
    types: dict[str, object] = {
        t.name: {"extends": t.base, "operations": list(t.operations),
                 "attributes": {a: {} for a in t.attributes}} for t in TYPES.values()}
    types["vhostUserGroupSettings"] = {"extends": CONFIGURATION, "operations": [],
                                       "attributes": {k: dict(v) for k, v in GROUP_SETTINGS.items()}}
    return {"prefix": PREFIX.rstrip("."), "entityTypes": types}


def get_operations(only: QdType | None = None) -> dict[str, list[str]]:
    """GET-OPERATIONS: type -> the operations it supports here (READ only for a type without entities)."""
    return {t.long: list(t.operations) for t in TYPES.values() if only is None or t is only}
