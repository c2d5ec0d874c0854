"""Topology files (router/meshctl/topology.py) and the node configs generated from them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from router.config import load_config, parse_config
from router.meshctl import TopologyError, load_topology
from router.meshctl.nodeconfig import STATE_LOGGER, node_config, write_node_configs

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SHIPPED = sorted(TOPOLOGIES.glob("*.yaml"))
OSLO_RULES = {
    "openstack.org/om/rpc/multicast": "multicast",
    "openstack.org/om/rpc/unicast": "closest",
    "openstack.org/om/rpc/anycast": "balanced",
    "openstack.org/om/notify": "balanced",
    "multicast": "multicast",
}


def write(tmp_path: Path, text: str, name: str = "topo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_four_required_topologies_ship():
    assert {p.stem for p in SHIPPED} >= {"four-node", "chain", "triangle", "diamond"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_topology_loads_and_every_generated_config_is_valid(path):
    topology = load_topology(path)
    assert topology.name == path.stem
    for node_id in topology.node_ids:
        config = parse_config(node_config(topology, node_id), f"{path}:{node_id}")
        assert config.node_id == node_id
        roles = {lc.role: lc.port for lc in config.listeners}
        assert roles["normal"] == topology.node(node_id).client_port
        assert [c.port for c in config.connectors] == [
            topology.node(e.target).inter_router_port for e in topology.edges if e.source == node_id]


def test_shipped_port_ranges_are_disjoint_and_avoid_broker_and_demo_ports():
    owner: dict[int, str] = {}
    for path in SHIPPED:
        topology = load_topology(path)
        for n in topology.nodes:
            for port in (n.client_port, n.inter_router_port):
                if port is None:
                    continue
                assert port not in (5672, 5700), f"{path.name}: {n.node_id} uses {port}"
                assert port not in owner, f"{path.name} and {owner.get(port)} both use {port}"
                owner[port] = path.name


def test_four_node_mesh_matches_the_issue():
    topology = load_topology(TOPOLOGIES / "four-node.yaml")
    assert topology.node_ids == ["A", "B", "C", "D"]
    assert [n.client_port for n in topology.nodes] == [5701, 5702, 5703, 5704]
    assert [n.inter_router_port for n in topology.nodes] == [5801, 5802, 5803, 5804]
    pairs = {frozenset((e.source, e.target)) for e in topology.edges}
    assert pairs == {frozenset(p) for p in ("AB", "CD", "AC", "BD", "AD", "BC")}
    config = parse_config(node_config(topology, "C"), "four-node")
    assert {r.prefix: r.distribution for r in config.address_rules} == OSLO_RULES
    assert topology.client_url("A") == "amqp://127.0.0.1:5701"


def test_generated_config_has_listeners_connectors_and_shared_settings(tmp_path):
    path = write(tmp_path, """
name: small
nodes:
  A: {client_port: 6001, inter_router_port: 6101}
  B: {client_port: 6002}
edges:
  - {from: B, to: A, cost: 3}
link_capacity: 10
router: {hello_interval: 0.2, hello_max_age: 0.6, ra_interval_flux: 1}
addresses: {default: closest, rules: [{prefix: mc, distribution: multicast}]}
telemetry: {dir: /var/tmp/mesh-telemetry, sample: 0.5}
""")
    topology = load_topology(path)
    written = write_node_configs(topology, tmp_path / "run")
    a, b = load_config(written["A"]), load_config(written["B"])
    assert [(lc.port, lc.role) for lc in a.listeners] == [(6001, "normal"), (6101, "inter-router")]
    assert a.connectors == () and [(c.port, c.cost) for c in b.connectors] == [(6101, 3)]
    assert [(lc.port, lc.role) for lc in b.listeners] == [(6002, "normal")]
    for config in (a, b):
        assert config.link_capacity == 10
        assert config.router_timers["hello_interval"] == 0.2
        assert config.router_timers["ra_interval_flux"] == 1.0
        assert config.default_distribution == "closest"
        assert [(r.prefix, r.distribution) for r in config.address_rules] == [("mc", "multicast")]
        assert (str(config.telemetry.dir), config.telemetry.sample) == ("/var/tmp/mesh-telemetry", 0.5)


def test_name_defaults_to_the_file_name_and_quiet_nodes_still_log_their_state(tmp_path):
    path = write(tmp_path, "nodes: {A: {client_port: 6001}}\nlog_level: warning\n", "solo-node.yaml")
    topology = load_topology(path)
    assert topology.name == "solo-node"
    config = parse_config(node_config(topology, "A"), "solo")
    assert config.log_level == "warning" and config.log_levels == {STATE_LOGGER: "info"}


BASE_NODES = """
nodes:
  A: {client_port: 6001, inter_router_port: 6101}
  B: {client_port: 6002, inter_router_port: 6102}
  C: {client_port: 6003}
"""

ERRORS = [
    # (topology text, key path, part of the problem)
    (BASE_NODES + "edges: [{from: B, to: A}, {from: C, to: E}]", "edges[1].to", "unknown node 'E'"),
    (BASE_NODES + "edges: [{from: X, to: A}]", "edges[0].from", "unknown node 'X' (nodes: A, B, C)"),
    (BASE_NODES + "edges: [{from: B, to: B}]", "edges[0]", "self-edge"),
    (BASE_NODES + "edges: [{from: B, to: A}, {from: C, to: B}, {from: A, to: B}]", "edges[2]",
     "duplicate edge A-B (already edges[0])"),
    (BASE_NODES + "edges: [{from: A, to: C}]", "edges[0].to", "no nodes.C.inter_router_port"),
    (BASE_NODES + "edges: [{from: B, to: A}]", "edges", "not connected: C cannot reach A"),
    (BASE_NODES + "edges: [{from: B, to: A, cost: 0}]", "edges[0].cost", "out of range"),
    (BASE_NODES + "edges: [{from: B, to: A, weight: 2}]", "edges[0].weight", "unknown key 'weight'"),
    (BASE_NODES + "edges: [{from: B}]", "edges[0].to", "missing required key"),
    ("nodes:\n  A: {client_port: 6001, inter_router_port: 6101}\n  B: {client_port: 6101}\n",
     "nodes.B.client_port", "duplicate port 6101 (already used by nodes.A.inter_router_port)"),
    ("nodes:\n  A: {client_port: 6001}\n  B: {client_port: 6001}\n", "nodes.B.client_port",
     "duplicate port 6001"),
    ("nodes:\n  A: {inter_router_port: 6101}\n", "nodes.A.client_port", "missing required key"),
    ("nodes:\n  A: {client_port: 70000}\n", "nodes.A.client_port", "out of range"),
    ("nodes:\n  A: {client_port: '6001'}\n", "nodes.A.client_port", "expected integer"),
    ("nodes:\n  A: {client_port: 6001, ports: 1}\n", "nodes.A.ports", "unknown key 'ports'"),
    ("nodes:\n  1: {client_port: 6001}\n", "nodes.1", "quote it"),
    ("nodes:\n  a/b: {client_port: 6001}\n", "nodes.a/b", "invalid node id"),
    ("nodes: {}\n", "nodes", "at least one node"),
    ("name: x\n", "nodes", "missing required key"),
    ("nodes: {A: {client_port: 6001}}\nedge: []\n", "edge", "unknown key 'edge'"),
    ("name: a b\nnodes: {A: {client_port: 6001}}\n", "name", "invalid topology name"),
    ("nodes: {A: {client_port: 6001}}\naddresses: {rules: [{prefix: 'a/*', distribution: closest}]}\n",
     "addresses.rules[0].prefix", "wildcard"),
    ("nodes: {A: {client_port: 6001}}\naddresses: {default: nearest}\n", "addresses.default",
     "unknown distribution 'nearest'"),
    ("nodes: {A: {client_port: 6001}}\nrouter: {hello_interval: 5}\n", "router.hello_max_age",
     "must exceed router.hello_interval"),
    ("nodes: {A: {client_port: 6001}}\nrouter: {hello: 5}\n", "router.hello", "unknown key"),
    ("nodes: {A: {client_port: 6001}}\nlink_capacity: 0\n", "link_capacity", "out of range"),
    ("nodes: {A: {client_port: 6001}}\nlog_level: loud\n", "log_level", "unknown log level"),
    ("", "<root>", "topology is empty"),
    ("- a\n", "<root>", "expected a mapping"),
    ("nodes: [\n", "<file>", "invalid YAML at line 2"),
]


@pytest.mark.parametrize(("text", "key_path", "problem"), ERRORS, ids=[e[1] for e in ERRORS])
def test_bad_topology_names_file_key_path_and_problem(tmp_path, text, key_path, problem):
    path = write(tmp_path, text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    err = info.value
    assert (err.file, err.key_path) == (str(path), key_path), str(err)
    assert problem in err.problem
    assert str(err) == f"{path}: {key_path}: {err.problem}"


def test_unreadable_topology_is_a_topology_error(tmp_path):
    with pytest.raises(TopologyError, match=r"missing\.yaml: <file>: cannot read file"):
        load_topology(tmp_path / "missing.yaml")


def test_generated_config_round_trips_through_yaml(tmp_path):
    topology = load_topology(TOPOLOGIES / "diamond.yaml")
    written = write_node_configs(topology, tmp_path)
    for node_id, path in written.items():
        assert yaml.safe_load(path.read_text()) == node_config(topology, node_id)
        assert load_config(path).node_id == node_id


# ---- edge mode (docs/EDGE.md) -------------------------------------------------------------------------
EDGE_TOPOLOGY = """
nodes:
  I1: {client_port: 6001, inter_router_port: 6101, edge_port: 6201}
  I2: {client_port: 6002, edge_port: 6202}
  E1: {client_port: 6003, mode: edge, uplinks: [I1, I2]}
edges:
  - {from: I2, to: I1}
router: {hello_interval: 0.5, hello_max_age: 1.5}
"""


def test_edge_nodes_get_uplinks_and_interiors_an_edge_listener(tmp_path):
    topology = load_topology(write(tmp_path, EDGE_TOPOLOGY))
    assert topology.interior_ids == ["I1", "I2"] and topology.node("E1").is_edge
    e1 = parse_config(node_config(topology, "E1"), "E1")
    assert e1.mode == "edge" and e1.router_timers["hello_interval"] == 0.5
    assert [(u.port, u.cost, u.role) for u in e1.uplinks] == [(6201, 1, "edge"), (6202, 2, "edge")]
    assert [lc.role for lc in e1.listeners] == ["normal"] and not e1.connectors
    i2 = parse_config(node_config(topology, "I2"), "I2")
    assert i2.mode == "interior" and [(lc.role, lc.port) for lc in i2.listeners] == [("normal", 6002),
                                                                                    ("edge", 6202)]


@pytest.mark.parametrize("node_line, key_path, problem", [
    ("E1: {client_port: 6003, mode: edge}", "nodes.E1.uplinks", "at least one interior"),
    ("E1: {client_port: 6003, mode: edge, uplinks: [I9]}", "nodes.E1.uplinks[0]", "unknown interior"),
    ("E1: {client_port: 6003, mode: edge, uplinks: [I2, I2]}", "nodes.E1.uplinks[1]", "duplicate uplink"),
    ("E1: {client_port: 6003, mode: edge, uplinks: [I1], edge_port: 6301}", "nodes.E1.edge_port",
     "only a client port"),
    ("E1: {client_port: 6003, uplinks: [I1]}", "nodes.E1.uplinks", "only a node with mode: edge"),
    ("E1: {client_port: 6003, mode: spoke, uplinks: [I1]}", "nodes.E1.mode", "unknown mode"),
    ("E1: {client_port: 6201, mode: edge, uplinks: [I1]}", "nodes.E1.client_port", "duplicate port 6201"),
])
def test_bad_edge_nodes_are_named(tmp_path, node_line, key_path, problem):
    text = EDGE_TOPOLOGY.replace("E1: {client_port: 6003, mode: edge, uplinks: [I1, I2]}", node_line)
    with pytest.raises(TopologyError) as info:
        load_topology(write(tmp_path, text))
    assert info.value.key_path == key_path and problem in info.value.problem, str(info.value)


def test_an_uplink_needs_the_interiors_edge_port_and_edges_join_no_links(tmp_path):
    text = EDGE_TOPOLOGY.replace("I2: {client_port: 6002, edge_port: 6202}", "I2: {client_port: 6002}")
    with pytest.raises(TopologyError, match=r"nodes.E1.uplinks\[1\]: node 'I2' has no nodes.I2.edge_port"):
        load_topology(write(tmp_path, text))
    link = "  - {from: I2, to: I1}\n"
    text = EDGE_TOPOLOGY.replace(link, link + "  - {from: E1, to: I1}\n")
    with pytest.raises(TopologyError, match=r"edges\[1\].from: node 'E1' is an edge"):
        load_topology(write(tmp_path, text))
