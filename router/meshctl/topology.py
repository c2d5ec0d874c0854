"""Topology files (``topologies/*.yaml``, layout in topologies/README.md): loading and validation.

Every problem is a :class:`TopologyError` (a :class:`router.config.ConfigError`), so it prints as
``FILE: KEY_PATH: PROBLEM``, e.g. ``triangle.yaml: edges[2].to: unknown node 'D' (nodes: A, B, C)``.
The sections copied into every node's config (``addresses``, ``router``, ``link_capacity``...) are
checked by :func:`router.config.parse_config` itself, on the generated configs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from router.config import DEFAULT_COST, MAX_COST, ConfigError, Invalid, parse_config, wrong_type
from router.config.yamlfile import read_yaml_file
from router.meshctl.model import DEFAULT_HOST, Edge, NodeSpec, Topology
from router.meshctl.nodeconfig import NODE_SETTINGS, SHARED_SECTIONS, node_config
from router.meshctl.pki import MeshPki, NodeCert

ROOT_KEYS = ("name", "host", "tls", "nodes", "edges", *NODE_SETTINGS, *SHARED_SECTIONS)
NODE_KEYS = ("client_port", "inter_router_port", "host", "edge_port", "mode", "uplinks")
EDGE_KEYS = ("from", "to", "cost")

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")


class TopologyError(ConfigError):
    """An invalid or unreadable topology file; ``str(e) == "FILE: KEY_PATH: PROBLEM"``."""


def load_topology(path: str | os.PathLike[str]) -> Topology:
    """Read and validate a topology file; every failure is a :class:`TopologyError`."""
    source = os.fsdecode(os.fspath(path))
    data = read_yaml_file(path, TopologyError)
    return parse_topology(data, source)


def parse_topology(data: object, source: str) -> Topology:
    """Validate already-parsed YAML data (``source`` names it in errors) and build a :class:`Topology`."""
    try:
        topology = _build(data, source)
    except Invalid as exc:
        raise TopologyError(source, exc.key_path, exc.problem) from None
    _check_node_configs(topology)
    return topology


# ------------------------------------------------------------------------------------------ checks


def _mapping(value: object, path: str, allowed: tuple[str, ...]) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise wrong_type(value, "a mapping", path)
    for key in value:
        if key not in allowed:
            where = f"{path}.{key}" if path != "<root>" else str(key)
            raise Invalid(where, f"unknown key {key!r} (allowed: {', '.join(allowed)})")
    return value


def _name(value: object, path: str, what: str) -> str:
    if not isinstance(value, str):
        hint = " (quote it)" if isinstance(value, int | float | bool) else ""
        raise Invalid(path, f"{wrong_type(value, 'string', path).problem}{hint}")
    if not _NAME_RE.fullmatch(value):
        raise Invalid(path, f"invalid {what} {value!r}: use only letters, digits, '_', '.' and '-'")
    if value.startswith("."):          # '..' would put run directories and files outside their own
        raise Invalid(path, f"invalid {what} {value!r}: must not start with '.'")
    return value


def _int(value: object, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(value, "integer", path)
    if not low <= value <= high:
        raise Invalid(path, f"out of range: must be between {low} and {high}, got {value}")
    return value


def _host(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise wrong_type(value, "string", path)
    if not value.strip() or any(c.isspace() for c in value):
        raise Invalid(path, f"invalid host {value!r}: must be non-empty, without whitespace")
    return value


def _nodes(value: object) -> list[NodeSpec]:
    if not isinstance(value, Mapping):
        raise wrong_type(value, "a mapping of node id to its ports", "nodes")
    if not value:
        raise Invalid("nodes", "at least one node required")
    nodes, ports = [], {}
    for key, entry in value.items():
        node_id = _name(key, f"nodes.{key}", "node id")
        path = f"nodes.{node_id}"
        entry = _mapping(entry, path, NODE_KEYS)
        if "client_port" not in entry:
            raise Invalid(f"{path}.client_port", "missing required key")
        client = _int(entry["client_port"], f"{path}.client_port", 1, 65535)
        inter = entry.get("inter_router_port")
        if inter is not None:
            inter = _int(inter, f"{path}.inter_router_port", 1, 65535)
        host = entry.get("host")
        host = None if host is None else _host(host, f"{path}.host")
        edge_port = entry.get("edge_port")
        if edge_port is not None:
            edge_port = _int(edge_port, f"{path}.edge_port", 1, 65535)
        uplinks = _uplinks(entry, path, inter, edge_port)
        for port_key, port in (("client_port", client), ("inter_router_port", inter),
                               ("edge_port", edge_port)):
            if port is None:
                continue
            if (host, port) in ports:                   # nodes on other hosts may share port numbers
                raise Invalid(f"{path}.{port_key}",
                              f"duplicate port {port} (already used by {ports[host, port]})")
            ports[host, port] = f"{path}.{port_key}"
        nodes.append(NodeSpec(node_id, client, inter, host, edge_port, uplinks))
    by_id = {n.node_id: n for n in nodes}
    for n in nodes:
        for i, up in enumerate(n.uplinks):
            path = f"nodes.{n.node_id}.uplinks[{i}]"
            target = by_id.get(up)
            if target is None or target.is_edge:
                interiors = ", ".join(m.node_id for m in nodes if not m.is_edge)
                raise Invalid(path, f"unknown interior node {up!r} (interiors: {interiors})")
            if target.edge_port is None:
                raise Invalid(path, f"node {up!r} has no nodes.{up}.edge_port to dial")
    if all(n.is_edge for n in nodes):
        raise Invalid("nodes", "at least one interior node required")
    return nodes


def _uplinks(entry: Mapping[str, Any], path: str, inter: int | None,
             edge_port: int | None) -> tuple[str, ...]:
    """An edge node's `mode: edge` and `uplinks` (interior ids, preferred first)."""
    mode = entry.get("mode", "interior")
    if mode not in ("interior", "edge"):
        raise Invalid(f"{path}.mode", f"unknown mode {mode!r} (valid: interior, edge)")
    ups = entry.get("uplinks")
    if mode == "interior":
        if ups is not None:
            raise Invalid(f"{path}.uplinks", "only a node with mode: edge has uplinks")
        return ()
    if not isinstance(ups, list) or not ups:
        raise Invalid(f"{path}.uplinks", "an edge needs a list of at least one interior node id")
    if inter is not None or edge_port is not None:
        key = "inter_router_port" if inter is not None else "edge_port"
        raise Invalid(f"{path}.{key}", "an edge node has only a client port (edges never connect to edges)")
    out = []
    for i, up in enumerate(ups):
        if not isinstance(up, str):
            raise wrong_type(up, "a node id", f"{path}.uplinks[{i}]")
        if up in out:
            raise Invalid(f"{path}.uplinks[{i}]", f"duplicate uplink {up!r}")
        out.append(up)
    return tuple(out)


def _edges(value: object, nodes: dict[str, NodeSpec]) -> list[Edge]:
    if not isinstance(value, list):
        raise wrong_type(value, "a list of edges", "edges")
    edges: list[Edge] = []
    seen: dict[frozenset[str], int] = {}
    known = ", ".join(nodes)
    for i, entry in enumerate(value):
        path = f"edges[{i}]"
        entry = _mapping(entry, path, EDGE_KEYS)
        ends = []
        for key in ("from", "to"):
            if key not in entry:
                raise Invalid(f"{path}.{key}", "missing required key")
            node_id = entry[key]
            if not isinstance(node_id, str) or node_id not in nodes:
                raise Invalid(f"{path}.{key}", f"unknown node {node_id!r} (nodes: {known})")
            ends.append(node_id)
        source, target = ends
        if source == target:
            raise Invalid(path, f"self-edge: node {source!r} cannot connect to itself")
        pair = frozenset(ends)
        if pair in seen:
            raise Invalid(path, f"duplicate edge {source}-{target} (already edges[{seen[pair]}])")
        seen[pair] = i
        for key, node_id in (("from", source), ("to", target)):
            if nodes[node_id].is_edge:
                raise Invalid(f"{path}.{key}", f"node {node_id!r} is an edge: it attaches through its "
                                               "uplinks, not through edges")
        if nodes[target].inter_router_port is None:
            raise Invalid(f"{path}.to", f"node {target!r} has no nodes.{target}.inter_router_port to dial")
        cost = entry.get("cost")
        cost = DEFAULT_COST if cost is None else _int(cost, f"{path}.cost", 1, MAX_COST)
        edges.append(Edge(source, target, cost))
    return edges


def _check_connected(nodes: list[NodeSpec], edges: list[Edge]) -> None:
    nodes = [n for n in nodes if not n.is_edge]
    links: dict[str, set[str]] = {n.node_id: set() for n in nodes}
    for e in edges:
        links[e.source].add(e.target)
        links[e.target].add(e.source)
    first = nodes[0].node_id
    seen, todo = {first}, [first]
    while todo:
        for peer in links[todo.pop()] - seen:
            seen.add(peer)
            todo.append(peer)
    cut_off = [n.node_id for n in nodes if n.node_id not in seen]
    if cut_off:
        raise Invalid("edges", f"the mesh is not connected: {', '.join(cut_off)} cannot reach {first}")


def _build(data: object, source: str) -> Topology:
    if data is None:
        raise Invalid("<root>", "topology is empty: expected a mapping with at least 'nodes'")
    root = _mapping(data, "<root>", ROOT_KEYS)
    default_name = Path(source).stem if source != "<memory>" else "mesh"
    name = root.get("name")
    name = _name(default_name if name is None else name, "name", "topology name")
    host = root.get("host")
    host = DEFAULT_HOST if host is None else _host(host, "host")
    if "nodes" not in root:
        raise Invalid("nodes", "missing required key")
    nodes = _nodes(root["nodes"])
    edges = _edges(root.get("edges") or [], {n.node_id: n for n in nodes})
    _check_connected(nodes, edges)
    settings = {k: root[k] for k in (*NODE_SETTINGS, *SHARED_SECTIONS) if root.get(k) is not None}
    tls = _tls(root.get("tls", False), source, [n.node_id for n in nodes])
    return Topology(name, tuple(nodes), tuple(edges), host, settings, source, tls)


def _tls(value: object, source: str, node_ids: list[str]) -> bool | MeshPki:
    """``tls: true`` (``mesh up`` makes a CA and the certificates) or the operator's own: ``{ca: FILE,
    cert: PATTERN, key: PATTERN}``, where ``{node}`` in a pattern is the node id (each certificate must
    name its node, as connectors check it); paths are relative to the topology file."""
    if isinstance(value, bool):
        return value
    entry = _mapping(value, "tls", ("ca", "cert", "key"))
    base = Path(source).parent if source != "<memory>" else Path(".")
    for key in ("ca", "cert", "key"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise Invalid(f"tls.{key}", "missing required key (a path)" if key not in entry else
                          wrong_type(entry[key], "a path", f"tls.{key}").problem)
    for key in ("cert", "key"):
        if "{node}" not in entry[key]:
            raise Invalid(f"tls.{key}", f"must contain {{node}} (one per node), got {entry[key]!r}")

    def path(text: str, key: str, node_id: str | None = None) -> str:
        p = base / (text.replace("{node}", node_id) if node_id else text)
        if not p.is_file():
            where = f" (node {node_id})" if node_id else ""
            raise Invalid(f"tls.{key}", f"{p}{where}: no such file")
        return str(p.resolve())

    return MeshPki(path(entry["ca"], "ca"), {n: NodeCert(path(entry["cert"], "cert", n),
                                                       path(entry["key"], "key", n)) for n in node_ids})


def _check_node_configs(topology: Topology) -> None:
    """Run every generated node config through the node's own validation; report in topology terms."""
    for spec in topology.nodes:
        try:
            parse_config(node_config(topology, spec.node_id), topology.source)
        except ConfigError as err:
            raise TopologyError(topology.source, _topology_path(err.key_path, spec.node_id),
                                err.problem) from None


def _topology_path(config_path: str, node_id: str) -> str:
    """A key path of a generated node config -> the topology key it came from."""
    for key, (section, name) in NODE_SETTINGS.items():
        if config_path == f"{section}.{name}":
            return key
    if config_path.split(".", 1)[0].split("[", 1)[0] in SHARED_SECTIONS:
        return config_path
    return f"nodes.{node_id}"
