"""The four-node mesh of the control-plane scenarios (scale_bench.py): topologies/four-node.yaml's shape on
free ports, the default control-plane timers, ``idle_timeout: 0`` (idle benchmark connections send no
heartbeats); per node its process, URL, port, log and state line; the neighbour losses its logs report."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import mesh as hm
from harness.paths import BenchError

LOST = re.compile(r"neighbour \S+ lost|inter-router connection to \S+ lost")


@dataclass
class Node:
    """One node of the mesh, as the measurements use it."""

    node_id: str
    mesh: hm.Mesh

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.mesh.children[self.node_id]

    @property
    def url(self) -> str:
        return self.mesh.url(self.node_id)

    @property
    def port(self) -> int:
        return self.mesh.port(self.node_id)

    @property
    def stderr(self) -> Path:
        return self.mesh.stderr(self.node_id)

    def state(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """A fresh SIGUSR1 state line (None if none came in time)."""
        try:
            return self.mesh.state(self.node_id, timeout)
        except BenchError:
            return None


@dataclass
class Mesh:
    """topologies/four-node.yaml's mesh on free ports, default timers, ``idle_timeout: 0``."""

    run_dir: Path
    nodes: dict[str, Node] = field(default_factory=dict)

    def start(self) -> None:
        settings = {**hm.shipped_settings("four-node"), "idle_timeout": 0, "link_capacity": 250,
                    "log_level": "info"}
        self.mesh = hm.Mesh(hm.make_topology("scale", "ABCD", hm.FOUR_NODE_EDGES, settings), self.run_dir)
        self.mesh.start()
        self.mesh.wait_ready(20)
        self.nodes = {n: Node(n, self.mesh) for n in self.mesh.topology.node_ids}

    def losses(self) -> dict[str, list[str]]:
        return {n: LOST.findall(node.stderr.read_text(errors="replace")) for n, node in self.nodes.items()}

    def stop(self) -> None:
        self.mesh.stop()
