"""qdrouterd's qdstat and qdmanage (1.19) against a node and a four-node mesh (issue 32, points 1 and 3).

The requests are the exact ones the real tools sent (tests/support/qdr_tools.py: recorded from them with a
frame trace and the bytes on the wire), replayed as they send them; each answer is checked as qdstat reads
it (tests/support/qdr_views.py) and, with known traffic, for its figures, a few of them against
``meshrouter stat --json`` read at the same moment.

The mesh (tests/support/stat_mesh.py's square, node A granting anonymous local clients management
``write``): a consumer on A and a producer on C exchange 5 unsettled messages on ``closest/qd/work`` (A
accepts 2, rejects 1, releases 1, and accepts the last after 1.2 s), and C sends one pre-settled message
through the anonymous relay to ``closest/qd/nobody``, which nobody consumes. Every replay and ``stat`` run
happens inside the fixture while the clients are pumped (the autouse fixture closes them after the first
test); the tests check what was recorded.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.clients import Client, make_message
from tests.support.meshes import build, wait_address
from tests.support.nodes import NodeSet
from tests.support.qdr_tools import PREFIX, entities, queries, recording, replay
from tests.support.qdr_views import check_answers
from tests.support.stat_mesh import EDGES, NAMES, json_of, run_all, stat_args
from tests.support.waiting import close_all, pump_for, wait_for

WORK, NOBODY = "closest/qd/work", "closest/qd/nobody"
WRITERS = {"default_group": "deny", "groups": {"ops": {"users": ["anonymous"], "remote_hosts": ["localhost"],
                                                       "management": "write"}}}
READS = [c for c in recording()["commands"] if c["tool"] == "qdstat"
         or c["args"][0] in ("get-types", "get-attributes", "get-operations", "get-annotations",
                             "get-mgmt-nodes", "query", "-r")]
ONE_NODE = [c for c in READS if "-r" not in c["args"] and "--all-routers" not in c["args"]]


def _name(c: dict[str, Any]) -> str:
    return f"{c['tool']} {' '.join(c['args'])}"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> dict[str, Any]:
    nodes_set = NodeSet(tmp_path_factory.mktemp("qdr-mesh"))
    try:
        nodes = build(nodes_set.start, NAMES, EDGES, sections={"A": {"policy": WRITERS}})
        urls = {n: nodes[n].url for n in NAMES}
        consumer = Client(urls["A"], container_id="qd-consumer")
        rx = consumer.receiver(WORK, credit=10, auto_accept=False)
        wait_address(nodes.values(), WORK, ["A"])
        producer = Client(urls["C"], container_id="qd-producer")
        tx = producer.sender(WORK)
        tx.wait_credit(5)
        trackers = [tx.send(f"m{i}") for i in range(5)]
        got = rx.wait_messages(5)
        got[0].accept()
        got[1].accept()
        got[2].reject()
        got[3].release()
        pump_for(1.2)
        got[4].accept()                                   # settled more than 1 s after it was sent
        wait_for(lambda: all(t.settled for t in trackers), what="the five outcomes at the producer")
        producer.sender(None).send(make_message("to nobody", address=NOBODY), settled=True)
        pump_for(0.3)
        out: dict[str, Any] = {"urls": urls, "replies": {}, "reference": {}}
        for c in READS:
            out["replies"][_name(c)] = replay(urls["A"], c)
        for c in recording()["qdrouterd_commands"]:
            out["reference"][_name(c)] = replay(urls["A"], c)
        stats = {f"{view}-{n}": stat_args("-b", urls[n], f"-{view}", "--json")
                 for n in NAMES for view in ("l", "a")}
        stats.update({"n-A": stat_args("-b", urls["A"], "-n", "--json"),
                      "c-A": stat_args("-b", urls["A"], "-c", "--json"),
                      "g-C": stat_args("-b", urls["C"], "-g", "--json")})
        out["stat"] = {k: json_of(p) for k, p in zip(stats, run_all(list(stats.values())), strict=True)}
        yield out
    finally:
        close_all()
        failure = nodes_set.stop_all()
        if failure:
            pytest.fail(failure, pytrace=False)


@pytest.mark.parametrize("name", [_name(c) for c in READS])
def test_every_recorded_read_is_answered_as_the_tools_read_it(mesh, name):
    check_answers(mesh["replies"][name])


@pytest.mark.parametrize("name", [_name(c) for c in recording()["qdrouterd_commands"]])
def test_the_requests_recorded_against_qdrouterd_are_answered_too(mesh, name):
    """Recorded against qdrouterd 1.19 itself: the same requests (qdstat -m also asks for memoryUsage)."""
    check_answers(mesh["reference"][name])


def _one(mesh: dict[str, Any], name: str, entity_type: str, index: int = -1) -> list[dict[str, Any]]:
    return entities(queries(mesh["replies"][name], entity_type)[index])


def test_links_and_addresses_count_the_known_traffic(mesh):
    """qdstat -r C -l, -l (at A) and --all-routers -a: the figures of the work traffic, as meshrouter stat
    counts them."""
    (out,) = [r for r in _one(mesh, "qdstat -l", "router.link") if r["owningAddr"] == "M0" + WORK]
    c_links = _one(mesh, "qdstat -r C -l", "router.link")
    (into,) = [r for r in c_links if r["owningAddr"] == "M0" + WORK]
    (anon,) = [r for r in c_links if r["linkType"] == "endpoint" and r["linkDir"] == "in"
               and r["owningAddr"] is None and r["presettledCount"] == 1]
    for link, direction in ((out, "out"), (into, "in")):
        assert link["linkDir"] == direction and link["linkType"] == "endpoint", link
        assert (link["deliveryCount"], link["acceptedCount"], link["rejectedCount"], link["releasedCount"],
                link["modifiedCount"]) == (5, 3, 1, 1, 0), link
        assert (link["deliveriesDelayed1Sec"], link["deliveriesDelayed10Sec"], link["deliveriesStuck"],
                link["unsettledCount"]) == (1, 0, 0, 0), link
    assert anon["droppedPresettledCount"] == 1 and out["droppedPresettledCount"] == 0
    for node, link in (("A", out), ("C", into)):
        (ours,) = [r for r in mesh["stat"][f"l-{node}"][node] if r["identity"] == link["identity"]]
        assert (ours["deliveryCount"], ours["acceptedCount"], ours["rejectedCount"]) == \
            (link["deliveryCount"], link["acceptedCount"], link["rejectedCount"])
    # --all-routers -a: one QUERY per node, in GET-MGMT-NODES' order
    all_a = mesh["replies"]["qdstat --all-routers -a"]
    assert [e.to for e in queries(all_a, "router.address")] == [f"_topo/0/{n}/$management" for n in NAMES]
    for node, e in zip(NAMES, queries(all_a, "router.address"), strict=True):
        (work,) = [a for a in entities(e) if a["name"] == "M0" + WORK]
        (ours,) = [a for a in mesh["stat"][f"a-{node}"][node] if a["identity"] == WORK]
        assert (work["deliveriesIngress"], work["deliveriesEgress"], work["deliveriesTransit"]) == \
            (ours["deliveriesIngress"], ours["deliveriesEgress"], ours["deliveriesTransit"])
        assert (work["subscriberCount"], work["remoteCount"]) == \
            (ours["subscriberCount"], ours["remoteCount"])
    expected = {"A": (0, 5, 0), "B": (0, 0, 5), "C": (5, 0, 0), "D": (0, 0, 0)}   # C -> B -> A
    got = {}
    for n, e in zip(NAMES, queries(all_a, "router.address"), strict=True):
        (work,) = [a for a in entities(e) if a["name"] == "M0" + WORK]
        got[n] = (work["deliveriesIngress"], work["deliveriesEgress"], work["deliveriesTransit"])
    assert got == expected


def test_router_views_through_the_mesh(mesh):
    """qdstat -g, -r C -g and --all-routers -g/-n: each answer comes from the node it names."""
    assert [r["id"] for r in _one(mesh, "qdstat -r C -g", "router")] == ["C"]
    all_g = queries(mesh["replies"]["qdstat --all-routers -g"], "router")
    assert [entities(e)[0]["id"] for e in all_g] == NAMES
    mgmt = mesh["replies"]["qdstat --all-routers -g"][0]
    assert mgmt.operation == "GET-MGMT-NODES"
    assert mgmt.answer == [f"amqp:/_topo/0/{n}/$management" for n in NAMES]
    (c,) = _one(mesh, "qdstat -r C -g", "router")
    ours = mesh["stat"]["g-C"]["C"]
    assert (c["mode"], c["nodeCount"], c["deliveriesDelayed1Sec"], c["deliveriesDelayed10Sec"]) == \
        ("interior", 3, ours["deliveriesDelayed1Sec"] - ours["deliveriesDelayed10Sec"], 0)
    assert c["deliveriesDelayed1Sec"] == 1
    assert c["droppedPresettledDeliveries"] == ours["droppedPresettledDeliveries"] == 1


def test_nodes_view_has_next_hops_and_links_as_qdstat_n_shows_them(mesh):
    rows = {r["id"]: r for r in _one(mesh, "qdstat -n", "router.node")}
    assert set(rows) == set(NAMES)
    assert rows["A"]["nextHop"] == "(self)" and rows["A"]["routerLink"] is None
    assert rows["A"]["linkState"] == ["B", "D"] and rows["A"]["lastTopoChange"] > 1_000_000_000
    ours = {r["identity"]: r for r in mesh["stat"]["n-A"]["A"]}
    links = {r["identity"]: r for r in _one(mesh, "qdstat -l", "router.link")}
    for node in ("B", "C", "D"):
        row = rows[node]
        assert (row["nextHop"], row["cost"]) == (ours[node]["nextHop"], ours[node]["cost"]), (row, ours[node])
        if ours[node]["neighbour"]:
            assert links[row["routerLink"]]["linkType"] == "router-control", row
    assert rows["C"]["nextHop"] == "B" and rows["D"]["nextHop"] == "B" and rows["D"]["cost"] == 3
    per_node = queries(mesh["replies"]["qdstat --all-routers -n"], "router.node")
    assert [next(r["id"] for r in entities(e) if r["nextHop"] == "(self)") for e in per_node] == NAMES


def test_connections_and_policy_at_the_node(mesh):
    conns = _one(mesh, "qdstat -c", "connection")
    peers = sorted(c["container"] for c in conns if c["role"] == "inter-router")
    ours = mesh["stat"]["c-A"]["A"]
    assert peers == sorted(c["container"] for c in ours if c["role"] == "inter-router") == ["B", "D"]
    (consumer,) = [c for c in conns if c["container"] == "qd-consumer"]
    assert consumer["isAuthenticated"] and consumer["sasl"] == "ANONYMOUS" and consumer["user"] == "anonymous"
    (p,) = _one(mesh, "qdstat --policy", "policy")
    assert p["enableVhostPolicy"] is True and p["defaultVhost"] == "$default" and p["connectionsDenied"] == 0
    assert p["connectionsCurrent"] >= 2 and p["connectionsProcessed"] >= p["connectionsCurrent"]
    (v,) = _one(mesh, "qdstat --vhosts", "vhost")
    assert v["hostname"] == "$default" and v["allowUnknownUser"] is False       # default_group: deny
    assert v["groups"] == {"ops": {"users": "anonymous", "remoteHosts": "localhost", "sources": "*",
                                   "targets": "*", "allowDynamicSource": True, "allowAnonymousSender": True,
                                   "management": "write"}}
    everything = mesh["replies"]["qdstat --all-entities"]         # one tool run: the same connections
    (p,) = entities(queries(everything, "policy")[0])
    (s,) = entities(queries(everything, "vhostStats")[0])
    assert s["connectionsCurrent"] == p["connectionsCurrent"] and "anonymous" in s["perUserState"]


def test_qdmanage_node_operations_are_answered_as_qdrouterd_does(mesh):
    def answer(name: str) -> Any:
        (e,) = mesh["replies"][name]
        assert e.status == 200, (e.status, e.description)
        return e.answer

    types = answer("qdmanage get-types")
    assert types[PREFIX + "listener"] == [PREFIX + "configurationEntity", PREFIX + "entity"]
    assert types[PREFIX + "router.link"] == [PREFIX + "operationalEntity", PREFIX + "entity"]
    assert "node" in types                                  # this node's own types are listed too
    attrs = answer("qdmanage get-attributes --type listener")
    assert list(attrs) == [PREFIX + "listener"] and {"host", "port", "name", "identity"} <= set(
        attrs[PREFIX + "listener"])
    assert PREFIX + "router.address" in answer("qdmanage get-attributes")
    assert answer("qdmanage get-operations --type vhost") == {
        PREFIX + "vhost": ["CREATE", "READ", "UPDATE", "DELETE"]}
    ops = answer("qdmanage get-operations")
    assert ops[PREFIX + "router.config.linkRoute"] == ["READ"] and ops[PREFIX + "router"] == ["READ"]
    assert answer("qdmanage get-annotations") == {}
    assert answer("qdmanage get-mgmt-nodes") == [f"amqp:/_topo/0/{n}/$management" for n in NAMES]
    (remote,) = entities(mesh["replies"]["qdmanage -r B query --type router"][0])
    assert remote["id"] == remote["name"] == remote["identity"] == "B"
    listeners = entities(mesh["replies"]["qdmanage query --type listener"][0])
    assert all(isinstance(r["port"], str) and r["name"] == r["identity"] for r in listeners), listeners
    assert {r["role"] for r in listeners} == {"normal", "inter-router"}


def test_one_node_without_policy(node_factory):
    """The one-node commands against a standalone node without a policy: standalone, no vhost."""
    n = node_factory("A")
    replies = {_name(c): replay(n.url, c) for c in ONE_NODE}
    for exchanges in replies.values():
        check_answers(exchanges)
    (r,) = entities(queries(replies["qdstat -g"], "router")[-1])
    assert (r["mode"], r["nodeCount"], r["id"]) == ("standalone", 0, "A")
    assert entities(queries(replies["qdstat --vhosts"], "vhost")[-1]) == []
    (p,) = entities(queries(replies["qdstat --policy"], "policy")[-1])
    assert p["enableVhostPolicy"] is False
    (me,) = entities(queries(replies["qdstat -n"], "router.node")[-1])
    assert me["nextHop"] == "(self)" and me["linkState"] == []
    assert replies["qdmanage get-mgmt-nodes"][0].answer == ["amqp:/_topo/0/A/$management"]
    assert n.alive()
