"""Management entities of one node: rows of attributes read from the engine, core and control plane.

Each entity type has an ordered attribute list (ATTRIBUTES) and a function that returns one dict per
entity. Nothing here changes node state; everything is read when a request (or a metrics scrape)
asks, so counting on the forwarding path stays a few integer increments. docs/MANAGEMENT.md describes
every attribute.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from router import __version__
from router.adapter.handles import link_id, link_name, link_queued
from router.adapter.routerlinks import RouterLink
from router.forwarding.core import Consumer, Producer

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "node": (
        "id", "version", "uptimeSeconds", "connectionCount", "linkCount", "addrCount", "nodeCount",
        "deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "acceptedDeliveries",
        "rejectedDeliveries", "releasedDeliveries", "modifiedDeliveries", "presettledDeliveries",
        "droppedPresettledDeliveries", "unroutableDeliveries", "hopLimitDrops", "unsettledDeliveries",
        "deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck", "streamsInProgress",
        "reloads", "lastReload", "handshakeTimeouts", "connectionsRefusedNoFd", "readsDeferred",
        "controlQueued", "memoryLimit", "bufferedBytes", "bufferedPeak", "slowConnections", "heldProducers",
        "creditHolds", "addressSteps"),
    "connection": (
        "identity", "host", "container", "role", "dir", "security", "authenticated", "user",
        "saslMechanism", "uptimeSeconds", "linkCount", "peerNode", "listener"),
    "link": (
        "identity", "linkType", "linkDir", "connectionId", "linkName", "owningAddr", "peerNode", "capacity",
        "creditAvailable", "undeliveredCount", "unsettledCount", "deliveryCount", "presettledCount",
        "acceptedCount", "rejectedCount", "releasedCount", "modifiedCount", "zeroCreditSeconds"),
    "address": (
        "identity", "distribution", "subscriberCount", "remoteCount", "remoteHostRouters", "producerCount",
        "deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "ready"),
    "router-node": (
        "identity", "reachable", "neighbour", "nextHop", "cost", "linkState", "validOrigins", "instance",
        "lsSeq", "mobileSeq", "addrCount", "mobileAddresses"),
    "edge": (       # edge mode (docs/EDGE.md): an interior's edges, or an edge's uplinks
        "identity", "role", "active", "connectionId", "cost", "proxiedAddresses", "watchedAddresses"),
    "mobile-address": ("identity", "node", "address"),
    "broker": (
        "identity", "url", "state", "addresses", "published", "confirmed", "returned", "nacked",
        "unconfirmed", "consumed", "acked", "requeued", "deadLettered", "reconnects", "connects", "failures",
        "silent", "linkCount", "standby", "waiting", "peakUnconfirmed", "inflightToMesh"),
    "listener": ("identity", "host", "port", "role", "cost", "connectionCount", "handshakeTimeouts",
                 "settings"),
    "connector": ("identity", "host", "port", "role", "cost", "connected", "settings"),
    "address-rule": ("identity", "prefix", "distribution"),
    "policy-group": ("identity", "vhost", "name", "settings"),
    "policy": ("identity", "listener", "vhost", "group", "connectionCount", "connectionsOpened",
               "connectionsDenied", "sessionsDenied", "linksDenied", "messagesDenied"),
}



def canonical_type(name: str) -> str | None:
    """The entity type a request's `type` names (``link`` or ``meshrouter.link``), or None when unknown.
    qdrouterd's type names (``org.apache.qpid.dispatch.router.link``, ``router.link``) are answered in
    qdrouterd's terms by router.management.qdr."""
    name = name.removeprefix("meshrouter.")
    return name if name in ATTRIBUTES else None


class NodeEntities:
    """Reads the management entities of one running node (router.node.server.NodeServer)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self._rows: dict[str, Callable[[], list[dict[str, Any]]]] = {
            "node": lambda: [self.node()],
            "connection": self.connections,
            "link": self.links,
            "address": self.addresses,
            "router-node": self.router_nodes,
            "edge": self.edges,
            "mobile-address": lambda: list(map(_mobile_row, self._mobile_addresses())),
            "broker": self.brokers,
            "listener": self.listeners,
            "connector": self.connectors,
            "address-rule": self.address_rules,
            "policy-group": self.policy_groups,
            "policy": self.policy,
        }
        # the big tables: (what to iterate, how one item becomes a row), so that a page builds its rows only
        self._lazy: dict[str, tuple[Callable[[], Iterable[Any]], Callable[[Any], dict[str, Any]]]] = {
            "connection": (self._alive_connections, self._connection),
            "link": (lambda: self.server.engine.links.items(), lambda item: self._link(*item)),
            "address": (lambda: self.server.core.addresses.values(), self.address_row),
            "mobile-address": (self._mobile_addresses, _mobile_row),
        }

    def rows(self, entity_type: str) -> list[dict[str, Any]]:
        """Every entity of `entity_type` (a canonical type name) as a dict of all its attributes."""
        return self.page(entity_type, 0, None)

    def page(self, entity_type: str, offset: int, count: int | None) -> list[dict[str, Any]]:
        """The entities `offset` to `offset + count` (None: to the end) of `entity_type`, in table order.

        For the types that grow with traffic (connections, links, addresses) only the rows of the page are
        built: a page costs its size plus a skip over the table, not a row per entity."""
        stop = None if count is None else offset + count
        lazy = self._lazy.get(entity_type)
        if lazy is None:
            return self._rows[entity_type]()[offset:stop]
        items, build = lazy
        return [build(item) for item in itertools.islice(items(), offset, stop)]

    @property
    def _now(self) -> float:
        return self.server.core.now

    # ---- node ------------------------------------------------------------------------------------------
    def node(self) -> dict[str, Any]:
        server = self.server
        core = server.core
        engine = server.engine
        counters = core.counters
        outcomes = core.outcome_totals()
        ingress, egress, transit = core.delivery_totals()
        reachable = server.mesh.ls.reachable
        return {
            "id": core.node_id,
            "version": __version__,
            "uptimeSeconds": int(self._now - server.started),
            "connectionCount": sum(1 for c in engine.conns.values() if c.alive),
            "linkCount": len(engine.links),
            "addrCount": len(core.addresses),
            "nodeCount": len(reachable),
            "deliveriesIngress": ingress,
            "deliveriesEgress": egress,
            "deliveriesTransit": transit,
            "acceptedDeliveries": outcomes["accepted"],
            "rejectedDeliveries": outcomes["rejected"],
            "releasedDeliveries": outcomes["released"],
            "modifiedDeliveries": outcomes["modified"],
            "presettledDeliveries": counters["presettled"],
            "droppedPresettledDeliveries": counters["dropped_presettled"],
            "unroutableDeliveries": counters["unroutable"],
            "hopLimitDrops": counters["hop_limit"],
            "unsettledDeliveries": len(core.in_flight),
            "deliveriesDelayed1Sec": counters["delayed_1s"],
            "deliveriesDelayed10Sec": counters["delayed_10s"],
            "deliveriesStuck": core.stuck(),
            "streamsInProgress": len(engine.streams.active),
            "reloads": server.last_reload.seq if server.last_reload is not None else 0,
            "lastReload": server.last_reload.as_map() if server.last_reload is not None else None,
            "handshakeTimeouts": server.handshake_timeouts,
            "connectionsRefusedNoFd": server.fd_refused,
            "readsDeferred": server.reads_deferred,
            "controlQueued": server.mesh.queued,
            "addressSteps": server.mesh.ls.address_steps,
            **_budget(engine.budget),
        }

    # ---- connections -------------------------------------------------------------------------------------
    def connections(self) -> list[dict[str, Any]]:
        return [self._connection(conn) for conn in self._alive_connections()]

    def _alive_connections(self) -> Iterator[Any]:
        return (conn for conn in self.server.engine.conns.values() if conn.alive)

    def _connection(self, conn: Any) -> dict[str, Any]:
        router = conn.router
        return {
            "identity": str(conn.ident),
            "host": conn.peer,
            "container": conn.remote_container,
            "role": "internal" if conn.internal else conn.role,
            "dir": "out" if conn.client else "in",
            "security": getattr(conn, "security", None) or "no-security",
            "authenticated": bool(getattr(conn, "authenticated", False)),
            "user": getattr(conn, "user", None),
            "saslMechanism": getattr(conn, "sasl_mechanism", None),
            "uptimeSeconds": int(self._now - conn.opened),
            "linkCount": len(conn.links),
            "peerNode": router.node_id if router is not None else None,
            "listener": getattr(conn, "listener", None),
        }

    def connection_roles(self) -> dict[str, int]:
        """Open connections by `role` (as the rows have it), without building the rows."""
        roles: dict[str, int] = {}
        for conn in self._alive_connections():
            role = "internal" if conn.internal else conn.role
            roles[role] = roles.get(role, 0) + 1
        return roles

    # ---- links -------------------------------------------------------------------------------------------
    def link_totals(self) -> LinkTotals:
        """Links summed by (linkType, linkDir), without building a row per link (for /metrics)."""
        totals = LinkTotals()
        count, unsettled, peers = totals.count, totals.unsettled, totals.peer_deliveries
        for rec in self.server.engine.links.values():
            if rec.__class__ is RouterLink:
                key = ("router-control", "out" if rec.outgoing else "in")
                count[key] = count.get(key, 0) + 1
                continue
            if rec.__class__ is Consumer:
                key = ("inter-router" if rec.peer is not None else "endpoint", "out")
                held = rec.unsettled
            else:
                key = ("inter-router" if rec.router else "endpoint", "in")
                held = rec.in_flight
            count[key] = count.get(key, 0) + 1
            unsettled[key] = unsettled.get(key, 0) + held
            if key[0] == "inter-router":
                router = rec.conn.router
                peer = (router.node_id if router is not None else "", key[1])
                peers[peer] = peers.get(peer, 0) + rec.delivered
        return totals

    def links(self) -> list[dict[str, Any]]:
        return [self._link(handle, rec) for handle, rec in self.server.engine.links.items()]

    def _link(self, handle: object, rec: Consumer | Producer | RouterLink) -> dict[str, Any]:
        conn = rec.conn
        row: dict[str, Any] = dict.fromkeys(ATTRIBUTES["link"])
        row.update(identity=link_id(handle), connectionId=str(conn.ident), linkName=link_name(handle),
                   peerNode=conn.router.node_id if conn.router is not None else None)
        if rec.__class__ is RouterLink:
            row.update(linkType="router-control", linkDir="out" if rec.outgoing else "in")
            return row
        if rec.__class__ is Consumer:
            held = len(rec.held) if rec.held else 0
            row.update(linkType="inter-router" if rec.peer is not None else "endpoint", linkDir="out",
                       owningAddr=rec.address.key if rec.peer is None else None,
                       undeliveredCount=link_queued(handle) + held, unsettledCount=rec.unsettled)
        else:
            row.update(linkType="inter-router" if rec.router else "endpoint", linkDir="in",
                       owningAddr=rec.address.key if rec.address is not None else None,
                       capacity=self.server.core.capacity, undeliveredCount=0, unsettledCount=rec.in_flight)
        acc, rej, rel, mod = rec.outcomes
        row.update(creditAvailable=max(rec.credit, 0), deliveryCount=rec.delivered,
                   presettledCount=rec.presettled, acceptedCount=acc, rejectedCount=rej, releasedCount=rel,
                   modifiedCount=mod, zeroCreditSeconds=int(rec.zero_credit))
        return row

    # ---- addresses -------------------------------------------------------------------------------------
    def addresses(self) -> list[dict[str, Any]]:
        return [self.address_row(a) for a in self.server.core.addresses.values()]

    @staticmethod
    def address_row(a: Any) -> dict[str, Any]:
        """The row of one address record (router.forwarding.records.Address)."""
        remote = [d.node for d in a.remote]
        return {
            "identity": a.key,
            "distribution": a.distribution,
            "subscriberCount": len(a.consumers),
            "remoteCount": len(remote),
            "remoteHostRouters": remote,
            "producerCount": len(a.producers),
            "deliveriesIngress": a.ingress,
            "deliveriesEgress": a.egress,
            "deliveriesTransit": a.transit,
            "ready": a.ready,
        }

    # ---- the mesh ---------------------------------------------------------------------------------------
    def router_nodes(self) -> list[dict[str, Any]]:
        ls = self.server.mesh.ls
        next_hops, costs, neighbours = ls.next_hops, ls.costs, ls.neighbors
        origins = ls.valid_origins
        advertised: dict[str, list[str]] = {}
        for address, holders in sorted(ls.known_addresses.items()):
            for holder in holders:
                advertised.setdefault(holder, []).append(address)
        rows = []
        for info in ls.remote_nodes():
            node = info["id"]
            peers = ls.link_state(node) or {}
            hop = next_hops.get(node)
            rows.append({
                "identity": node,
                "reachable": node in next_hops,
                "neighbour": node in neighbours,
                "nextHop": hop if hop is not None and hop != node else None,
                "cost": costs.get(node),
                "linkState": [f"{p}:{c}" for p, c in sorted(peers.items())],
                "validOrigins": sorted(origins.get(node, ())),
                "instance": info["instance"],
                "lsSeq": info["ls_seq"],
                "mobileSeq": info["mobile_seq"],
                "addrCount": info["addresses"],
                "mobileAddresses": advertised.get(node, []),
            })
        return rows

    def edges(self) -> list[dict[str, Any]]:
        """An interior's edges (role `edge`), or an edge's open uplinks (role `uplink`, the interior's id)."""
        glue = getattr(self.server, "edges", None)
        if glue is None:
            return []
        rows = []
        hub = getattr(glue, "hub", None)
        if hub is not None:
            for conn, rec in sorted(hub.edges.items(), key=lambda item: item[1].edge_id):
                rows.append({"identity": rec.edge_id, "role": "edge", "active": rec.active,
                             "connectionId": conn.ident, "cost": conn.router.cost if conn.router else None,
                             "proxiedAddresses": len(rec.consumers), "watchedAddresses": len(rec.watch)})
            return rows
        active = glue.choice.active
        for conn, up in sorted(glue.choice.open.items(), key=lambda item: item[1].index):
            on = active is not None and active.link is conn
            rows.append({"identity": up.interior, "role": "uplink", "active": on, "connectionId": conn.ident,
                         "cost": up.cost, "proxiedAddresses": len(glue.proxy.consumers) if on else 0,
                         "watchedAddresses": len(glue.proxy.watched) if on else 0})
        return rows
    def _mobile_addresses(self) -> Iterator[tuple[str, str]]:
        """(node, address) for every mobile address another node advertises (the link-state view), one
        row each: the router-node rows' `mobileAddresses`, in pages (100,000 of them fit in no answer)."""
        mesh = self.server.mesh
        if mesh is None:                    # an edge node runs no link state
            return
        for address, holders in mesh.ls.known_addresses.items():
            for holder in sorted(holders):
                yield holder, address

    # ---- broker gateways -------------------------------------------------------------------------------
    def brokers(self) -> list[dict[str, Any]]:
        gateways = self.server.gateways
        if gateways is None:
            return []
        state = gateways.snapshot()
        rows = []
        for row in gateways.entities():
            st = state.get(row["identity"], {})
            row = {**row, "connects": st.get("connects"), "failures": st.get("failures"),
                   "silent": st.get("silent"), "linkCount": st.get("links"), "standby": st.get("standby"),
                   "waiting": st.get("waiting"), "peakUnconfirmed": st.get("peak_unconfirmed"),
                   "inflightToMesh": st.get("inflight_to_mesh")}
            rows.append({name: row.get(name) for name in ATTRIBUTES["broker"]})
        return rows

    # ---- listeners -------------------------------------------------------------------------------------
    def listeners(self) -> list[dict[str, Any]]:
        server = self.server
        counts: dict[str, int] = {}
        for conn in server.engine.conns.values():
            where = getattr(conn, "listener", None)
            if conn.alive and where is not None:
                counts[where] = counts.get(where, 0) + 1
        timeouts = {b.name: b.handshake_timeouts for b in server.bound}
        rows = []
        for listener in server.bound:
            lc = listener.config
            host, port = listener.sock.getsockname()[:2]
            ident = f"{host}:{port}"
            settings = {k: v for k, v in _fields(lc) if k not in ("host", "port", "role", "cost")}
            rows.append({"identity": ident, "host": host, "port": port, "role": lc.role, "cost": lc.cost,
                         "connectionCount": counts.get(ident, 0),
                         "handshakeTimeouts": timeouts.get(ident, 0), "settings": settings})
        return rows


    # ---- the configuration that management writes change (router.management.writes) -------------------
    def connectors(self) -> list[dict[str, Any]]:
        rows = []
        for connector in self.server.connectors:
            cc = connector.config
            settings = {k: v for k, v in _fields(cc) if k not in ("host", "port", "role", "cost")}
            rows.append({"identity": f"{cc.host}:{cc.port}", "host": cc.host, "port": cc.port,
                         "role": cc.role, "cost": cc.cost, "connected": connector.conn is not None,
                         "settings": settings})
        return rows

    def address_rules(self) -> list[dict[str, Any]]:
        return [{"identity": r.prefix, "prefix": r.prefix, "distribution": r.distribution}
                for r in self.server.config.address_rules]

    def policy_groups(self) -> list[dict[str, Any]]:
        policy = self.server.config.policy
        if policy is None:
            return []
        rows = []
        for vhost, vp in policy.all_vhosts().items():
            for name, group in vp.groups.items():
                identity = name if vhost == "default" else f"{vhost}/{name}"
                rows.append({"identity": identity, "vhost": vhost, "name": name,
                             "settings": dict(_fields(group))})
        return rows

    # ---- authorization -----------------------------------------------------------------------------------
    def policy(self) -> list[dict[str, Any]]:
        """One row per listener, vhost and group that admitted or refused something (router.policy)."""
        rows = []
        for (listener, vhost, group), s in sorted(self.server.core.policy.denials.stats.items()):
            rows.append({"identity": f"{listener} {vhost} {group}", "listener": listener, "vhost": vhost,
                         "group": group, "connectionCount": s.connections, "connectionsOpened": s.opened,
                         "connectionsDenied": s.denied_connections, "sessionsDenied": s.denied_sessions,
                         "linksDenied": s.denied_links, "messagesDenied": s.denied_messages})
        return rows


@dataclasses.dataclass
class LinkTotals:
    """Links summed for /metrics: count and unsettled deliveries by (type, dir), deliveries by (peer, dir)."""

    count: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    unsettled: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    peer_deliveries: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)


def _fields(obj: object) -> Iterator[tuple[str, Any]]:
    """A config dataclass's fields as AMQP-friendly values (nested dataclasses become maps)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            value = dict(_fields(value))
        elif isinstance(value, tuple | frozenset | set):
            value = list(value)
        yield f.name, value


def _budget(budget: Any) -> dict[str, Any]:
    """The memory budget's figures (router.forwarding.budget) as node attributes."""
    snap = budget.snapshot() if budget is not None else {}
    return {"memoryLimit": snap.get("memory_limit"), "bufferedBytes": snap.get("buffered_bytes", 0),
            "bufferedPeak": snap.get("buffered_peak", 0), "slowConnections": snap.get("slow_connections", 0),
            "heldProducers": snap.get("held_producers", 0), "creditHolds": snap.get("credit_holds", 0)}


def _mobile_row(item: tuple[str, str]) -> dict[str, Any]:
    node, address = item
    return {"identity": f"{node}/{address}", "node": node, "address": address}
