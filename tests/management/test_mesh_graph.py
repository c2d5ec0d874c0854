"""``meshrouter mesh graph``: the graph model on canned data, then real runs.

- ``-b URL`` on the mesh of conftest.py (the square A-B-C-D with D-A cost 5, a consumer on A);
- a TOPOLOGY started by ``mesh up`` (topologies/four-node.yaml on free ports), drawn whole, then again
  after one node was killed.

The SVG keeps text as text and names its artists (``node-up-A``, ``edge-down-A-D``, ``served-A``, see
router/meshctl/graphplot.py), so the tests read what was drawn from it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from router.meshctl.graph import MeshState, NodeState, build_graph, parse_link_state, served_addresses
from router.meshctl.graphplot import served_label
from tests.support.meshctl import pid_running, up
from tests.support.stat_mesh import EDGES, NAMES, WORK

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"


def graph_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "router", "mesh", "graph", *args]


class Drawing:
    """The PNG and SVG written for one prefix, checked for validity on load."""

    def __init__(self, prefix: Path) -> None:
        png = prefix.with_name(prefix.name + ".png").read_bytes()
        assert png.startswith(PNG_MAGIC), png[:16]
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        assert width > 300 and height > 300, (width, height)
        self.root = ET.parse(prefix.with_name(prefix.name + ".svg")).getroot()
        assert self.root.tag == f"{SVG_NS}svg"
        self.ids = {el.get("id") for el in self.root.iter() if el.get("id")}
        self.texts = ["".join(el.itertext()).strip() for el in self.root.iter(f"{SVG_NS}text")]

    def of(self, prefix: str) -> set[str]:
        return {i for i in self.ids if i.startswith(prefix)}

    def text_of(self, gid: str) -> str:
        found = [el for el in self.root.iter() if el.get("id") == gid]
        assert len(found) == 1, gid
        return "\n".join(t.strip() for t in found[0].itertext() if t.strip())


# ------------------------------------------------------------------------------------ canned data


def test_parse_link_state():
    assert parse_link_state(["B:1", "D:5"]) == {"B": 1, "D": 5}
    assert parse_link_state(["bad", "C:x", ":3", "E:2"]) == {"E": 2}
    assert parse_link_state(None) == {}


def test_served_addresses_leave_out_management_and_own_reply_address():
    rows = [
        {"identity": "_topo/0/A/$management", "subscriberCount": 1},
        {"identity": "_topo/0/A/temp.own123", "subscriberCount": 1},
        {"identity": "_topo/0/A/temp.other99", "subscriberCount": 1},
        {"identity": "closest/x", "subscriberCount": 2},
        {"identity": "balanced/gone", "subscriberCount": 0},
        {"identity": "$local", "subscriberCount": 1},
    ]
    assert served_addresses(rows, "amqp:/_topo/0/A/temp.own123") == ["closest/x", "_topo/0/A/temp.other99"]


def test_served_label_cuts_long_lists_and_names():
    names = [f"closest/{i}" for i in range(7)]
    assert served_label(names) == "closest/0\nclosest/1\nclosest/2\nclosest/3\n+3 more"
    long = "a" * 60
    assert served_label([long]) == "a" * 47 + "…"
    assert served_label([]) == ""


def test_build_graph_marks_unread_nodes_and_unreported_edges_down():
    state = MeshState("t", nodes={"A": NodeState("A", True, ["x"]), "B": NodeState("B", True),
                                  "C": NodeState("C", False)},
                      link_states={"A": {"B": 1, "C": 4}, "B": {"A": 1}, "C": {"A": 3}},
                      configured=[("B", "C", 2)])
    g = build_graph(state)
    assert dict(g.nodes(data="reachable")) == {"A": True, "B": True, "C": False}
    assert g.nodes["A"]["served"] == ["x"]
    edges = {tuple(sorted(e)): (d["cost"], d["up"]) for *e, d in g.edges(data=True)}
    assert edges == {("A", "B"): (1, True), ("A", "C"): (4, False), ("B", "C"): (2, False)}


# --------------------------------------------------------------------------------------- -b URL


def test_graph_of_the_mesh_seen_from_one_node(observed):
    proc = observed.runs["graph-bus"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "4 nodes (4 read), 4 edges" in proc.stdout
    d = Drawing(observed.out_dir / "bus")
    assert d.of("node-") == {f"node-up-{n}" for n in NAMES}
    assert d.of("edge-") == {f"edge-up-{'-'.join(sorted((a, b)))}" for a, b, _ in EDGES}
    for n in NAMES:
        assert n in d.texts, f"no label {n}"
    assert sorted(t for t in d.texts if t.isdigit()) == sorted(str(c) for *_, c in EDGES)   # costs
    assert d.text_of("served-A") == WORK                       # only A has a consumer
    assert "served-B" not in d.ids and "served-C" not in d.ids and "served-D" not in d.ids
    assert not any("$management" in t for t in d.texts)


# -------------------------------------------------------------------------------------- TOPOLOGY


def test_graph_of_a_topology_before_and_after_a_node_is_killed(meshctl, tmp_path):
    m = meshctl("four-node")
    up(m)
    run = [str(m.topology), "--dir", str(m.run_dir), "--out"]
    proc = subprocess.run(graph_args(*run, str(tmp_path / "whole")), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("mesh four-node: 4 nodes (4 read), 6 edges; wrote ")
    pairs = ["A-B", "A-C", "A-D", "B-C", "B-D", "C-D"]
    whole = Drawing(tmp_path / "whole")
    assert whole.of("node-") == {f"node-up-{n}" for n in NAMES}
    assert whole.of("edge-") == {f"edge-up-{p}" for p in pairs}
    assert sorted(t for t in whole.texts if t.isdigit()) == ["1"] * 6

    pid = m.pids()["D"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = subprocess.run(graph_args(*run, str(tmp_path / "cut")), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("meshrouter: node D: not running") and len(proc.stderr.splitlines()) == 1
    cut = Drawing(tmp_path / "cut")
    assert cut.of("node-") == {"node-up-A", "node-up-B", "node-up-C", "node-down-D"}
    assert cut.of("edge-") == {f"edge-{'down' if 'D' in p else 'up'}-{p}" for p in pairs}
    assert cut.text_of("served-D") == "(unreachable)"


def test_graph_of_no_node_exits_1(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"amqp://127.0.0.1:{s.getsockname()[1]}"      # bound, not listening: refused
        proc = subprocess.run(graph_args("-b", url, "--out", str(tmp_path / "g")), capture_output=True,
                              text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == f"meshrouter: error: cannot connect to {url}: Connection refused to all addresses\n"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args", [[], ["topologies/four-node.yaml", "-b", "amqp://127.0.0.1:1"]])
def test_graph_needs_either_a_topology_or_a_url(args, tmp_path):
    proc = subprocess.run(graph_args(*args, "--out", str(tmp_path / "g")), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == "meshrouter: error: mesh graph: give either a TOPOLOGY file or -b URL\n"
    assert not list(tmp_path.iterdir())
