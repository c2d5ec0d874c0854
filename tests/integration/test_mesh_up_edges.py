"""``meshrouter mesh up|status|down`` on topologies/edge.yaml (docs/EDGE.md, "Operations"): two interiors
and four edges on free ports. `mesh up` counts an edge as converged once it routes through its first
(cheapest) uplink (one that opened later takes over after 2 s open); `mesh status` shows each edge's
uplink and each interior's active edges; a message goes from an edge on one interior to an edge on the other;
`mesh down` stops all six nodes.
"""

from __future__ import annotations

import re

import yaml

from tests.support.clients import ACCEPTED, Client, make_message
from tests.support.meshctl import pid_running, up

PREFERRED = {"EA1": "INT.A", "EA2": "INT.A", "EB1": "INT.B", "EB2": "INT.B"}


def test_edge_topology_up_status_traffic_down(meshctl):
    m = meshctl("edge")
    topo = yaml.safe_load(m.topology.read_text())
    assert {topo["nodes"][n]["edge_port"] for n in ("INT.A", "INT.B")}.isdisjoint({5941, 5942})  # rewritten
    urls, _, _ = up(m)
    assert urls == {n: f"amqp://127.0.0.1:{spec['client_port']}" for n, spec in topo["nodes"].items()}
    pids = m.pids()
    assert set(pids) == set(topo["nodes"]) and all(pid_running(p) for p in pids.values())

    status = m.status()                 # mesh up returned once every edge is on its cheapest uplink
    assert status["running"] == 6 and status["converged"] is True, status
    for node_id, want in PREFERRED.items():
        node = status["nodes"][node_id]
        assert node["edge"]["mode"] == "edge" and node["edge"]["uplink"] == want, node
        assert node["neighbors"] == [want] and node["edge"]["uplinks_open"] == 2, node
    for node_id, peer in (("INT.A", "INT.B"), ("INT.B", "INT.A")):
        node = status["nodes"][node_id]
        assert node["reachable"] == [peer] and node["neighbors"] == [peer], node
        assert node["edge"]["active_edges"] == 2 and node["edge"]["edges"] == 4, node  # + 2 standbys
    table = m.cli("status", check=0).stdout
    assert "6/6 nodes running, converged" in table, table
    assert re.search(r"^NODE\s+PID\s+ALIVE\s+URL\s+NEIGHBORS\s+REACHABLE\s+ADDRESSES\s+EDGES$", table, re.M)
    assert re.search(r"^INT\.A\s+\d+\s+yes\s+amqp://\S+\s+INT\.B\s+1/1\s+\d+\s+2$", table, re.M), table
    edge_row = r"^EB2\s+\d+\s+yes\s+amqp://\S+\s+INT\.B\s+via uplink\s+\d+\s+\(edge\)$"
    assert re.search(edge_row, table, re.M), table

    # EA1 -> INT.A -> INT.B -> EB2, the URLs `mesh up` printed
    r = Client(urls["EB2"]).receiver("closest/mesh-up-edges", credit=5)
    s = Client(urls["EA1"]).sender("closest/mesh-up-edges")
    s.wait_credit(1, timeout=10)
    assert s.send(make_message("EA1->EB2")).wait().state == ACCEPTED
    assert [msg.body for msg in r.wait_messages(1)] == ["EA1->EB2"]

    down = m.cli("down", check=0)
    assert "mesh edge: down" in down.stdout, down.stdout
    assert not any(pid_running(p) for p in pids.values())
    assert m.pids() == {}
