"""An interior's `role: edge` listener takes TLS and SASL EXTERNAL like an inter-router one: an edge with a
certificate from the CA attaches, others never do; the edge's id must be its certificate's CN unless the
listener's `tls.bind_edge_id` is false (docs/EDGE.md, "Security")."""

from __future__ import annotations

import time

from tests.support.clients import Client
from tests.support.edges import uplink_of
from tests.support.management import Requester


def _interior(secure_node, pki, bind_edge_id: bool | None = None):
    lc = {"role": "edge", "tls": {"cert": pki.node_b.cert, "key": pki.node_b.key, "ca": pki.ca,
                                  "require_client_cert": True},
          "sasl": {"mechanisms": ["EXTERNAL"]}}
    if bind_edge_id is not None:
        lc["tls"]["bind_edge_id"] = bind_edge_id
    node, (url,) = secure_node([lc], node_id="B")
    return node, int(url.rsplit(":", 1)[1])


def _tls_edge(node_factory, port, tls, node_id: str = "router-a"):
    """An edge with one uplink; its default id is the CN of pki.node_a's certificate."""
    up = {"host": "127.0.0.1", "port": port}
    if tls is not None:
        up["tls"] = tls
    return node_factory(node_id, extra={"router": {"mode": "edge"}, "uplinks": [up]})


def _cert_a(pki) -> dict:
    return {"ca": pki.ca, "cert": pki.node_a.cert, "key": pki.node_a.key, "peer_name": "localhost"}


def _attached(e, interior: str = "B", seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while uplink_of(e) != interior:
        assert time.monotonic() < deadline, f"edge {e.node_id} never attached to {interior}"
        time.sleep(0.1)


def _carries(edge, interior, address: str, body: str) -> None:
    """A message sent on `edge` to `address` is accepted by a receiver on `interior`."""
    rx = Client(interior.url).receiver(address, credit=5)
    s = Client(edge.url).sender(address)
    s.wait_credit(1, timeout=10)
    assert s.send(body).wait().outcome == "ACCEPTED"
    assert rx.wait_messages(1)[0].body == body


def test_edge_attaches_over_mutual_tls_with_external(secure_node, node_factory, pki):
    b, port = _interior(secure_node, pki)
    e = _tls_edge(node_factory, port, _cert_a(pki))
    _attached(e)
    _carries(e, b, "closest/edge-tls", "over TLS")
    rows = Requester(Client(b.url)).query("connection")
    (row,) = [r for r in rows if r["role"] == "edge"]
    assert row["security"].startswith("TLSv1."), row
    assert row["user"] == pki.node_a.subject and row["saslMechanism"] == "EXTERNAL", row


def _never_attaches(e, seconds: float = 2.5) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert uplink_of(e) is None
        time.sleep(0.25)


def test_edge_without_certificate_never_attaches(secure_node, node_factory, pki):
    b, port = _interior(secure_node, pki)
    _never_attaches(_tls_edge(node_factory, port, {"ca": pki.ca, "peer_name": "localhost"}))
    assert "peer did not return a certificate" in b.stderr_tail()


def test_edge_with_certificate_from_another_ca_never_attaches(secure_node, node_factory, pki):
    b, port = _interior(secure_node, pki)
    _never_attaches(_tls_edge(node_factory, port, {"ca": pki.ca, "cert": pki.rogue.cert,
                                                    "key": pki.rogue.key, "peer_name": "localhost"}))


def test_edge_without_tls_never_attaches(secure_node, node_factory, pki):
    b, port = _interior(secure_node, pki)
    _never_attaches(_tls_edge(node_factory, port, None))


def test_an_edge_whose_id_is_not_its_certificates_cn_is_refused(secure_node, node_factory, pki):
    """Issue 31 point 4: the certificate of CN router-a (valid, from the CA) claiming edge id EA is refused
    at its Open with a log line naming both; the legitimate router-a with the same certificate attaches
    meanwhile and carries traffic."""
    b, port = _interior(secure_node, pki)
    impostor = _tls_edge(node_factory, port, _cert_a(pki), node_id="EA")
    _never_attaches(impostor)
    want = "(id 'EA') refused: edge id 'EA' is not its certificate's common name 'router-a'"
    assert want in b.stderr_tail(), b.stderr_tail()
    e = _tls_edge(node_factory, port, _cert_a(pki))
    _attached(e)
    _carries(e, b, "closest/edge-bound", "bound")
    assert uplink_of(impostor) is None
    rows = Requester(Client(b.url)).query("edge")
    assert [r["identity"] for r in rows] == ["router-a"], rows


def test_bind_edge_id_false_takes_any_id_with_a_valid_certificate(secure_node, node_factory, pki):
    b, port = _interior(secure_node, pki, bind_edge_id=False)
    _attached(_tls_edge(node_factory, port, _cert_a(pki), node_id="EA"))
