"""Management writes (issue 20, point 1): `meshrouter manage create|update|delete` of listeners, connectors,
address rules and policy groups, applied without a restart and without disturbing other connections,
and only for a policy group with management write."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from tests.support.authz import AuthClient
from tests.support.clients import Client
from tests.support.meshes import mesh_node, wait_converged
from tests.support.nodes import REPO_ROOT
from tests.support.ports import free_port, inter_router_port
from tests.support.state import mesh_view
from tests.support.waiting import wait_for

#: anonymous clients on this machine may write; nobody else may connect
WRITERS = {"default_group": "deny", "groups": {"ops": {"users": ["anonymous"], "remote_hosts": ["localhost"],
                                                       "management": "write"}}}


def manage(node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "router", "manage", "-b", node.url, *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_listener_create_update_delete(node_factory):
    n = node_factory("A", extra={"policy": WRITERS})
    steady = Client(n.url)
    port = free_port()
    r = manage(n, "create", "--type", "listener", "host=127.0.0.1", f"port={port}", "role=normal")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1] == f"  applied: listener 127.0.0.1:{port} (normal) opened"
    extra = f"amqp://127.0.0.1:{port}"
    first = Client(extra)
    rows = json.loads(manage(n, "query", "--type", "listener", "--json").stdout)
    assert {r["port"] for r in rows} == {n.port, port}

    r = manage(n, "update", "--type", "listener", "--identity", f"127.0.0.1:{port}", "max_connections=1")
    assert r.returncode == 0, r.stderr
    assert f"  applied: listener 127.0.0.1:{port} (normal) closed, with its 1 connection(s)" in r.stdout
    wait_for(lambda: first.transport_closed or first.conn.remote_condition is not None,
             what="the old listener's connection closed")
    one = Client(extra)
    cond = AuthClient(extra, wait_open=False).wait_closed()
    assert cond.name == "amqp:resource-limit-exceeded", cond        # max_connections 1 in force
    assert one.conn.remote_condition is None

    r = manage(n, "delete", "--type", "listener", "--identity", f"127.0.0.1:{port}")
    assert r.returncode == 0 and r.stdout.strip() == f"deleted listener 127.0.0.1:{port}", r.stderr
    assert _refused(port)
    # the connection on the other listener never noticed
    rx, tx = steady.receiver("balanced/w", credit=1), steady.sender("balanced/w")
    tx.wait_credit()
    t = tx.send("still here")
    wait_for(lambda: t.settled and rx.bodies == ["still here"], what="traffic on the steady connection")
    assert n.alive()


def test_invalid_or_unknown_entries_change_nothing(node_factory):
    n = node_factory("A", extra={"policy": WRITERS})
    r = manage(n, "create", "--type", "listener", "host=127.0.0.1", "port=70000")
    assert r.returncode == 1
    assert r.stderr.strip() == ("meshrouter: error: create listener: 400 listeners[1].port: out of range: "
                                "must be between 0 and 65535, got 70000")
    r = manage(n, "delete", "--type", "listener", "--identity", "127.0.0.1:1")
    assert r.returncode == 1 and "404 no listener '127.0.0.1:1'" in r.stderr
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    taken = busy.getsockname()[1]
    r = manage(n, "create", "--type", "listener", "host=127.0.0.1", f"port={taken}")
    busy.close()
    assert r.returncode == 1 and "409 cannot listen: listeners[1] (role normal) on 127.0.0.1:" in r.stderr
    # a user in two groups whose hosts overlap: refused as check-config refuses it
    r = manage(n, "create", "--type", "policy-group", "name=more", "users=[anonymous]", "management=read")
    assert r.returncode == 1 and "400 policy.groups." in r.stderr, r.stderr
    rows = json.loads(manage(n, "query", "--type", "listener", "--json").stdout)
    assert [row["port"] for row in rows] == [n.port]
    groups = json.loads(manage(n, "query", "--type", "policy-group", "--json").stdout)
    assert [g["identity"] for g in groups] == ["ops"]
    assert n.alive()


def test_writes_need_management_write(node_factory):
    n = node_factory("A")                          # no policy: anonymous from localhost reads, no more
    r = manage(n, "create", "--type", "address-rule", "prefix=fanout", "distribution=multicast")
    assert r.returncode == 1
    assert r.stderr.startswith("meshrouter: error: create address-rule: 403 CREATE needs management write "
                               "access and this connection has 'read': give its policy group "
                               "`management: write` in the config of the node it connects to, e.g. "
                               "`policy: {default_group: clients, groups: {clients: {}, operators: "
                               "{users: [anonymous], remote_hosts: [localhost], management: write}}}`"), \
        r.stderr
    assert manage(n, "query", "--type", "address-rule").returncode == 0


def test_address_rules_policy_groups_and_connectors(node_factory):
    a = mesh_node(node_factory, "A", listen=True, sections={"policy": WRITERS})
    b = mesh_node(node_factory, "B", sections={"policy": WRITERS})
    r = manage(a, "create", "--type", "address-rule", "prefix=fanout", "distribution=multicast")
    assert r.returncode == 0, r.stderr
    c = Client(a.url)
    x, y = c.receiver("fanout/q", credit=2), c.receiver("fanout/q", credit=2)
    tx = c.sender("fanout/q")
    tx.wait_credit()
    t = tx.send("to both")
    wait_for(lambda: t.settled and x.bodies == y.bodies == ["to both"], what="both copies")
    assert manage(a, "delete", "--type", "address-rule", "--identity", "fanout").returncode == 0

    r = manage(a, "create", "--type", "policy-group", "name=readers", "users=['*']", "management=read")
    assert r.returncode == 0, r.stderr
    groups = {g["identity"]: g for g in json.loads(manage(a, "query", "--type", "policy-group",
                                                          "--json").stdout)}
    assert groups["readers"]["settings"]["users"] == ["*"] and groups["readers"]["settings"]["management"] \
        == "read"
    assert manage(a, "update", "--type", "policy-group", "--identity", "readers",
                  "management=none").returncode == 0

    port = inter_router_port(a)
    r = manage(b, "create", "--type", "connector", "host=127.0.0.1", f"port={port}")
    assert r.returncode == 0 and f"applied: connector to 127.0.0.1:{port} added" in r.stdout, r.stderr
    wait_converged([a, b])
    r = manage(b, "delete", "--type", "connector", "--identity", f"127.0.0.1:{port}")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: mesh_view(a).neighbors == [], what="A without B")
    assert a.alive() and b.alive()
