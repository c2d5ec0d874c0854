"""Inter-router connections over mutual TLS: nodes with certificates form a mesh, others cannot join."""

from __future__ import annotations

import time

from tests.support.clients import Client
from tests.support.management import Requester
from tests.support.meshes import HELLO, views, wait_address, wait_converged
from tests.support.state import mesh_view

ROUTER = {"hello_interval": HELLO, "hello_max_age": HELLO * 3, "ra_interval_flux": 1.0}


def _listening_node(secure_node, pki, cert):
    """A node whose inter-router listener requires a client certificate signed by the test CA."""
    ir = {"role": "inter-router", "tls": {"cert": cert.cert, "key": cert.key, "ca": pki.ca,
                                          "require_client_cert": True},
          "sasl": {"mechanisms": ["EXTERNAL"]}}
    node, (ir_url,) = secure_node([ir], node_id="B", extra={"router": ROUTER})
    return node, int(ir_url.rsplit(":", 1)[1])


def _dialing_node(node_factory, node_id: str, port: int, tls: dict | None):
    connector = {"host": "127.0.0.1", "port": port}
    if tls is not None:
        connector["tls"] = tls
    return node_factory(node_id, extra={"connectors": [connector], "router": ROUTER})


def test_mutual_tls_mesh_routes_a_message(secure_node, node_factory, pki):
    b, port = _listening_node(secure_node, pki, pki.node_b)
    a = _dialing_node(node_factory, "A", port, {"ca": pki.ca, "cert": pki.node_a.cert, "key": pki.node_a.key,
                                                "peer_name": "localhost"})
    wait_converged([a, b], 15)
    consumer = Client(b.url).receiver("closest/mtls", credit=5)
    wait_address([a, b], "closest/mtls", ["B"])
    snd = Client(a.url).sender("closest/mtls")
    snd.wait_credit()
    assert snd.send("across mutual TLS").wait().outcome == "ACCEPTED"
    assert consumer.wait_messages(1)[0].body == "across mutual TLS"
    rows = Requester(Client(b.url)).query("connection")
    (ir,) = [r for r in rows if r["role"] == "inter-router"]
    assert ir["security"].startswith("TLSv1."), ir
    assert ir["user"] == pki.node_a.subject and ir["saslMechanism"] == "EXTERNAL", ir


def _never_joins(a, b, seconds: float = 2.5) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert "A" not in mesh_view(b).reachable, views([a, b])
        time.sleep(0.25)


def test_node_without_certificate_cannot_join(secure_node, node_factory, pki):
    b, port = _listening_node(secure_node, pki, pki.node_b)
    a = _dialing_node(node_factory, "A", port, {"ca": pki.ca, "peer_name": "localhost"})
    _never_joins(a, b)
    assert "peer did not return a certificate" in b.stderr_tail()


def test_node_with_certificate_from_another_ca_cannot_join(secure_node, node_factory, pki):
    b, port = _listening_node(secure_node, pki, pki.node_b)
    a = _dialing_node(node_factory, "A", port, {"ca": pki.ca, "cert": pki.rogue.cert, "key": pki.rogue.key,
                                                "peer_name": "localhost"})
    _never_joins(a, b)
    assert "certificate verify failed" in b.stderr_tail()


def test_node_without_tls_cannot_join(secure_node, node_factory, pki):
    b, port = _listening_node(secure_node, pki, pki.node_b)
    a = _dialing_node(node_factory, "A", port, None)
    _never_joins(a, b)


def test_connector_checks_the_peer_name(secure_node, node_factory, pki):
    b, port = _listening_node(secure_node, pki, pki.node_b)
    a = _dialing_node(node_factory, "A", port, {"ca": pki.ca, "cert": pki.node_a.cert, "key": pki.node_a.key,
                                                "peer_name": "other.example"})
    _never_joins(a, b)
    log = a.stderr_tail()
    assert "no name matching other.example" in log or "certificate verify failed" in log, log
