"""An interior's `role: edge` listener takes TLS and SASL EXTERNAL like an inter-router one: an edge with a
certificate from the CA attaches, others never do (docs/EDGE.md, "Security")."""

from __future__ import annotations

import time

from tests.support.clients import Client
from tests.support.edges import uplink_of
from tests.support.management import Requester


def _interior(secure_node, pki):
    lc = {"role": "edge", "tls": {"cert": pki.node_b.cert, "key": pki.node_b.key, "ca": pki.ca,
                                  "require_client_cert": True},
          "sasl": {"mechanisms": ["EXTERNAL"]}}
    node, (url,) = secure_node([lc], node_id="B")
    return node, int(url.rsplit(":", 1)[1])


def _tls_edge(node_factory, port, tls):
    up = {"host": "127.0.0.1", "port": port}
    if tls is not None:
        up["tls"] = tls
    return node_factory("EA", extra={"router": {"mode": "edge"}, "uplinks": [up]})


def test_edge_attaches_over_mutual_tls_with_external(secure_node, node_factory, pki):
    b, port = _interior(secure_node, pki)
    e = _tls_edge(node_factory, port, {"ca": pki.ca, "cert": pki.node_a.cert, "key": pki.node_a.key,
                                        "peer_name": "localhost"})
    deadline = time.monotonic() + 10
    while uplink_of(e) != "B":
        assert time.monotonic() < deadline, "the edge never attached over TLS"
        time.sleep(0.1)
    rx = Client(b.url).receiver("closest/edge-tls", credit=5)
    s = Client(e.url).sender("closest/edge-tls")
    s.wait_credit(1, timeout=10)
    assert s.send("over TLS").wait().outcome == "ACCEPTED"
    assert rx.wait_messages(1)[0].body == "over TLS"
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
