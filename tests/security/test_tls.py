"""TLS on listeners: real TLS handshakes with python-qpid-proton clients."""

from __future__ import annotations

from proton import Message
from proton.reactor import AtMostOnce

from tests.support.clients import Client
from tests.support.management import Requester
from tests.support.security import client_tls, connect, refused


def _tls(pki, **kw) -> dict:
    return {"tls": {"cert": pki.server.cert, "key": pki.server.key, **kw}}


def test_tls_connect_and_send(secure_node, pki):
    node, (url,) = secure_node([_tls(pki)])
    assert url.startswith("amqps://")
    c = connect(url, tls=client_tls(pki.ca))
    try:
        rcv = c.create_receiver("balanced/tls", credit=1)
        # at-most-once: an unsettled send() would wait for an outcome given only after receive()
        c.create_sender("balanced/tls", options=AtMostOnce()).send(Message(body="over TLS"), timeout=10)
        assert rcv.receive(timeout=10).body == "over TLS"
    finally:
        c.close()


def test_wrong_ca_refused(secure_node, pki):
    node, (url,) = secure_node([_tls(pki)])
    assert "certificate verify failed" in refused(url, tls=client_tls(pki.wrong_ca))


def test_server_cert_from_wrong_ca_refused(secure_node, pki):
    node, (url,) = secure_node([{"tls": {"cert": pki.rogue_server.cert, "key": pki.rogue_server.key}}])
    assert "certificate verify failed" in refused(url, tls=client_tls(pki.ca))


def test_peer_name_mismatch_refused(secure_node, pki):
    node, (url,) = secure_node([_tls(pki)])
    assert "certificate verify failed" in refused(url, tls=client_tls(pki.ca), host="wrong.example")
    connect(url, tls=client_tls(pki.ca), host="localhost").close()      # the right name passes


def test_plain_amqp_on_tls_listener_refused(secure_node, pki):
    node, (url,) = secure_node([_tls(pki)])
    text = refused(url.replace("amqps://", "amqp://"))
    assert "SSL" in text or "TLS" in text or "framing" in text, text


def test_encrypted_key_with_password_file(secure_node, pki):
    node, (url,) = secure_node([{"tls": {"cert": pki.server.cert, "key": pki.encrypted_key,
                                          "key_password_file": pki.password_file}}])
    connect(url, tls=client_tls(pki.ca)).close()


def test_client_certificate_required(secure_node, pki):
    node, (url,) = secure_node([_tls(pki, ca=pki.ca, require_client_cert=True)])
    connect(url, tls=client_tls(pki.ca, pki.client.cert, pki.client.key)).close()
    assert "SSL" in refused(url, tls=client_tls(pki.ca))                                  # no certificate
    assert "SSL" in refused(url, tls=client_tls(pki.ca, pki.rogue.cert, pki.rogue.key))   # wrong CA


def test_only_the_configured_ca_is_trusted(secure_node, pki, monkeypatch):
    """OpenSSL's default CA file (here: the wrong CA, as if it were a system CA) is not trusted."""
    monkeypatch.setenv("SSL_CERT_FILE", pki.wrong_ca)
    node, (url,) = secure_node([_tls(pki, ca=pki.ca, require_client_cert=True)])
    assert "SSL" in refused(url, tls=client_tls(pki.ca, pki.rogue.cert, pki.rogue.key))
    connect(url, tls=client_tls(pki.ca, pki.client.cert, pki.client.key)).close()


def test_protocols_restrict_tls_versions(secure_node, pki):
    node, (url,) = secure_node([_tls(pki, protocols=["TLSv1.3"])])
    plain = Client(node.url)
    c = connect(url, tls=client_tls(pki.ca))
    try:
        rows = Requester(plain).query("connection")
        (row,) = [r for r in rows if r["listener"] == url.split("//")[1]]
        assert row["security"].startswith("TLSv1.3("), row
    finally:
        c.close()


def test_management_shows_tls_and_user(secure_node, pki, users_file):
    sasl = {"mechanisms": ["EXTERNAL", "PLAIN"], "users_file": str(users_file)}
    node, (url,) = secure_node([_tls(pki, ca=pki.ca, require_client_cert=True) | {"sasl": sasl}])
    plain = Client(node.url)
    c = connect(url, tls=client_tls(pki.ca, pki.client.cert, pki.client.key), mechs="EXTERNAL")
    try:
        req = Requester(plain)
        rows = {r["listener"]: r for r in req.query("connection") if r["listener"]}
        tls_row = rows[url.split("//")[1]]
        assert tls_row["security"].startswith("TLSv1."), tls_row
        assert "(" in tls_row["security"]
        assert tls_row["authenticated"] is True
        assert tls_row["user"] == pki.client.subject
        assert tls_row["saslMechanism"] == "EXTERNAL"
        plain_row = rows[node.url.split("//")[1]]
        assert plain_row["security"] == "no-security"
        assert plain_row["user"] == "anonymous" and plain_row["saslMechanism"] == "ANONYMOUS"
    finally:
        c.close()
