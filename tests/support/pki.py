"""Test certificates made with the `openssl` command: a CA, a wrong CA, and leaf certificates.

Keys are EC P-256 (fast to make). Leaf certificates carry serverAuth and clientAuth, so a node can use
one on its listener and its connectors alike.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_OPTS = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
KEY_PASSWORD = "key-secret"


@dataclass(frozen=True)
class Cert:
    cert: str
    key: str
    subject: str          # RFC 2253 form, as Proton reports it (EXTERNAL user)


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: str
    wrong_ca: str
    server: Cert          # CN=localhost, SAN DNS:localhost, IP:127.0.0.1 (signed by ca)
    client: Cert          # CN=client1 (signed by ca)
    node_a: Cert          # router certificates (signed by ca)
    node_b: Cert
    rogue: Cert           # CN=client1 again, signed by the wrong CA
    rogue_server: Cert    # CN=localhost, signed by the wrong CA
    encrypted_key: str    # server.key encrypted with KEY_PASSWORD
    password_file: str    # KEY_PASSWORD on one line


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d: Path, name: str, cn: str) -> str:
    _run("req", "-x509", *KEY_OPTS, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "3",
         "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return str(d / f"{name}.pem")


def _leaf(d: Path, name: str, ca: str, cn: str, san: str | None = None) -> Cert:
    ext = d / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             "extendedKeyUsage=serverAuth,clientAuth"]
    if san:
        lines.append(f"subjectAltName={san}")
    ext.write_text("\n".join(lines) + "\n")
    ca_name = Path(ca).stem
    _run("req", "-new", *KEY_OPTS, "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", f"/O=meshrouter-test/CN={cn}", cwd=d)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca_name}.pem", "-CAkey", f"{ca_name}.key",
         "-CAcreateserial", "-out", f"{name}.pem", "-days", "3", "-extfile", ext.name, cwd=d)
    return Cert(str(d / f"{name}.pem"), str(d / f"{name}.key"), f"CN={cn},O=meshrouter-test")


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    ca = _ca(d, "ca", "meshrouter test CA")
    wrong = _ca(d, "wrong-ca", "wrong CA")
    local = "DNS:localhost,IP:127.0.0.1"
    server = _leaf(d, "server", ca, "localhost", local)
    _run("pkey", "-in", "server.key", "-out", "server-enc.key", "-aes256", "-passout",
         f"pass:{KEY_PASSWORD}", cwd=d)
    (d / "key-password").write_text(KEY_PASSWORD + "\n")
    return Pki(d, ca, wrong, server, _leaf(d, "client", ca, "client1"),
               _leaf(d, "node-a", ca, "router-a", local), _leaf(d, "node-b", ca, "router-b", local),
               _leaf(d, "rogue", wrong, "client1"), _leaf(d, "rogue-server", wrong, "localhost", local),
               str(d / "server-enc.key"), str(d / "key-password"))
