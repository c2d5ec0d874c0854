"""qdmanage 1.19's writes (issue 32, point 2): the recorded create, read, update and delete of a listener, a
connector, an address and a vhost, replayed, each put in force at once; then what is odd or hostile, and
writes without write access. The requests are the tools' own (tests/support/qdr_tools.py), with the
recording's listener and peer ports replaced by free ones.
"""

from __future__ import annotations

import base64
import socket
from typing import Any

from proton import Message

from tests.support.authz import AuthClient, refused
from tests.support.clients import Client
from tests.support.meshes import mesh_node
from tests.support.ports import free_port, inter_router_port
from tests.support.qdr_tools import PREFIX, ToolSession, command, entities, recording
from tests.support.state import mesh_view
from tests.support.waiting import wait_for

WRITERS = {"default_group": "deny", "groups": {"ops": {"users": ["anonymous"], "remote_hosts": ["localhost"],
                                                       "management": "write"}}}
DISPATCH = {"name": "self", "type": "org.amqp.management"}


def _qdmanage(*args: str) -> dict[str, Any]:
    return command(*args, tool="qdmanage")


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_recorded_writes_are_put_in_force(node_factory):
    a = mesh_node(node_factory, "A", sections={"policy": WRITERS})
    b = mesh_node(node_factory, "B", listen=True)
    rec = recording()
    port, peer = free_port(), inter_router_port(b)
    sub = {str(rec["free_port"]): str(port), str(rec["peer_port"]): str(peer)}
    tool = ToolSession(a.url)

    def run(*args: str) -> Any:
        (request,) = _qdmanage(*args)["requests"]
        return tool.send(request, sub)

    # listener: created (named l1, port as a string), serving, updated, deleted
    made = run("create", "--type", "listener", "--name", "l1", "host=127.0.0.1", f"port={rec['free_port']}")
    assert (made.status, made.answer["name"], made.answer["identity"], made.answer["port"]) == \
        (201, "l1", "l1", str(port)), made
    assert made.properties == {"operation": "CREATE", "type": PREFIX + "listener", "name": "l1"}
    assert made.body == {"host": "127.0.0.1", "port": str(port)}        # qdrouterd's schema: a string
    Client(f"amqp://127.0.0.1:{port}")
    read = run("read", "--type", "listener", "--name", "l1")
    assert read.status == 200 and read.answer == made.answer
    updated = run("update", "--type", "listener", "--name", "l1", "maxFrameSize=65536")
    assert updated.status == 200 and updated.answer["maxFrameSize"] == 65536
    assert updated.body == {"maxFrameSize": 65536}
    c = Client(f"amqp://127.0.0.1:{port}")
    assert c.transport.remote_max_frame_size == 65536
    gone = run("delete", "--type", "listener", "--name", "l1")
    assert (gone.status, gone.answer) == (204, None)
    assert _refused(port)

    # connector: A dials B; the mesh forms; deleted, it is gone
    conn = run("create", "--type", "connector", "host=127.0.0.1", f"port={rec['peer_port']}",
               "role=inter-router")
    name = f"connector/127.0.0.1:{peer}"
    assert (conn.status, conn.answer["name"], conn.answer["role"]) == (201, name, "inter-router"), conn
    wait_for(lambda: "B" in mesh_view(a).reachable, what="A reaching B through the new connector")
    status = run("read", "--type", "connector", "--name", f"connector/127.0.0.1:{rec['peer_port']}")
    assert (status.status, status.answer["connectionStatus"]) == (200, "SUCCESS")
    dropped = run("delete", "--type", "connector", "--name", f"connector/127.0.0.1:{rec['peer_port']}")
    assert dropped.status == 204
    wait_for(lambda: "B" not in mesh_view(a).reachable, what="B gone with the connector")

    # address: multicast in force for the prefix, then closest, then no rule
    made = run("create", "--type", "address", "prefix=fan", "distribution=multicast")
    assert made.properties["type"] == PREFIX + "router.config.address"
    assert (made.status, made.answer["name"], made.answer["distribution"]) == \
        (201, "address/fan", "multicast")
    x, y = Client(a.url), Client(a.url)
    rx1, rx2 = x.receiver("fan/news", credit=5), y.receiver("fan/news", credit=5)
    tx = Client(a.url).sender("fan/news")
    tx.wait_credit()
    t = tx.send("to both")
    wait_for(lambda: t.settled and rx1.bodies == rx2.bodies == ["to both"], what="a copy for each receiver")
    assert run("read", "--type", "address", "--name", "address/fan").answer["prefix"] == "fan"
    closest = run("update", "--type", "address", "--name", "address/fan", "distribution=closest")
    assert (closest.status, closest.answer["distribution"]) == (200, "closest")
    assert run("delete", "--type", "address", "--name", "address/fan").status == 204

    # vhost: example.com admits anonymous users through $default, then (allowUnknownUser false) not
    vhost = run("create", "--type", "vhost", "--stdin")
    assert vhost.status == 201 and vhost.answer["name"] == "vhost/example.com", vhost
    assert set(vhost.answer["groups"]) == {"$default", "admins"}
    assert vhost.answer["groups"]["admins"]["users"] == "alice, bob"
    guest = AuthClient(a.url, hostname="example.com")
    assert guest.conn.remote_condition is None and guest.remote_open
    assert run("read", "--type", "vhost", "--name", "vhost/example.com").answer == vhost.answer
    closed = run("update", "--type", "vhost", "--name", "vhost/example.com", "allowUnknownUser=false")
    assert closed.status == 200 and closed.answer["allowUnknownUser"] is False
    assert AuthClient(a.url, hostname="example.com", wait_open=False).wait_closed() is not None
    assert guest.conn.remote_condition is None                      # admitted before: it stays
    assert run("delete", "--type", "vhost", "--identity", "vhost/example.com").status == 204
    (row,) = entities(tool.send(_qdmanage("query", "--type", "vhost")["requests"][0]))
    assert row["hostname"] == "$default"
    assert a.alive() and b.alive()


def _request(tool: ToolSession, properties: dict[str, Any], body: Any = None) -> tuple[int, str, Any]:
    """A request of ours, sent as the tools send theirs."""
    message = base64.b64encode(Message(properties=properties, body=body).encode()).decode()
    e = tool.send({"to": "$management", "message": message})
    return e.status, e.description, e.answer


def _listener(**props: Any) -> dict[str, Any]:
    return {"operation": "CREATE", "type": PREFIX + "listener", **props}


HOSTILE = [
    ({"operation": "FROB", "type": PREFIX + "router"}, None, 400, "unknown operation 'FROB'"),
    ({**DISPATCH, "operation": "GET-LOG"}, {}, 501, "stderr"),
    ({**DISPATCH, "operation": "PROFILE", "start": True}, {}, 501, "Python profiler"),
    ({**DISPATCH, "operation": "GET-JSON-SCHEMA", "indent": 10**9}, {}, 200, "OK"),
    ({**DISPATCH, "operation": "GET-ATTRIBUTES", "entityType": PREFIX + "nonsense"}, {}, 404, "nonsense"),
    ({**DISPATCH, "operation": "QUERY", "entityType": PREFIX + "router.link"},
     {"attributeNames": [f"a{i}" for i in range(10_000)]}, 400, "at most 63"),
    ({**DISPATCH, "operation": "QUERY", "entityType": PREFIX + "router.link"},
     {"attributeNames": [1, 2]}, 400, "list of strings"),
    ({**DISPATCH, "operation": "QUERY", "entityType": PREFIX + "router.link"},
     {"attributeNames": "linkType"}, 400, "list of strings"),
    ({**DISPATCH, "operation": "QUERY", "entityType": PREFIX + "router.link"}, ["not", "a", "map"], 400,
     "must be a map"),
    ({**DISPATCH, "operation": "QUERY", "entityType": PREFIX + "connection", "offset": -1}, {}, 400,
     "offset"),
    ({**DISPATCH, "operation": "QUERY", "entityType": PREFIX + "connection", "count": "5"}, {}, 400,
     "count"),
    ({"operation": "READ", "type": PREFIX + "router", "identity": 5}, None, 400, "must be strings"),
    ({"operation": "READ", "type": PREFIX + "listener"}, None, 400, "no name or identity"),
    ({"operation": "READ", "type": PREFIX + "listener", "name": "nope"}, None, 404, "name=nope"),
    ({"operation": "READ", "type": PREFIX + "router", "name": "A", "identity": "B"}, None, 400,
     "conflicting"),
    ({"operation": "CREATE", "type": PREFIX + "router.config.linkRoute", "name": "lr"},
     {"prefix": "q", "direction": "in"}, 501, "link routes have no equivalent here"),
    ({"operation": "CREATE", "type": PREFIX + "router.config.autoLink"}, {}, 501, "brokers:"),
    ({"operation": "CREATE", "type": PREFIX + "sslProfile", "name": "tls"}, {}, 501, "listeners[].tls"),
    ({"operation": "CREATE", "type": PREFIX + "router"}, {}, 501, "not implemented"),
    ({"operation": "UPDATE", "type": PREFIX + "router.link", "identity": "x"}, {}, 501, "not implemented"),
    (_listener(), {"host": "127.0.0.1", "port": "0", "identity": "7"}, 400, "'identity'"),
    (_listener(name="a"), {"host": "127.0.0.1", "port": "0", "name": "b"}, 400,
     "conflicting values for 'name'"),
    (_listener(), {"type": PREFIX + "connector", "host": "127.0.0.1", "port": "0"}, 400, "'type'"),
    (_listener(), {"host": "127.0.0.1", "port": "no-such-service"}, 400, "neither a port number"),
    (_listener(), {"host": "127.0.0.1", "port": "70000"}, 400, "listeners[1].port: out of range"),
    (_listener(), {"host": "127.0.0.1", "port": "0", "role": "edge"}, 400, "role: 'edge' has no equivalent"),
    (_listener(), {"host": "127.0.0.1", "port": "0", "sslProfile": "p"}, 400, "listeners[].tls"),
    (_listener(), {"host": "127.0.0.1", "port": "0", "bogus": 1}, 400, "unknown attribute 'bogus'"),
    (_listener(), {"host": "127.0.0.1", "port": "0", "authenticatePeer": True, "saslMechanisms": "ANONYMOUS"},
     400, "authenticatePeer"),
    (_listener(), ["host", "port"], 400, "a map of attribute names"),
    ({"operation": "CREATE", "type": PREFIX + "connector"}, {"host": "127.0.0.1", "port": "1"}, 400,
     "role=inter-router"),
    ({"operation": "CREATE", "type": PREFIX + "router.config.address"}, {"pattern": "a.*.b"}, 400,
     "'a.*.b' has no equivalent"),
    ({"operation": "CREATE", "type": PREFIX + "router.config.address"},
     {"prefix": "u", "distribution": "unavailable"}, 400, "'unavailable' has no equivalent"),
    ({"operation": "CREATE", "type": PREFIX + "router.config.address"}, {"prefix": "w", "waypoint": True},
     400, "waypoints"),
    ({"operation": "CREATE", "type": PREFIX + "vhost"},
     {"hostname": "h.example", "groups": {"g": {"maxFrameSize": 1000}}}, 400, "listeners[].max_frame_size"),
    ({"operation": "CREATE", "type": PREFIX + "vhost"}, {"hostname": "h.example", "groups": "{not json"}, 400,
     "not a JSON map"),
    ({"operation": "CREATE", "type": PREFIX + "vhost"},
     {"hostname": "h.example", "groups": {"g": {"users": "u", "allowUserIdProxy": False}}}, 400, "user-id"),
    ({"operation": "CREATE", "type": PREFIX + "vhost"}, {"hostname": "h.example", "maxConnections": 10}, 400,
     "vhost-wide"),
    ({"operation": "CREATE", "type": PREFIX + "vhost"}, {"groups": {}}, 400, "needs a 'hostname'"),
    ({"operation": "CREATE", "type": PREFIX + "vhost"}, {"hostname": "$default"}, 409, "exists already"),
    ({"operation": "UPDATE", "type": PREFIX + "listener", "name": "nope"}, {"cost": 2}, 404, "name=nope"),
    ({"operation": "DELETE", "type": PREFIX + "vhost"}, None, 400, "no name or identity"),
    ({"operation": "QUERY", "type": ["forged"]}, None, 400, "needs a 'type'"),
    ({"operation": ["QUERY"], "type": PREFIX + "router"}, None, 400, "unknown operation"),
]


def test_odd_and_hostile_requests_get_clear_errors_and_change_nothing(node_factory):
    n = node_factory("A", extra={"policy": WRITERS})
    steady = Client(n.url)
    rx, tx = steady.receiver("balanced/steady", credit=5), steady.sender("balanced/steady")
    tool = ToolSession(n.url)
    before = {t: entities(tool.send(_qdmanage("query", "--type", t)["requests"][0]))
              for t in ("listener", "vhost")}
    for properties, body, status, words in HOSTILE:
        got, description, answer = _request(tool, properties, body)
        assert (got, words in description) == (status, True), (properties, body, got, description)
        assert answer is None or got == 200, answer
        if properties["operation"] == "GET-JSON-SCHEMA":            # a huge indent is not honoured
            assert "\n" not in answer and '"vhostUserGroupSettings"' in answer
    # qdstat --edge-router X: no edge routers here, said at once rather than a timeout
    cond, description = refused(steady.sender("_edge/X/$management"))
    assert cond == "amqp:unauthorized-access" and "qdstat -r NODE" in description, description
    after = {t: entities(tool.send(_qdmanage("query", "--type", t)["requests"][0])) for t in before}
    assert after == before
    tx.wait_credit()
    t = tx.send("still here")
    wait_for(lambda: t.settled and rx.bodies == ["still here"], what="traffic on the steady connection")
    assert n.alive()


def test_writes_need_write_access_and_redacted_answers_hide_users(node_factory):
    reader = node_factory("A")                       # no policy: local anonymous clients read, no more
    tool = ToolSession(reader.url)
    (create,) = _qdmanage("create", "--type", "listener", "--name", "l1", "host=127.0.0.1",
                          f"port={recording()['free_port']}")["requests"]
    e = tool.send(create)
    assert e.status == 403
    assert e.description.startswith("CREATE needs management write access and this connection has 'read': "
                                     "give its policy group `management: write`"), e.description
    e = tool.send(_qdmanage("delete", "--type", "vhost", "--identity", "vhost/example.com")["requests"][0])
    assert e.status == 403
    shy = {"default_group": "all", "groups": {"all": {"users": ["*", "anonymous"], "management": "redacted"}}}
    redacted = node_factory("B", extra={"policy": shy})
    everything = ToolSession(redacted.url)
    answers = [everything.send(r) for r in command("--all-entities")["requests"]]
    assert all(a.status == 200 for a in answers), [(a.entity_type, a.description) for a in answers]
    (conns,) = [entities(a) for a in answers if a.entity_type == PREFIX + "connection"]
    assert conns and all(c["host"] is None and c["user"] is None for c in conns), conns
    (stats,) = [entities(a) for a in answers if a.entity_type == PREFIX + "vhostStats"]
    assert stats[0]["perUserState"] == {} and stats[0]["connectionsCurrent"] >= 1
    (vhost,) = [entities(a) for a in answers if a.entity_type == PREFIX + "vhost"]
    assert vhost[0]["groups"] == {"$default": {}}                    # names, no users or hosts
    assert reader.alive() and redacted.alive()
