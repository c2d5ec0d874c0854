"""``meshrouter mesh up|status|down|run`` with real node processes.

Every test works on a copy of a shipped topology rewritten to free ports, in a run directory under
tmp_path; the ``meshctl`` fixture (tests/conftest.py) runs ``mesh down`` for every mesh it touched, even
when the test fails.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess

import yaml

from tests.support.meshctl import CLI_TIMEOUT, mesh_args, pid_running, up
from tests.support.nodes import REPO_ROOT


def test_triangle_up_status_down(meshctl):
    m = meshctl("triangle")
    topo = yaml.safe_load(m.topology.read_text())
    urls, total, _ = up(m)
    assert urls == {n: f"amqp://127.0.0.1:{spec['client_port']}" for n, spec in topo["nodes"].items()}

    pids = m.pids()
    assert set(pids) == {"A", "B", "C"} and all(pid_running(p) for p in pids.values())
    status = m.status()
    assert status["running"] == 3 and status["converged"] is True
    for node_id, node in status["nodes"].items():
        assert node["alive"] is True and node["pid"] == pids[node_id]
        assert node["url"] == urls[node_id]
        assert node["reachable"] == sorted({"A", "B", "C"} - {node_id})
        assert node["neighbors"] == node["reachable"]              # a triangle: everyone is a neighbour
        assert node["addresses"] == 0
    table = m.cli("status", check=0).stdout
    assert "3/3 nodes running, converged" in table and re.search(r"^A\s+\d+\s+yes\s+amqp://", table, re.M)

    down = m.cli("down", check=0)
    assert "mesh triangle: down" in down.stdout
    assert not any(pid_running(p) for p in pids.values())
    assert m.pids() == {}
    assert "not running" in m.cli("down", check=0).stdout         # idempotent
    after = json.loads(m.cli("status", "--json", check=1).stdout)
    assert after["running"] == 0 and not any(n["alive"] for n in after["nodes"].values())


def test_four_node_mesh_converges_and_reports_its_time(meshctl, record_property, capsys):
    m = meshctl("four-node", fast=False)             # the shipped timers: only the ports are rewritten
    urls, total, after_ready = up(m)
    assert sorted(urls) == ["A", "B", "C", "D"]
    status = m.status()
    assert status["converged"] is True and status["running"] == 4
    assert all(len(n["neighbors"]) == 3 for n in status["nodes"].values())
    record_property("convergence_s", total)
    with capsys.disabled():
        print(f"\nfour-node mesh: converged {total:.2f} s after start, {after_ready:.2f} s after the last "
              f"node was ready (target: <= 0.5 s)")


def test_second_up_of_a_running_mesh_exits_2(meshctl):
    m = meshctl("chain")
    up(m)
    pids = m.pids()
    again = m.cli("up", check=2)
    assert "already running" in again.stderr and "mesh down" in again.stderr
    assert m.pids() == pids and all(pid_running(p) for p in pids.values())


def test_bad_topology_exits_2_naming_file_and_key(meshctl, tmp_path):
    m = meshctl("triangle")
    bad = tmp_path / "bad.yaml"
    data = yaml.safe_load(m.topology.read_text())
    data["edges"].append({"from": "C", "to": "Z"})
    bad.write_text(yaml.safe_dump(data))
    for command in ("up", "status", "down", "run"):
        proc = m.cli(command, topology=bad, check=2)
        assert proc.stderr.strip() == (f"meshrouter: error: {bad}: edges[3].to: unknown node 'Z' "
                                       f"(nodes: A, B, C)")
    assert not m.run_dir.exists()                                  # nothing was started or written


def test_up_that_times_out_reports_and_stops_the_nodes(meshctl):
    m = meshctl("triangle")
    proc = m.cli("up", "--timeout", "0.05", check=1)
    assert "did not converge within 0.05 s" in proc.stderr
    assert re.search(r"^  [ABC]: not ready|^  [ABC] misses", proc.stderr, re.M), proc.stderr
    assert m.pids() == {}


def test_up_refuses_a_taken_port(meshctl):
    m = meshctl("chain")
    port = yaml.safe_load(m.topology.read_text())["nodes"]["B"]["client_port"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        proc = m.cli("up", check=1)
    assert f"port {port} (nodes.B.client_port)" in proc.stderr
    assert m.pids() == {}


def test_run_keeps_the_mesh_until_ctrl_c_then_stops_it(meshctl):
    m = meshctl("chain")
    m.touched.append((m.topology, m.run_dir))
    proc = subprocess.Popen(mesh_args("run", m.topology, m.run_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("mesh running"):
                break
        assert lines and lines[-1].startswith("mesh running"), "".join(lines) + proc.stderr.read()
        pids = m.pids()
        assert len(pids) == 3 and m.status()["converged"] is True
        proc.send_signal(signal.SIGINT)                               # Ctrl-C
        out, _ = proc.communicate(timeout=CLI_TIMEOUT)
        assert proc.returncode == 0
        assert "mesh chain: down" in out
        assert not any(pid_running(p) for p in pids.values()) and m.pids() == {}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_run_with_demo_makes_rpc_calls_through_the_four_node_mesh(meshctl):
    """What `make run` does: caller on C, echo server on A, replies back through the mesh."""
    m = meshctl("four-node")
    m.touched.append((m.topology, m.run_dir))
    proc = subprocess.Popen(mesh_args("run", m.topology, m.run_dir) + ["--demo", "A:C"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                            start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(("mesh running", "RPC demo FAILED")):
                break
        text = "".join(lines)
        assert lines and lines[-1].startswith("mesh running"), text + proc.stderr.read()
        calls = [ln for ln in lines if ln.strip().startswith("call ")]
        assert len(calls) == 5 and all("from A" in ln for ln in calls), text
        assert "'hello 4' from A" in text
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
        assert proc.returncode == 0 and "mesh four-node: down" in out, out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_run_demo_with_unknown_node_exits_2(meshctl):
    m = meshctl("chain")
    proc = m.cli("run", "--demo", "A:Z", check=2)
    assert "--demo" in proc.stderr and m.pids() == {}
