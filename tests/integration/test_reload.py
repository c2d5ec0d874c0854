"""Reload (issue 20, point 2): `meshrouter reload CONFIG` and SIGHUP apply a changed config file to a
running node without a restart and without dropping the other connections; an invalid file changes
nothing and says why."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import yaml

from tests.support.authz import AuthClient
from tests.support.clients import Client
from tests.support.meshes import mesh_node, wait_converged
from tests.support.nodes import REPO_ROOT
from tests.support.ports import free_port, inter_router_port
from tests.support.state import mesh_view, reading
from tests.support.waiting import assert_stays, wait_for


def _reload(node, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "router", "reload", str(node.config_path), "-b", node.url,
                           *extra], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


def _edit(node, change) -> None:
    cfg = yaml.safe_load(node.config_path.read_text())
    change(cfg)
    node.config_path.write_text(yaml.safe_dump(cfg))


def _last_reload(node) -> dict:
    with reading(node) as m:
        (row,) = m.query_dicts("node", ["reloads", "lastReload"])
    return row


def _round_trip(client: Client, address: str, body: str) -> None:
    rx = client.receiver(address, credit=5)
    tx = client.sender(address)
    tx.wait_credit()
    t = tx.send(body)
    wait_for(lambda: t.settled and rx.bodies == [body], what=f"{body!r} through {address}")
    rx.close()
    tx.close()


def test_a_listener_added_and_removed_at_run_time(node_factory):
    n = node_factory("A")
    steady = Client(n.url)
    _round_trip(steady, "balanced/before", "before")

    port = free_port()
    _edit(n, lambda c: c["listeners"].append({"host": "127.0.0.1", "port": port, "role": "normal"}))
    r = _reload(n)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"applied: listener 127.0.0.1:{port} (normal) opened"
    extra_url = f"amqp://127.0.0.1:{port}"

    # a consumer on the new listener holds two deliveries from a producer on the old one
    consumer = Client(extra_url).receiver("balanced/held", credit=10, auto_accept=False)
    tx = steady.sender("balanced/held")
    tx.wait_credit()
    trackers = [tx.send(f"held {i}") for i in range(2)]
    wait_for(lambda: len(consumer.received) == 2, what="the deliveries at the consumer")

    _edit(n, lambda c: c["listeners"].pop())
    r = _reload(n)
    assert r.returncode == 0, r.stderr
    assert f"applied: listener 127.0.0.1:{port} (normal) closed, with its 1 connection(s)" in r.stdout
    # its connection was closed: what it held comes back to the producer, not lost
    wait_for(lambda: all(t.settled for t in trackers), what="the held deliveries settled back")
    assert {t.outcome for t in trackers} <= {"MODIFIED", "RELEASED"}, [t.outcome for t in trackers]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        pass
    else:
        raise AssertionError(f"{extra_url} still accepts connections")
    # the other connection never noticed
    _round_trip(steady, "balanced/after", "after")
    row = _last_reload(n)
    assert row["reloads"] == 2 and row["lastReload"]["ok"] is True
    assert n.alive()


def test_an_invalid_file_leaves_the_node_untouched(node_factory):
    n = node_factory("A")
    steady = Client(n.url)
    good = n.config_path.read_text()
    _edit(n, lambda c: c["listeners"].append({"host": "127.0.0.1", "port": 70000}))
    r = _reload(n)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"meshrouter: error: {n.config_path}: listeners[1].port: out of range: must "
                                f"be between 0 and 65535, got 70000; the node was not asked to reload")
    # SIGHUP with the bad file: the node says why and goes on as it was
    n.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: _last_reload(n)["reloads"] == 1, what="the node's reload")
    last = _last_reload(n)["lastReload"]
    assert last["ok"] is False and last["changes"] == []
    assert last["errors"] == [f"{n.config_path}: listeners[1].port: out of range: must be between 0 and "
                              "65535, got 70000"]
    assert "keeps running with its current config" in n.stderr_path.read_text()
    _round_trip(steady, "balanced/still", "still")
    n.config_path.write_text(good)
    r = _reload(n)
    assert r.returncode == 0 and r.stdout.strip() == "nothing changed", r.stdout + r.stderr
    assert n.alive()


def test_rules_policy_and_restart_keys(node_factory):
    n = node_factory("A")
    c = Client(n.url)

    def change(cfg):
        cfg["addresses"]["rules"].append({"prefix": "fanout", "distribution": "multicast"})
        cfg["node"]["link_capacity"] = 100          # needs a restart
        cfg["node"]["log_level"] = "debug"

    _edit(n, change)
    r = _reload(n)
    assert r.returncode == 0, r.stderr
    assert "applied: address rules: 4 rules, default balanced (for addresses not in use now)" in r.stdout
    assert "applied: log level debug" in r.stdout
    assert "needs a restart (not applied): link_capacity" in r.stdout
    # the new rule is in force: two consumers of a new `fanout/...` address both get the message
    a, b = c.receiver("fanout/x", credit=5), c.receiver("fanout/x", credit=5)
    tx = c.sender("fanout/x")
    tx.wait_credit()
    t = tx.send("both")
    wait_for(lambda: t.settled and a.bodies == ["both"] and b.bodies == ["both"], what="multicast copies")

    # a policy that refuses anonymous clients: the open connection keeps working, new ones are refused
    _edit(n, lambda cfg: cfg.update(policy={"default_group": "deny", "groups": {
        "ops": {"users": ["admin"], "management": "write"}}}))
    r = _reload(n, "--timeout", "3")
    # management is refused to anonymous now, so the command cannot read the outcome: the log has it
    assert r.returncode in (0, 1), r.stderr
    wait_for(lambda: "reload: policy: replaced" in n.stderr_path.read_text(), what="the policy reload")
    _round_trip(c, "balanced/open-before", "kept")
    cond = AuthClient(n.url, wait_open=False).wait_closed()
    assert cond.name == "amqp:unauthorized-access" and "no group" in cond.description, cond
    assert n.alive()


def test_a_connector_added_and_removed_at_run_time(node_factory):
    a = mesh_node(node_factory, "A", listen=True)
    b = mesh_node(node_factory, "B")
    assert mesh_view(b).neighbors == []
    port = inter_router_port(a)
    _edit(b, lambda c: c["connectors"].append({"host": "127.0.0.1", "port": port, "cost": 1}))
    r = _reload(b)
    assert r.returncode == 0 and r.stdout.strip() == f"applied: connector to 127.0.0.1:{port} added", r.stdout
    wait_converged([a, b])
    _edit(b, lambda c: c["connectors"].clear())
    r = _reload(b)
    assert r.returncode == 0 and r.stdout.strip() == f"applied: connector to 127.0.0.1:{port} removed"
    wait_for(lambda: mesh_view(a).neighbors == [] and mesh_view(b).neighbors == [],
             what="A and B apart again (and B not dialling A any more)")
    assert_stays(lambda: mesh_view(a).neighbors == [], 1.0, "B not coming back")
    assert a.alive() and b.alive()
