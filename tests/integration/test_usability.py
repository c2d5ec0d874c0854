"""What a new user runs into first: error messages that name what went wrong (issue 20, point 6)."""

from __future__ import annotations

import socket
import subprocess
import sys

import yaml

from tests.support.nodes import REPO_ROOT


def _run(tmp_path, config: dict, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "router", *args, str(path)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT)


def test_a_taken_listener_port_is_named(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        r = _run(tmp_path, {"node": {"id": "A"}, "listeners": [{"host": "127.0.0.1", "port": 0},
                                                               {"host": "127.0.0.1", "port": port}]}, "run")
    finally:
        busy.close()
    assert r.returncode == 1
    assert r.stderr.strip() == (f"meshrouter: error: cannot listen: listeners[1] (role normal) on "
                                f"127.0.0.1:{port}: Address already in use")


def test_check_config_refuses_a_duplicated_key(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("node: {id: A}\nlisteners:\n  - {host: 127.0.0.1, port: 5999}\n"
                    "link_capacity: 100\nlisteners:\n  - {host: 127.0.0.1, port: 5998}\n")
    r = subprocess.run([sys.executable, "-m", "router", "check-config", str(path)], capture_output=True,
                       text=True, timeout=30, cwd=REPO_ROOT)
    assert r.returncode == 2, r.stdout
    assert r.stderr.strip() == (f"meshrouter: error: {path}: <file>: invalid YAML at line 5, column 1: "
                                f"duplicate key 'listeners' (first at line 2)")


def test_check_config_refuses_metrics_on_a_listener_port(tmp_path):
    r = _run(tmp_path, {"node": {"id": "A"}, "listeners": [{"host": "127.0.0.1", "port": 5999}],
                        "metrics": {"port": 5999}}, "check-config")
    assert r.returncode == 2
    assert r.stderr.strip().endswith("node.yaml: metrics.port: 5999 is also the port of listeners[0]")
    assert "Traceback" not in r.stderr


def test_a_topology_cannot_escape_its_run_directory(tmp_path):
    for name in ("..", ".hidden"):
        topo = tmp_path / "topo.yaml"
        topo.write_text(yaml.safe_dump({"name": name, "nodes": {"A": {}, "B": {}},
                                        "edges": [{"from": "B", "to": "A"}]}))
        r = subprocess.run([sys.executable, "-m", "router", "mesh", "up", str(topo)], capture_output=True,
                           text=True, timeout=60, cwd=tmp_path)
        assert r.returncode == 2, r.stdout
        assert f"{topo}: name: invalid topology name {name!r}: must not start with '.'" in r.stderr
    assert not (tmp_path / ".mesh").exists()          # nothing was written, in .mesh/.. or elsewhere
    assert {p.name for p in tmp_path.iterdir()} == {"topo.yaml"}
    topo = tmp_path / "dup.yaml"
    topo.write_text("name: t\nnodes: {A: {}}\nnodes: {B: {}}\n")
    r = subprocess.run([sys.executable, "-m", "router", "mesh", "status", str(topo)], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "duplicate key 'nodes' (first at line 2)" in r.stderr


def test_stat_into_a_closed_pipe_ends_quietly(node_factory):
    """`meshrouter stat ... | head`: the reader went away; no BrokenPipeError traceback."""
    n = node_factory("A")
    proc = subprocess.Popen([sys.executable, "-m", "router", "stat", "-b", n.url, "-l"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT)
    proc.stdout.close()                     # as `head` does once it has its lines
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert err.decode() == ""


def test_oslo_addresses_without_rules_are_warned_about_once(node_factory):
    """Without the oslo.messaging rules, the driver's fanout would silently become anycast."""
    from tests.support.clients import Client
    from tests.support.nodes import MESH_RULES
    from tests.support.waiting import wait_for

    bare, ruled = node_factory("A"), node_factory("B", rules=MESH_RULES)
    for n in (bare, ruled):
        c = Client(n.url)
        for topic in ("rpc/multicast/nova/compute", "rpc/anycast/nova/compute", "notify/info"):
            c.receiver(f"openstack.org/om/{topic}", credit=1)          # waits for the node's attach
    warning = "matches no address rule"
    wait_for(lambda: warning in bare.stderr_path.read_text(), what="the warning on the node without rules")
    log = bare.stderr_path.read_text()
    assert log.count(warning) == 1
    assert ("WARNING router.forwarding.table: address openstack.org/om/rpc/multicast/nova/compute "
            "(oslo.messaging's driver) matches no address rule, so it is balanced") in log
    assert warning not in ruled.stderr_path.read_text()
