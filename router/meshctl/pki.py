"""A private CA and one certificate per node, for ``meshrouter mesh up --tls`` (the ``openssl`` command).

Every node gets an EC P-256 key and a certificate signed by the mesh's own CA, with its node id as CN
and DNS subjectAltName and both serverAuth and clientAuth usages: its inter-router listener presents it
and requires the peer's (mutual TLS, SASL EXTERNAL), its connectors present it and check that the peer's
certificate names the node they dial. The files are made anew at every ``mesh up`` in ``<run dir>/pki``
(private keys mode 0600); nothing outside the mesh trusts that CA.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_OPTS = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
DAYS = "825"


class PkiError(RuntimeError):
    """The certificates could not be made (no ``openssl`` command, or it failed)."""


@dataclass(frozen=True)
class NodeCert:
    cert: str
    key: str


@dataclass(frozen=True)
class MeshPki:
    ca: str
    nodes: dict[str, NodeCert]


def _openssl(*args: str, cwd: Path) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise PkiError("mesh up --tls needs the openssl command") from None
    except subprocess.CalledProcessError as exc:
        raise PkiError(f"openssl {args[0]} failed: {exc.stderr.strip()[-300:]}") from None


def make_mesh_pki(directory: Path, node_ids: list[str] | tuple[str, ...]) -> MeshPki:
    """Make the CA and a certificate per node in `directory` (created, emptied of old files first).

    The paths returned are absolute: the node configs that name them are read relative to their own
    folder (the run directory), not to the working directory ``mesh up`` ran in."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for old in directory.iterdir():
        if old.is_file():
            old.unlink()
    _openssl("req", "-x509", *KEY_OPTS, "-keyout", "ca.key", "-out", "ca.pem", "-days", DAYS,
             "-subj", "/CN=meshrouter mesh CA", cwd=directory)
    nodes = {}
    for node_id in node_ids:
        ext = directory / f"{node_id}.ext"
        ext.write_text(f"subjectAltName=DNS:{node_id}\nextendedKeyUsage=serverAuth,clientAuth\n"
                       "basicConstraints=CA:FALSE\n")
        _openssl("req", *KEY_OPTS, "-keyout", f"{node_id}.key", "-out", f"{node_id}.csr",
                 "-subj", f"/CN={node_id}", cwd=directory)
        _openssl("x509", "-req", "-in", f"{node_id}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{node_id}.pem", "-days", DAYS, "-extfile", ext.name,
                 cwd=directory)
        nodes[node_id] = NodeCert(str(directory / f"{node_id}.pem"), str(directory / f"{node_id}.key"))
    for key in directory.glob("*.key"):
        os.chmod(key, 0o600)
    return MeshPki(str(directory / "ca.pem"), nodes)


def mesh_pki(topology: object, directory: Path, force: bool = False) -> MeshPki | None:
    """The PKI of a mesh's inter-router links: the topology's own certificates (``tls: {ca, cert,
    key}``), or made in `directory` (``tls: true`` or `force`: ``--tls``), or None (no TLS)."""
    tls = getattr(topology, "tls", False)
    if isinstance(tls, MeshPki):
        return tls
    if tls or force:
        return make_mesh_pki(directory, topology.node_ids)
    return None
