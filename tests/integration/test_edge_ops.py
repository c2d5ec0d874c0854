"""Operating edge mode (docs/EDGE.md, "Operations"): `stat -n` shows an interior's edges and an edge's
uplinks, `stat -r EDGE` reads an edge through the mesh, the console's reading has every edge linked to
its interior, `mesh render` writes edge configs the node accepts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from router.config import load_config
from router.management.client import ManagementClient
from router.management.console import MeshReader
from tests.support.edges import router_test_mesh
from tests.support.nodes import REPO_ROOT


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    yield from router_test_mesh(tmp_path_factory, "edge-ops")


def stat(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "router", "stat", *args], capture_output=True, text=True,
                       cwd=REPO_ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _rows(text: str, title: str) -> dict[str, list[str]]:
    block = text.split(title, 1)[1].split("\n\n", 2)[1]
    return {line.split()[0]: line.split() for line in block.splitlines()[2:] if line.strip()}


def test_stat_nodes_lists_an_interiors_edges_and_an_edges_uplinks(mesh):
    rows = _rows(stat("-n", "-b", mesh["INT.A"].url), "Edges of node INT.A")
    assert set(rows) == {"EA1", "EA2", "EB1", "EB2"}                 # active and standby connections
    assert [rows[e][1:3] for e in ("EA1", "EB1")] == [["edge", "yes"], ["edge", "no"]]
    up = _rows(stat("-n", "-b", mesh["INT.B"].url, "-r", "EA1"), "Edges of node EA1")
    assert {k: v[1:3] for k, v in up.items()} == {"INT.A": ["uplink", "yes"], "INT.B": ["uplink", "no"]}


def test_stat_reads_an_edge_through_the_mesh(mesh):
    out = stat("-g", "-b", mesh["INT.B"].url, "-r", "EA2")
    assert "Overview of node EA2" in out


def test_the_console_shows_each_edge_linked_to_its_interior(mesh):
    reader = MeshReader(mesh["INT.A"].url)
    with ManagementClient(mesh["INT.A"].url, timeout=10) as client:
        state = reader.read(client)
    assert {n: v.get("edgeOf") for n, v in state["nodes"].items()} == {
        "INT.A": None, "INT.B": None, "EA1": "INT.A", "EA2": "INT.A", "EB1": "INT.B", "EB2": "INT.B"}
    assert ["EA1", "INT.A"] in state["edges"] and ["EB2", "INT.B"] in state["edges"]


def test_mesh_render_writes_edge_configs(tmp_path):
    out = tmp_path / "out"
    topology = str(REPO_ROOT / "topologies" / "edge.yaml")
    r = subprocess.run([sys.executable, "-m", "router", "mesh", "render", topology, "--out", str(out)],
                       capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    ea1 = load_config(out / "EA1.yaml")
    assert ea1.mode == "edge" and [u.port for u in ea1.uplinks] == [5941, 5942]
    assert (out / "meshrouter-EA1.service").is_file()
    assert [lc.role for lc in load_config(out / "INT.B.yaml").listeners] == ["normal", "edge"]
