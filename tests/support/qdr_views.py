"""What qdstat 1.19 reads in each answer, as checks: the attributes each view dereferences and the types its
formatting needs (``PlainNum`` and ``TimeLong`` take integers, ``-l`` adds the two delay counts, ``-a``
compares ``priority`` with 0 and indexes ``name``, ``--vhosts`` takes ``len`` of ``groups``...).

`check_answers` runs the check of every QUERY and GET-MGMT-NODES answer of a replayed command, so a view
whose answer qdstat could not print fails here with the attribute and the value at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.qdr_tools import PREFIX, Exchange, entities

Row = dict[str, Any]


def _ints(row: Row, *names: str) -> None:
    for n in names:
        value = row[n]
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, (n, value, row)


def _texts(row: Row, *names: str, null: bool = False) -> None:
    for n in names:
        value = row[n]
        assert isinstance(value, str) or (null and value is None), (n, value, row)


def router(rows: list[Row]) -> None:
    (r,) = rows
    if list(r) == ["memoryUsage"]:                  # qdstat -m on a router with memory pools
        _ints(r, "memoryUsage")
        return
    _texts(r, "id", "version", "mode", "area")
    assert r["mode"] in ("standalone", "interior"), r
    if "linkRouteCount" in r:                       # -g
        _ints(r, "workerThreads", "uptimeSeconds", "memoryUsage", "linkRouteCount", "autoLinkCount",
              "linkCount", "nodeCount", "addrCount", "connectionCount", "presettledDeliveries",
              "droppedPresettledDeliveries", "acceptedDeliveries", "rejectedDeliveries", "releasedDeliveries",
              "modifiedDeliveries", "deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck",
              "deliveriesRedirectedToFallback", "deliveriesIngress", "deliveriesEgress", "deliveriesTransit",
              "deliveriesIngressRouteContainer", "deliveriesEgressRouteContainer")


def connections(rows: list[Row]) -> None:
    for c in rows:
        _texts(c, "identity", "role", "protocol", "dir")
        _texts(c, "host", "container", "sasl", "user", "sslProto", "sslCipher", null=True)
        assert isinstance(c["isAuthenticated"], bool) and isinstance(c["isEncrypted"], bool), c
        assert c["dir"] in ("in", "out") and c["protocol"] == "amqp", c
        _ints(c, "uptimeSeconds")
        assert "lastDlvSeconds" not in c, "qdstat would print a 'last dlv' column of nothing"


def links(rows: list[Row]) -> None:
    for link in rows:
        assert link["linkType"] in ("endpoint", "inter-router", "router-control"), link
        assert link["linkDir"] in ("in", "out"), link
        _texts(link, "identity", "connectionId")
        addr = link["owningAddr"]
        assert addr is None or (isinstance(addr, str) and addr[0] in "MLR" and len(addr) > 1), link
        # qdstat -l: "delay" adds the two counts; "blkd" compares zeroCreditSeconds with 0
        _ints(link, "deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "zeroCreditSeconds", "deliveriesStuck",
              "settleRate")
        if link["linkType"] != "router-control":
            _ints(link, "undeliveredCount", "unsettledCount", "deliveryCount", "presettledCount",
                  "droppedPresettledCount", "acceptedCount", "rejectedCount", "releasedCount",
                  "modifiedCount", "creditAvailable")
        assert link["adminStatus"] == "enabled" and link["operStatus"] == "up", link


def addresses(rows: list[Row]) -> None:
    for a in rows:
        _texts(a, "name", "distribution")
        assert a["name"][0] in "MLR" and len(a["name"]) > 1, a          # qdstat indexes name[0]
        assert isinstance(a["priority"], int) and a["priority"] >= -1, a  # compared with 0
        _ints(a, "inProcess", "subscriberCount", "remoteCount", "containerCount", "deliveriesIngress",
              "deliveriesEgress", "deliveriesTransit", "deliveriesToContainer", "deliveriesFromContainer",
              "deliveriesRedirectedToFallback")


def nodes(rows: list[Row]) -> None:
    assert rows, "qdstat -n says 'Router is Standalone - No Router List' without rows: this node is one"
    (me,) = [n for n in rows if n["nextHop"] == "(self)"]
    for n in rows:
        _texts(n, "id")
        assert n["lastTopoChange"] is None or isinstance(n["lastTopoChange"], int), n
        assert isinstance(n["linkState"], list) and isinstance(n["validOrigins"], list), n
        if n is not me and n["cost"] is not None:     # reachable: through a next hop, or its own link
            assert n["nextHop"] is not None or n["routerLink"] is not None, n


def empty(rows: list[Row]) -> None:
    assert rows == [], rows


def policy(rows: list[Row]) -> None:
    (p,) = rows
    _ints(p, "maxConnections", "connectionsProcessed", "connectionsDenied", "connectionsCurrent",
          "linksDenied", "totalDenials")
    assert isinstance(p["enableVhostPolicy"], bool) and isinstance(p["enableVhostNamePatterns"], bool), p
    _texts(p, "policyDir", "defaultVhost")                # qdstat takes their len
    assert "maxMessageSize" not in p and "maxMessageSizeDenied" not in p, "no such figures here"


def vhosts(rows: list[Row]) -> None:
    for v in rows:
        _texts(v, "hostname")
        assert isinstance(v["groups"], dict) and isinstance(v["allowUnknownUser"], bool), v
        for key in ("maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost"):
            assert v[key] is None or isinstance(v[key], int), v
    assert not rows or "maxMessageSize" not in rows[0], rows


def vhost_stats(rows: list[Row]) -> None:
    for v in rows:
        _texts(v, "hostname")
        _ints(v, "connectionsApproved", "connectionsDenied", "connectionsCurrent", "sessionDenied",
              "senderDenied", "receiverDenied")
        assert isinstance(v["perUserState"], dict), v


def configured(rows: list[Row]) -> None:
    """qdmanage query of listeners, connectors, addresses: named entities, ports as strings."""
    for r in rows:
        assert isinstance(r["name"], str) and r["name"] == r.get("identity", r["name"]), r
        assert "port" not in r or isinstance(r["port"], str), r


CHECKS: dict[str, Callable[[list[Row]], None]] = {
    "listener": configured, "connector": configured, "router.config.address": configured,
    "router": router, "connection": connections, "router.link": links, "router.address": addresses,
    "router.node": nodes, "allocator": empty, "router.config.autoLink": empty,
    "router.config.linkRoute": empty, "policy": policy, "vhost": vhosts, "vhostStats": vhost_stats,
}


def check_answers(exchanges: list[Exchange]) -> None:
    """Every answer is a 200 of the shape the tools read; QUERY answers pass their view's check."""
    for e in exchanges:
        assert e.status == 200, (e.properties, e.status, e.description)
        assert e.answer_properties.get("statusDescription") == "OK", e.answer_properties
        if e.operation == "GET-MGMT-NODES":
            assert isinstance(e.answer, list) and e.answer, e.answer
            assert all(a.startswith("amqp:/_topo/0/") and a.endswith("/$management") for a in e.answer)
        elif e.operation == "QUERY":
            asked = e.body["attributeNames"]
            assert asked == [] or e.answer["attributeNames"] == asked, (asked, e.answer["attributeNames"])
            kind = e.entity_type.removeprefix(PREFIX)
            CHECKS[kind](entities(e))
