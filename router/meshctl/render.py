"""``meshrouter mesh render TOPOLOGY --out DIR``: the files to deploy a mesh over several machines.

Per node: ``<id>.yaml``, its config (listeners on its own host, a connector to each peer it dials at the
peer's host name, the topology's shared sections: TLS, SASL, policy, rules...), and
``meshrouter-<id>.service``, a systemd unit that runs it (restart on failure, ``LimitNOFILE`` sized for
its connection limits, ``systemctl reload`` = SIGHUP = re-read the config, router.node.reconfigure).
The same checks as ``mesh up`` apply: the configs are valid node configs. With TLS (``--tls`` or
``tls: true`` in the topology) a private CA and per-node certificates are made in ``DIR/pki`` as for
``mesh up --tls``; each host needs ``pki/ca.pem`` and its own ``pki/<id>.pem`` and ``.key`` in the config
directory (never ``ca.key``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from router.config import parse_config
from router.meshctl.model import Topology
from router.meshctl.nodeconfig import node_config
from router.meshctl.pki import MeshPki, NodeCert, mesh_pki

DEFAULT_CONFIG_DIR = "/etc/meshrouter"
DEFAULT_EXEC = "/opt/meshrouter/.venv/bin/meshrouter"
DEFAULT_USER = "meshrouter"
FDS_PER_NODE_BASE = 256         # files, pipes, the telemetry writer, connectors, the metrics listener
FDS_UNLIMITED = 65536           # LimitNOFILE when a listener sets no connection limit


@dataclass(frozen=True)
class RenderOptions:
    """Where the files go on the target hosts and how the node runs there."""

    config_dir: str = DEFAULT_CONFIG_DIR
    exec_path: str = DEFAULT_EXEC
    user: str = DEFAULT_USER
    bind: str | None = None         # listen on this address instead of the node's host name
    tls: bool = False               # inter-router links over mutual TLS (as `mesh up --tls`)


def render(topology: Topology, out: Path, options: RenderOptions = RenderOptions()) -> list[Path]:
    """Write every node's config and unit into `out` (and with TLS the mesh's CA and each node's
    certificate and key in `out/pki`); return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    local = mesh_pki(topology, out / "pki", options.tls)
    target = None
    if local is not None:           # each host gets them in its config directory
        if topology.tls is local:   # the operator's own: copied into DIR/pki as the made ones are
            _copy_pki(local, out / "pki")
        where = f"{options.config_dir}/pki"
        target = MeshPki(f"{where}/ca.pem", {n: NodeCert(f"{where}/{n}.pem", f"{where}/{n}.key")
                                             for n in topology.node_ids})
    for node_id in topology.node_ids:
        # checked with the certificates where they are now, written with where they will be
        data = node_config(topology, node_id, target, bind=options.bind)
        config = parse_config(node_config(topology, node_id, local, bind=options.bind),
                              f"{topology.source} (node {node_id})")
        header = (f"# node {node_id} of mesh {topology.name!r} on {topology.host_of(node_id)}, rendered by "
                  f"'meshrouter mesh render' from {topology.source}\n"
                  f"# install as {options.config_dir}/{node_id}.yaml; apply a change with "
                  f"'systemctl reload meshrouter-{node_id}'\n")
        path = out / f"{node_id}.yaml"
        path.write_text(header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None),
                        encoding="utf-8")
        unit = out / f"meshrouter-{node_id}.service"
        limits = [lc.max_connections for lc in config.listeners]
        unit.write_text(systemd_unit(topology, node_id, options, limits), encoding="utf-8")
        written += [path, unit]
    return written


def open_files_limit(max_connections: list[int | None]) -> int:
    """LimitNOFILE for a node whose listeners allow these many connections (None: no limit)."""
    if any(m is None for m in max_connections):
        return FDS_UNLIMITED
    return FDS_PER_NODE_BASE + sum(m for m in max_connections if m is not None)


def systemd_unit(topology: Topology, node_id: str, options: RenderOptions,
                 max_connections: list[int | None]) -> str:
    config = f"{options.config_dir}/{node_id}.yaml"
    command = shlex.join([options.exec_path, "run", config])
    return f"""\
# node {node_id} of mesh {topology.name!r}, rendered by 'meshrouter mesh render'
[Unit]
Description=meshrouter node {node_id} (mesh {topology.name})
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
User={options.user}
WorkingDirectory={options.config_dir}
ExecStartPre={shlex.join([options.exec_path, "check-config", config])}
ExecStart={command}
# re-read {config} and apply the difference without a restart (SIGHUP)
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
TimeoutStopSec=15
# one descriptor per connection, plus files and pipes
LimitNOFILE={open_files_limit(max_connections)}

[Install]
WantedBy=multi-user.target
"""


def _copy_pki(pki: MeshPki, directory: Path) -> None:
    """The operator's CA certificate and node certificates and keys, as DIR/pki/{ca,<id>}.pem / .key."""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pki.ca, directory / "ca.pem")
    for node_id, cert in pki.nodes.items():
        shutil.copyfile(cert.cert, directory / f"{node_id}.pem")
        shutil.copyfile(cert.key, directory / f"{node_id}.key")
        (directory / f"{node_id}.key").chmod(0o600)
