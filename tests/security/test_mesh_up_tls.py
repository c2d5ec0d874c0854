"""`meshrouter mesh up --tls`: a secure local mesh in one command (issue 17, point 4).

A private CA and a certificate per node are made in the run directory; every inter-router link runs
mutual TLS with SASL EXTERNAL (the peer is the certificate's subject); a process without a certificate
of that CA cannot join (the TLS handshake fails), and clients keep their plain listeners.
"""

from __future__ import annotations

import socket
import ssl

import yaml

from tests.support.clients import ACCEPTED, Client
from tests.support.management import Requester
from tests.support.meshctl import up


def test_mesh_up_tls_makes_a_secure_mesh(meshctl):
    m = meshctl("chain")
    urls, _, _ = up(m, "--tls")
    pki = m.run_dir / "pki"
    assert (pki / "ca.pem").exists() and all((pki / f"{n}.pem").exists() for n in "ABC")
    assert all((pki / f"{n}.key").stat().st_mode & 0o077 == 0 for n in "ABC")     # keys private
    cfg_b = yaml.safe_load((m.run_dir / "B.yaml").read_text())
    ir = [lc for lc in cfg_b["listeners"] if lc["role"] == "inter-router"][0]
    assert ir["tls"]["require_client_cert"] is True and ir["sasl"]["mechanisms"] == ["EXTERNAL"]
    conns = Requester(Client(urls["B"])).query("connection")
    peers = {c["peerNode"]: c for c in conns if c["role"] == "inter-router"}
    assert set(peers) == {"A", "C"}, conns
    for node, c in peers.items():
        assert c["security"].startswith("TLS"), c
        assert c["saslMechanism"] == "EXTERNAL", c
        if c["dir"] == "in":                        # the node that dialled is its certificate's subject
            assert c["user"] == f"CN={node}", c
    # traffic across the secured links
    rcv = Client(urls["C"]).receiver("balanced/tls-mesh", credit=5)
    snd = Client(urls["A"]).sender("balanced/tls-mesh")
    snd.wait_credit()
    assert snd.send("over TLS").wait().state == ACCEPTED
    assert rcv.wait_messages(1)[0].body == "over TLS"
    # a process without a certificate of the mesh's CA is refused at the TLS handshake
    port = ir["port"]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    refused = False
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"AMQP\x03\x01\x00\x00")
                refused = tls.recv(64) == b""
        except (ssl.SSLError, ConnectionError):
            refused = True
    assert refused


def test_topology_tls_key(meshctl):
    """`tls: true` in the topology file: the same as `mesh up --tls`."""
    m = meshctl("chain")
    data = yaml.safe_load(m.topology.read_text())
    m.topology.write_text(yaml.safe_dump({**data, "tls": True}, sort_keys=False))
    urls, _, _ = up(m)
    assert (m.run_dir / "pki" / "ca.pem").exists()
    conns = Requester(Client(urls["B"])).query("connection")
    assert all(c["security"].startswith("TLS") for c in conns if c["role"] == "inter-router"), conns
    m.cli("down", check=0)
    bad = yaml.safe_dump({**data, "tls": "yes"}, sort_keys=False)
    m.topology.write_text(bad)
    proc = m.cli("up", check=2)
    assert "tls" in proc.stderr, proc.stderr
    m.topology.write_text(yaml.safe_dump(data, sort_keys=False))     # mesh down at teardown reads it


def test_topology_with_the_operators_own_certificates(meshctl, tmp_path):
    """`tls: {ca, cert, key}` with `{node}` patterns: the mesh runs on the operator's certificates (here
    made by the same CA tooling into a directory of the operator's), paths relative to the topology."""
    from router.meshctl.pki import make_mesh_pki

    m = meshctl("chain")
    own = m.topology.parent / "own-certs"
    make_mesh_pki(own, ["A", "B", "C"])
    data = yaml.safe_load(m.topology.read_text())
    tls = {"ca": "own-certs/ca.pem", "cert": "own-certs/{node}.pem", "key": "own-certs/{node}.key"}
    m.topology.write_text(yaml.safe_dump({**data, "tls": tls}, sort_keys=False))
    urls, _, _ = up(m)
    assert not (m.run_dir / "pki").exists()                       # nothing made: the operator's are used
    cfg_b = yaml.safe_load((m.run_dir / "B.yaml").read_text())
    assert {c["tls"]["cert"] for c in cfg_b["connectors"]} == {str((own / "B.pem").resolve())}
    conns = Requester(Client(urls["B"])).query("connection")
    assert all(c["security"].startswith("TLS") and c["saslMechanism"] == "EXTERNAL"
               for c in conns if c["role"] == "inter-router"), conns
    m.cli("down", check=0)
    for bad, problem in (({**tls, "cert": "own-certs/B.pem"}, "tls.cert: must contain {node}"),
                         ({**tls, "key": "nowhere/{node}.key"}, "(node A): no such file")):
        m.topology.write_text(yaml.safe_dump({**data, "tls": bad}, sort_keys=False))
        proc = m.cli("up", check=2)
        assert problem in proc.stderr, proc.stderr
    m.topology.write_text(yaml.safe_dump(data, sort_keys=False))     # mesh down at teardown reads it
