"""The `$management` agent on real nodes: known traffic, then every entity and counter checked.

Management requests are deliveries too (to `$management` and back to the requester's reply address),
so node-wide totals are compared as differences between two readings, with the requests made between
them counted in; per-address and per-link counters of the test's own addresses are exact.
"""

from __future__ import annotations

import time

import pytest

from tests.support.clients import Client, make_message
from tests.support.management import Requester
from tests.support.meshes import build, wait_address
from tests.support.waiting import pump_for

ADDR = "balanced/mgmt/q"


def _settle_mix(received, plan):
    """Settle received messages by `plan`: a list of 'accept' / 'reject' / 'release' / 'modify'."""
    for r, how in zip(received, plan, strict=True):
        getattr(r, how)()


def test_known_traffic_single_node(node_factory):
    n = node_factory("A")
    c = Client(n.url)
    m = Requester(c)
    before = m.node()

    rcv = c.receiver(ADDR, credit=100, auto_accept=False)
    snd = c.sender(ADDR)
    snd.wait_credit(1)
    trackers = [snd.send(f"m{i}") for i in range(20)]
    rcv.wait_messages(20)
    plan = ["accept"] * 10 + ["reject"] * 3 + ["release"] * 4 + ["modify"] * 3
    _settle_mix(rcv.received, plan)
    for t in trackers:
        t.wait()
    # pre-settled: 5 to a consumer, 2 dropped (no consumer); one unsettled with no route
    pre = c.receiver("balanced/mgmt/pre", credit=10)
    ps = c.sender("balanced/mgmt/pre")
    ps.wait_credit(1)
    for i in range(5):
        ps.send(f"p{i}", settled=True)
    pre.wait_messages(5)
    anon = c.sender(None)
    anon.wait_credit(1)
    for i in range(2):
        anon.send(f"d{i}", settled=True, address="balanced/mgmt/nobody")
    assert anon.send("u", address="balanced/mgmt/nobody").wait().outcome == "RELEASED"
    pump_for(0.1)

    after = m.node()
    # Requests and answers between the two readings: the agent reads the node before the node has
    # seen its accept of the request being answered, and before that answer is sent. So the second
    # reading counts the first answer and the second request (and the first request's accept).
    requests = m.sent - 1
    assert after["id"] == "A"
    assert after["acceptedDeliveries"] - before["acceptedDeliveries"] == 10 + 2 * requests
    assert after["rejectedDeliveries"] - before["rejectedDeliveries"] == 3
    assert after["releasedDeliveries"] - before["releasedDeliveries"] == 4 + 1
    assert after["modifiedDeliveries"] - before["modifiedDeliveries"] == 3
    assert after["presettledDeliveries"] - before["presettledDeliveries"] == 5 + 2
    assert after["droppedPresettledDeliveries"] - before["droppedPresettledDeliveries"] == 2
    assert after["unroutableDeliveries"] - before["unroutableDeliveries"] == 1
    # ingress: 20 + 5 test messages + requests to the agent + the agent's answers (the answer to the
    # last reading is counted after it was read); egress the same: everything here is local
    assert after["deliveriesIngress"] - before["deliveriesIngress"] == 25 + 2 * requests
    assert after["deliveriesEgress"] - before["deliveriesEgress"] == 25 + 2 * requests
    assert after["deliveriesTransit"] == 0
    assert after["deliveriesStuck"] == 0 and after["deliveriesDelayed1Sec"] == 0

    addresses = m.by_id("address")
    q = addresses[ADDR]
    assert (q["distribution"], q["subscriberCount"], q["producerCount"], q["remoteCount"]) == \
        ("balanced", 1, 1, 0)
    assert (q["deliveriesIngress"], q["deliveriesEgress"], q["deliveriesTransit"], q["ready"]) == \
        (20, 20, 0, True)
    assert addresses["balanced/mgmt/pre"]["deliveriesIngress"] == 5
    assert "_topo/0/A/$management" in addresses

    links = {(row["owningAddr"], row["linkDir"]): row for row in m.query("link")}
    out, inn = links[(ADDR, "out")], links[(ADDR, "in")]
    for row in (out, inn):
        assert row["linkType"] == "endpoint"
        assert (row["deliveryCount"], row["acceptedCount"], row["rejectedCount"], row["releasedCount"],
                row["modifiedCount"], row["unsettledCount"]) == (20, 10, 3, 4, 3, 0), row
    assert inn["capacity"] == 250 and out["capacity"] is None
    assert out["creditAvailable"] == 80
    assert links[("balanced/mgmt/pre", "in")]["presettledCount"] == 5
    assert links[("balanced/mgmt/pre", "out")]["presettledCount"] == 5
    conn_ids = {row["connectionId"] for row in (out, inn)}
    conns = m.by_id("connection")
    assert conn_ids <= set(conns)
    (ours,) = [conns[i] for i in conn_ids]
    assert (ours["role"], ours["dir"], ours["container"], ours["security"]) == \
        ("normal", "in", c.conn.container, "no-security")
    assert ours["linkCount"] == 7         # 2 of the requester, 2 test, 2 pre-settled, 1 anonymous
    assert any(row["role"] == "internal" for row in conns.values())
    assert m.query("router-node") == [] and m.query("broker") == []
    (listener,) = m.query("listener")
    assert listener["identity"] == f"127.0.0.1:{n.port}" and listener["role"] == "normal"


def test_held_deliveries_show_as_unsettled_stuck_and_delayed(node_factory):
    n = node_factory("A")
    c = Client(n.url)
    m = Requester(c)
    rcv = c.receiver("balanced/mgmt/slow", credit=10, auto_accept=False)
    snd = c.sender("balanced/mgmt/slow")
    snd.wait_credit(1)
    t1, t2 = snd.send("a"), snd.send("b")
    rcv.wait_messages(2)
    pump_for(1.3)
    rcv.received[0].accept()
    t1.wait()
    node = m.node()
    assert node["deliveriesDelayed1Sec"] == 1 and node["deliveriesDelayed10Sec"] == 0
    assert node["unsettledDeliveries"] >= 1 and node["deliveriesStuck"] == 0
    link = {(r["owningAddr"], r["linkDir"]): r for r in m.query("link")}[("balanced/mgmt/slow", "out")]
    assert link["unsettledCount"] == 1
    deadline = time.monotonic() + 12
    while m.node()["deliveriesStuck"] == 0 and time.monotonic() < deadline:
        pump_for(0.5)
    assert m.node()["deliveriesStuck"] == 1, "the held delivery is not counted stuck after 10 s"
    rcv.received[1].accept()
    t2.wait()
    assert m.node()["deliveriesStuck"] == 0


def test_zero_credit_seconds_of_a_producer_without_consumer(node_factory):
    n = node_factory("A")
    c = Client(n.url)
    m = Requester(c)
    c.sender("balanced/mgmt/nobody-home")
    pump_for(2.6)
    link = {(r["owningAddr"], r["linkDir"]): r for r in m.query("link")}[("balanced/mgmt/nobody-home", "in")]
    assert link["creditAvailable"] == 0
    assert 1 <= link["zeroCreditSeconds"] <= 3


def test_bad_requests_answered_and_agent_keeps_working(node_factory):
    n = node_factory("A")
    c = Client(n.url)
    m = Requester(c)
    assert m.request({"operation": "FROB", "type": "link"})[0] == 400
    assert m.request({"operation": "QUERY", "type": "nope"})[0] == 404
    status, desc, _ = m.request({"operation": "QUERY", "type": "link"}, {"attributeNames": ["bogus"]})
    assert (status, desc) == (400, "unknown attribute(s) of link: bogus")
    assert m.request({"operation": "READ", "type": "connection"})[0] == 400
    assert m.request({"operation": "READ", "type": "connection", "identity": "999"})[0] == 404
    assert m.request(None)[0] == 400
    assert m.request({"operation": "QUERY", "type": "link"}, body=[1, 2])[0] == 400
    # not an AMQP message at all: rejected, nothing answered, the agent goes on
    assert m.request(None, raw=b"\x00\x53\x77\xa1\x03abc" + b"\xff" * 7)[0] == "REJECTED"
    # no reply_to: accepted and dropped
    t = m.anon.send({"x": 1}, address="$management", properties={"operation": "QUERY", "type": "node"})
    assert t.wait().outcome == "ACCEPTED"
    assert m.node()["id"] == "A"
    assert m.request({"operation": "GET-TYPES"})[0] == 200
    conn = m.query("connection")[0]["identity"]
    status, _, body = m.request({"operation": "READ", "type": "connection", "identity": conn})
    assert status == 200 and body["identity"] == conn
    assert n.alive()


def test_binary_map_keys_are_answered_and_malformed_encodings_rejected(node_factory):
    """Issue 20: a request whose body map has binary keys is valid AMQP and gets its answer (Proton
    decoded those keys as unhashable memoryviews and the agent rejected the request). A request the
    agent cannot decode is still REJECTED: here bytes after the body, which Proton silently ignored (the
    node rejects those itself now)."""
    n = node_factory("A")
    c = Client(n.url)
    m = Requester(c)
    status, _, body = m.request({"operation": "QUERY", "type": "node"},
                                {"attributeNames": ["id"], b"binary-key": {b"nested": b"value"}})
    assert (status, body["attributeNames"], body["results"]) == (200, ["id"], [["A"]])
    request = make_message({"attributeNames": ["id"]}, address="$management", reply_to=m.reply_to,
                           correlation_id="trailing", properties={"operation": "QUERY", "type": "node"})
    # bytes after the last section: REJECTED amqp:decode-error by the node itself, before the agent
    # (issue 17: a client's message must end with a section in AMQP order)
    assert m.request(None, raw=bytes(request.encode()) + b"\xff\xff")[0] == "REJECTED"
    assert not any(r.message is not None and r.message.correlation_id == "trailing"
                   for r in m.replies.received)
    assert m.node()["id"] == "A"


@pytest.fixture
def chain(node_factory):
    """A - B - C, C dials B, B dials A."""
    return build(node_factory, ["A", "B", "C"], [("B", "A", 1), ("C", "B", 2)])


def test_mesh_counters_and_router_nodes_read_through_one_connection(chain):
    a, c_node = chain["A"], chain["C"]
    consumer = Client(c_node.url)
    rcv = consumer.receiver("balanced/mgmt/far", credit=50)
    wait_address(chain.values(), "balanced/mgmt/far", ["C"])
    producer = Client(a.url)
    m = Requester(producer)
    before = {name: m.node(name) for name in "ABC"}
    snd = producer.sender("balanced/mgmt/far")
    snd.wait_credit(1)
    trackers = [snd.send(f"x{i}") for i in range(30)]
    rcv.wait_messages(30)
    for t in trackers:
        assert t.wait().outcome == "ACCEPTED"

    addr = {name: m.by_id("address", name).get("balanced/mgmt/far") for name in "ABC"}
    assert (addr["A"]["deliveriesIngress"], addr["A"]["deliveriesEgress"], addr["A"]["deliveriesTransit"]) \
        == (30, 0, 0)
    assert addr["A"]["remoteHostRouters"] == ["C"] and addr["A"]["subscriberCount"] == 0
    assert addr["B"]["deliveriesTransit"] == 30 and addr["B"]["deliveriesIngress"] == 0
    assert (addr["C"]["deliveriesEgress"], addr["C"]["subscriberCount"]) == (30, 1)
    after = {name: m.node(name) for name in "ABC"}
    assert after["B"]["deliveriesTransit"] - before["B"]["deliveriesTransit"] >= 30
    assert after["C"]["acceptedDeliveries"] - before["C"]["acceptedDeliveries"] >= 0
    assert after["A"]["acceptedDeliveries"] - before["A"]["acceptedDeliveries"] >= 30
    for name in "ABC":
        assert after[name]["id"] == name and after[name]["nodeCount"] == 2

    nodes_b = m.by_id("router-node", "B")
    assert set(nodes_b) == {"A", "C"}
    assert nodes_b["A"]["neighbour"] and nodes_b["C"]["neighbour"]
    assert (nodes_b["A"]["cost"], nodes_b["C"]["cost"]) == (1, 2)
    nodes_a = m.by_id("router-node", "A")
    assert (nodes_a["C"]["nextHop"], nodes_a["C"]["cost"], nodes_a["C"]["neighbour"]) == ("B", 3, False)
    assert nodes_a["B"]["nextHop"] is None and nodes_a["B"]["reachable"]
    assert sorted(nodes_a["C"]["linkState"]) == ["B:2"]
    assert sorted(nodes_a["B"]["linkState"]) == ["A:1", "C:2"]
    data_links = [r for r in m.query("link", "B") if r["linkType"] == "inter-router"]
    by_peer = {(r["peerNode"], r["linkDir"]): r for r in data_links}
    assert by_peer[("A", "in")]["deliveryCount"] >= 30
    assert by_peer[("C", "out")]["deliveryCount"] >= 30
    assert by_peer[("C", "out")]["acceptedCount"] >= 30
    conns_b = [r for r in m.query("connection", "B") if r["role"] == "inter-router"]
    assert sorted((r["peerNode"], r["dir"]) for r in conns_b) == [("A", "out"), ("C", "in")]
    # an unknown node: the request cannot be routed and comes back RELEASED
    t = m.anon.send({}, address="_topo/0/Z/$management", reply_to=m.reply_to,
                    properties={"operation": "QUERY", "type": "node"})
    assert t.wait().outcome == "RELEASED"


def test_zero_credit_seconds_reach_every_link_of_a_sample_taken_in_slices(node_factory):
    """The agent's 1 s sample visits `SAMPLE_SLICE` (2,000) links per loop turn: with 2,500 receivers that
    never grant credit, the last one attached is still sampled."""
    import socket

    from router.management.agent import SAMPLE_SLICE
    from tests.support.storm import ATTACH, handshake, performatives

    n = node_factory("A")
    per, socks = 500, []                # under the listener's max_links per connection
    count = SAMPLE_SLICE + per
    for c in range(count // per):
        sock = socket.create_connection((n.host, n.port))
        sock.sendall(handshake(f"zc{c}", [f"balanced/zc/{c}/{i}" for i in range(per)]))
        sock.settimeout(1.0)
        socks.append(sock)
    attached, deadline = 0, time.monotonic() + 30
    for sock in socks:
        buf, mine, header = bytearray(), 0, False
        while mine < per and time.monotonic() < deadline:
            try:
                buf += sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not header and len(buf) >= 8:
                del buf[:8]                     # the protocol header
                header = True
            if header:
                mine += performatives(buf).count(ATTACH)
        attached += mine
    assert attached == count
    pump_for(2.6)
    m = Requester(Client(n.url))
    links = {r["owningAddr"]: r for r in m.query("link")
             if (r["owningAddr"] or "").startswith("balanced/zc/")}
    assert len(links) == count
    assert all(r["zeroCreditSeconds"] >= 1 for r in links.values())
    for sock in socks:
        sock.close()
