"""``meshrouter mesh``: run a whole mesh of nodes on this machine from one topology file.

``model`` holds a validated topology (nodes, edges, shared settings); ``topology`` loads and validates
``topologies/*.yaml``; ``nodeconfig`` turns a topology into one node config per node; ``rundir`` owns the
run directory (configs, logs, pid files); ``procs`` starts and stops node processes; ``probe`` reads a
node's ``state`` line; ``commands`` and ``cli`` are ``mesh up|status|down|run``.

Part of the CLI layer: may import every layer below it (config, the management client, router.rpc for the
demo); it runs nodes as processes and never imports router.node or router.adapter.
"""

from router.meshctl.model import Edge, NodeSpec, Topology
from router.meshctl.topology import TopologyError, load_topology, parse_topology

__all__ = ["Edge", "NodeSpec", "Topology", "TopologyError", "load_topology", "parse_topology"]
