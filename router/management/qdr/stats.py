"""qdrouterd's operational entities from this node's: ``router``, ``connection``, ``router.link``,
``router.address``, ``router.node`` and the management node itself.

Rows are built from the rows the requester may read (router.management.access.EntityView: what a level
hides stays hidden) and, for what those rows do not hold, from the node itself. Figures follow qdrouterd's
meaning where it differs from this node's own entities:

* ``deliveriesDelayed1Sec`` counts deliveries settled after more than 1 s and at most 10 s,
  ``deliveriesDelayed10Sec`` those after more than 10 s (this node's ``node`` entity counts the first as
  "more than 1 s", both included);
* route containers, fallback destinations, link routes and auto-links do not exist here: their counts are 0;
* a link's ``droppedPresettledCount`` is the pre-settled deliveries it sent that no consumer got (0 on a
  link the node sends on), its ``settleRate`` the accepted and rejected settlements per second over the
  last 5 s (router.management.qdr.rates), ``deliveriesStuck`` its deliveries in flight for more than 10 s;
  the router-control links carry pre-settled control messages: their delays, stuck and zero-credit time
  are 0, their other counters null;
* what has no figure here is null (a link's ``peer`` and ``priority``, an address's phase).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from router import __version__
from router.adapter.handles import link_id
from router.adapter.routerlinks import RouterLink
from router.forwarding.records import STUCK_AFTER, Consumer
from router.management.qdr.keys import qdr_key
from router.management.qdr.schema import PREFIX
from router.management.qdr.source import Source

Row = dict[str, Any]


def management(src: Source) -> list[Row]:
    return [{"name": "self", "identity": "self", "type": PREFIX + "management"}]


# ---- router ---------------------------------------------------------------------------------------------
def router(src: Source) -> list[Row]:
    (n,) = src.view.rows("node")
    config = src.server.config
    meshed = bool(config.connectors) or any(lc.role == "inter-router" for lc in config.listeners)
    return [{
        "name": n["id"], "identity": n["id"], "id": n["id"], "type": PREFIX + "router",
        "mode": "interior" if meshed else "standalone", "area": "0", "version": __version__,
        "addrCount": n["addrCount"], "linkCount": n["linkCount"], "nodeCount": n["nodeCount"],
        "linkRouteCount": 0, "autoLinkCount": 0, "connectionCount": n["connectionCount"],
        "presettledDeliveries": n["presettledDeliveries"],
        "droppedPresettledDeliveries": n["droppedPresettledDeliveries"],
        "acceptedDeliveries": n["acceptedDeliveries"], "rejectedDeliveries": n["rejectedDeliveries"],
        "releasedDeliveries": n["releasedDeliveries"], "modifiedDeliveries": n["modifiedDeliveries"],
        "deliveriesDelayed1Sec": n["deliveriesDelayed1Sec"] - n["deliveriesDelayed10Sec"],
        "deliveriesDelayed10Sec": n["deliveriesDelayed10Sec"], "deliveriesStuck": n["deliveriesStuck"],
        "deliveriesIngress": n["deliveriesIngress"], "deliveriesEgress": n["deliveriesEgress"],
        "deliveriesTransit": n["deliveriesTransit"], "deliveriesIngressRouteContainer": 0,
        "deliveriesEgressRouteContainer": 0, "deliveriesRedirectedToFallback": 0,
        "uptimeSeconds": n["uptimeSeconds"], "memoryUsage": vm_size(), "workerThreads": 1,
    }]


def vm_size() -> int | None:
    """The process's virtual memory size in bytes (VmSize, as qdrouterd's memoryUsage), None if unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# ---- connections ----------------------------------------------------------------------------------------
def connections(src: Source, offset: int, count: int | None) -> list[Row]:
    return [_connection(r) for r in src.view.page("connection", offset, count)]


def _connection(r: Row) -> Row:
    security = r.get("security") or "no-security"
    encrypted = security != "no-security"
    proto, _, cipher = security.partition("(")
    sasl = r.get("saslMechanism")
    return {
        "name": f"connection/{r.get('host') or r['identity']}", "identity": r["identity"], "host": r["host"],
        "role": r["role"], "protocol": "amqp", "dir": r["dir"], "container": r["container"], "sasl": sasl,
        "isAuthenticated": bool(r["authenticated"]) or sasl == "ANONYMOUS", "user": r["user"],
        "isEncrypted": encrypted, "sslProto": proto if encrypted else None,
        "sslCipher": cipher.rstrip(")") if encrypted and cipher else None, "type": PREFIX + "connection",
        "ssl": encrypted, "opened": True, "active": True, "adminStatus": "enabled", "operStatus": "up",
        "uptimeSeconds": r["uptimeSeconds"],
    }


# ---- links ----------------------------------------------------------------------------------------------
def links(src: Source, offset: int, count: int | None) -> list[Row]:
    """Rows `offset`.. of the link table: the requester's view of each link, with the figures of its record
    (a link table page and the engine's links are in the same order: a level only blanks link attributes)."""
    stop = None if count is None else offset + count
    rows = src.view.page("link", offset, count)
    recs = [rec for _, rec in itertools.islice(src.server.engine.links.items(), offset, stop)]
    stuck = _stuck(src.server.core)
    node_id = src.server.core.node_id
    return [_link(r, rec, stuck, src, node_id) for r, rec in zip(rows, recs, strict=False)]


def _stuck(core: Any) -> Counter:
    """Link record -> its deliveries in flight for more than STUCK_AFTER seconds (on either end)."""
    limit = core.now - STUCK_AFTER
    stuck: Counter = Counter()
    for e in core.in_flight.values():
        if e.sent_at < limit:
            stuck[e.consumer] += 1
            if e.group is None:
                stuck[e.producer] += 1
    return stuck


def _link(r: Row, rec: Any, stuck: Counter, src: Source, node_id: str) -> Row:
    row = {
        "name": r["linkName"], "identity": r["identity"], "type": PREFIX + "router.link",
        "linkName": r["linkName"], "linkType": r["linkType"], "linkDir": r["linkDir"],
        "owningAddr": qdr_key(r["owningAddr"], node_id), "capacity": r["capacity"], "peer": None,
        "undeliveredCount": r["undeliveredCount"], "unsettledCount": r["unsettledCount"],
        "deliveryCount": r["deliveryCount"], "connectionId": r["connectionId"], "adminStatus": "enabled",
        "operStatus": "up", "presettledCount": r["presettledCount"], "droppedPresettledCount": None,
        "acceptedCount": r["acceptedCount"], "rejectedCount": r["rejectedCount"],
        "releasedCount": r["releasedCount"], "modifiedCount": r["modifiedCount"],
        "deliveriesDelayed1Sec": 0, "deliveriesDelayed10Sec": 0, "deliveriesStuck": 0, "settleRate": 0,
        "creditAvailable": r["creditAvailable"], "zeroCreditSeconds": r["zeroCreditSeconds"] or 0,
    }
    if rec.__class__ is not RouterLink:
        over1, over10 = rec.delays
        row.update(droppedPresettledCount=0 if rec.__class__ is Consumer else rec.dropped,
                   deliveriesDelayed1Sec=over1 - over10, deliveriesDelayed10Sec=over10,
                   deliveriesStuck=stuck.get(rec, 0), settleRate=src.rates.rate(rec))
    return row


# ---- addresses ------------------------------------------------------------------------------------------
def addresses(src: Source, offset: int, count: int | None) -> list[Row]:
    node_id = src.server.core.node_id
    return [_address(r, node_id) for r in src.view.page("address", offset, count)]


def _address(r: Row, node_id: str) -> Row:
    key = qdr_key(r["identity"], node_id)
    return {
        "name": key, "identity": key, "type": PREFIX + "router.address", "key": key,
        "distribution": r["distribution"], "inProcess": 0, "subscriberCount": r["subscriberCount"],
        "remoteCount": r["remoteCount"], "containerCount": 0, "remoteHostRouters": r["remoteHostRouters"],
        "deliveriesIngress": r["deliveriesIngress"], "deliveriesEgress": r["deliveriesEgress"],
        "deliveriesTransit": r["deliveriesTransit"], "deliveriesToContainer": 0,
        "deliveriesFromContainer": 0, "deliveriesEgressRouteContainer": 0,
        "deliveriesIngressRouteContainer": 0, "priority": -1, "deliveriesRedirectedToFallback": 0,
    }


# ---- the mesh -------------------------------------------------------------------------------------------
def nodes(src: Source) -> list[Row]:
    """This node (next hop ``(self)``) and every other node its link-state database knows."""
    server = src.server
    ls = server.mesh.ls
    me = server.core.node_id
    neighbours, next_hops, costs, origins = ls.neighbors, ls.next_hops, ls.costs, ls.valid_origins
    control = _control_links(server.engine.conns.values())
    changed = ls.last_change
    rows = [_node(me, ls.instance, sorted(neighbours), "(self)", [], None, None,
                  int(time.time() - (time.monotonic() - changed)) if changed > 0 else 0)]
    for info in ls.remote_nodes():
        node = info["id"]
        hop = next_hops.get(node)
        rows.append(_node(node, info["instance"], sorted(ls.link_state(node) or ()),
                          hop if hop is not None and hop != node else None, sorted(origins.get(node, ())),
                          control.get(node) if node in neighbours else None, costs.get(node), None))
    return rows


def _node(node: str, instance: int, peers: list[str], next_hop: str | None, origins: list[str],
          router_link: str | None, cost: int | None, changed: int | None) -> Row:
    return {"id": node, "instance": instance, "linkState": peers, "nextHop": next_hop,
            "validOrigins": origins, "address": f"amqp:/_topo/0/{node}", "routerLink": router_link,
            "cost": cost, "lastTopoChange": changed, "name": f"router.node/{node}",
            "identity": f"router.node/{node}", "type": PREFIX + "router.node"}


def _control_links(conns: Iterable[Any]) -> dict[str, str]:
    """Neighbour id -> the identity of the router-control link this node sends to it on."""
    out = {}
    for conn in _alive(conns):
        peer = conn.router
        if peer is not None and peer.control_out is not None:
            out[peer.node_id] = link_id(peer.control_out)
    return out


def _alive(conns: Iterable[Any]) -> Iterator[Any]:
    return (c for c in conns if c.alive)


def mgmt_nodes(src: Source) -> list[str]:
    """GET-MGMT-NODES: the agent address of this node and of every node it reaches (qdstat --all-routers
    reads each)."""
    server = src.server
    ids = [server.core.node_id, *sorted(server.mesh.ls.reachable)]
    return [f"amqp:/_topo/0/{node}/$management" for node in ids]
