"""SASL on listeners: ANONYMOUS, PLAIN (users file, Cyrus sasldb), EXTERNAL, PLAIN refused without TLS."""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess

import pytest
from proton import Data, Described, symbol, ulong

from tests.support.clients import Client
from tests.support.management import Requester
from tests.support.security import USERS, client_tls, connect, refused, set_password

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
SASL_MECHANISMS, SASL_INIT, SASL_OUTCOME = 0x40, 0x41, 0x44


def _tls(pki, **kw) -> dict:
    return {"cert": pki.server.cert, "key": pki.server.key, **kw}


def _plain_listener(pki, users_file, **sasl) -> dict:
    return {"tls": _tls(pki), "sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file), **sasl}}


# ---- a hand-made SASL exchange, to see what the node offers and what it does with a forbidden choice

def _sasl_frame(code: int, fields: list) -> bytes:
    d = Data()
    d.put_object(Described(ulong(code), fields))
    body = d.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


def _read_sasl_frame(sock: socket.socket, buf: bytearray) -> tuple[int, list]:
    while len(buf) < 4 or len(buf) < struct.unpack(">I", buf[:4])[0]:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError(f"connection closed; have {bytes(buf)!r}")
        buf += chunk
    size, doff = struct.unpack(">IB", buf[:5])
    body = bytes(buf[doff * 4:size])
    del buf[:size]
    d = Data()
    d.decode(body)
    d.rewind()
    d.next()
    obj = d.get_object()
    return int(obj.descriptor), obj.value


def raw_sasl(url: str, mechanism: str, response: bytes) -> tuple[list[str], int]:
    """Plain-TCP SASL: (mechanisms the node offers, outcome code after our init with `mechanism`)."""
    host, port = url.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(SASL_HEADER)
        buf = bytearray()
        while len(buf) < 8:
            buf += sock.recv(4096)
        assert bytes(buf[:8]) == SASL_HEADER
        del buf[:8]
        code, fields = _read_sasl_frame(sock, buf)
        assert code == SASL_MECHANISMS
        offered = list(getattr(fields[0], "elements", [fields[0]]))
        sock.sendall(_sasl_frame(SASL_INIT, [symbol(mechanism), response]))
        code, fields = _read_sasl_frame(sock, buf)
        assert code == SASL_OUTCOME
        return [str(m) for m in offered], int(fields[0])


# ---- ANONYMOUS ----------------------------------------------------------------------------------------

def test_anonymous(secure_node):
    node, (url,) = secure_node([{"sasl": {"mechanisms": ["ANONYMOUS"]}}])
    connect(url, mechs="ANONYMOUS").close()
    connect(url, sasl_enabled=False).close()          # ANONYMOUS allowed: skipping SASL is too


def test_no_anonymous_means_authentication_required(secure_node, pki, users_file):
    node, (url,) = secure_node([_plain_listener(pki, users_file)])
    assert "unauthorized" in refused(url, tls=client_tls(pki.ca), mechs="ANONYMOUS")
    refused(url, tls=client_tls(pki.ca), sasl_enabled=False)     # the TLS session just ends
    assert "Client skipped authentication - forbidden" in node.stderr_tail()


def test_skipping_a_required_sasl_exchange_gets_a_clear_close(secure_node, users_file):
    """Without TLS the node can say why (over TLS the session just ends, as above): header, Open and a
    Close `amqp:connection:policy-error` naming the problem, instead of a bare TCP close."""
    from proton import ConnectionException
    from proton.utils import BlockingConnection

    node, (url,) = secure_node([{"sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file),
                                          "allow_plain_without_tls": True}}])
    with pytest.raises(ConnectionException) as info:
        BlockingConnection(url, sasl_enabled=False, timeout=10)
    assert "amqp:connection:policy-error" in str(info.value)
    assert "requires SASL authentication; the client skipped it" in str(info.value)
    assert node.alive()


# ---- PLAIN with a users file --------------------------------------------------------------------------

def test_plain_good_password(secure_node, pki, users_file):
    node, (url,) = secure_node([_plain_listener(pki, users_file)])
    for user, password in USERS.items():
        connect(url, tls=client_tls(pki.ca), mechs="PLAIN", user=user, password=password).close()


def test_plain_bad_password_and_unknown_user(secure_node, pki, users_file):
    node, (url,) = secure_node([_plain_listener(pki, users_file)])
    text = refused(url, tls=client_tls(pki.ca), mechs="PLAIN", user="alice", password="wrong")
    assert "unauthorized-access" in text
    assert "unauthorized-access" in refused(url, tls=client_tls(pki.ca), mechs="PLAIN", user="mallory",
                                            password="wonderland")
    assert "authentication failed for user 'alice'" in node.stderr_tail()


def test_users_file_changes_apply_without_restart(secure_node, pki, tmp_path):
    path = tmp_path / "users"
    set_password(path, "alice", "first")
    node, (url,) = secure_node([_plain_listener(pki, path)])
    connect(url, tls=client_tls(pki.ca), mechs="PLAIN", user="alice", password="first").close()
    set_password(path, "carol", "new-user")
    set_password(path, "alice", "second")
    connect(url, tls=client_tls(pki.ca), mechs="PLAIN", user="carol", password="new-user").close()
    connect(url, tls=client_tls(pki.ca), mechs="PLAIN", user="alice", password="second").close()
    refused(url, tls=client_tls(pki.ca), mechs="PLAIN", user="alice", password="first")


def test_plain_not_offered_without_tls(secure_node, users_file):
    node, (url,) = secure_node([{"sasl": {"mechanisms": ["PLAIN", "ANONYMOUS"], "users_file": str(users_file),
                                          "allow_plain_without_tls": False}}])
    # (a listener with only PLAIN and no TLS is a config error: nobody could authenticate)
    offered, outcome = raw_sasl(url, "PLAIN", b"\0alice\0wonderland")
    assert offered == ["ANONYMOUS"]
    assert outcome == 1                                   # auth: a client choosing PLAIN anyway fails
    assert "unauthorized" in refused(url, mechs="PLAIN", user="alice", password="wonderland")
    connect(url, mechs="ANONYMOUS").close()


def test_plain_without_tls_when_allowed(secure_node, users_file):
    node, (url,) = secure_node([{"sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file),
                                          "allow_plain_without_tls": True}}])
    offered, outcome = raw_sasl(url, "PLAIN", b"\0alice\0wonderland")
    assert offered == ["PLAIN"] and outcome == 0
    assert raw_sasl(url, "PLAIN", b"\0alice\0nope")[1] == 1
    connect(url, mechs="PLAIN", user="bob", password="b0b-pw").close()


def test_plain_with_tls_offers_plain(secure_node, pki, users_file):
    node, (url,) = secure_node([_plain_listener(pki, users_file) | {"sasl": {
        "mechanisms": ["PLAIN", "ANONYMOUS"], "users_file": str(users_file)}}])
    c = connect(url, tls=client_tls(pki.ca), mechs="PLAIN", user="alice", password="wonderland")
    c.close()


def test_proxy_authorization_refused(secure_node, users_file):
    node, (url,) = secure_node([{"sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file),
                                          "allow_plain_without_tls": True}}])
    assert raw_sasl(url, "PLAIN", b"bob\0alice\0wonderland")[1] == 1      # authzid != authcid
    assert raw_sasl(url, "PLAIN", b"alice\0alice\0wonderland")[1] == 0


# ---- EXTERNAL -----------------------------------------------------------------------------------------

def test_external_gives_the_certificate_subject(secure_node, pki):
    node, (url,) = secure_node([{"tls": _tls(pki, ca=pki.ca, require_client_cert=True),
                                 "sasl": {"mechanisms": ["EXTERNAL"]}}])
    c = connect(url, tls=client_tls(pki.ca, pki.client.cert, pki.client.key), mechs="EXTERNAL")
    try:
        rows = Requester(Client(node.url)).query("connection")
        (row,) = [r for r in rows if r["listener"] == url.split("//")[1]]
        assert row["user"] == "CN=client1,O=meshrouter-test" == pki.client.subject
        assert row["saslMechanism"] == "EXTERNAL" and row["authenticated"] is True
    finally:
        c.close()
    assert "unauthorized" in refused(url, tls=client_tls(pki.ca, pki.client.cert, pki.client.key),
                                     mechs="ANONYMOUS")


# ---- PLAIN against the system's SASL database (Cyrus sasldb) -----------------------------------------

@pytest.mark.skipif(shutil.which("saslpasswd2") is None, reason="saslpasswd2 (sasl2-bin) not installed")
def test_plain_against_sasldb(secure_node, pki, tmp_path):
    db = tmp_path / "sasldb2"
    subprocess.run(["saslpasswd2", "-c", "-p", "-f", str(db), "-u", "example.org", "dave"], input="dave-pw\n",
                   text=True, check=True)
    node, (url,) = secure_node([{"tls": _tls(pki), "sasl": {"mechanisms": ["PLAIN", "ANONYMOUS"],
                                                            "sasldb": str(db)}}])
    connect(url, tls=client_tls(pki.ca), mechs="PLAIN", user="dave@example.org", password="dave-pw").close()
    assert "unauthorized" in refused(url, tls=client_tls(pki.ca), mechs="PLAIN", user="dave@example.org",
                                     password="nope")
    connect(url, tls=client_tls(pki.ca), mechs="ANONYMOUS").close()


def test_failure_counts_still_pending_are_logged_when_the_node_stops(secure_node, pki, users_file):
    """Failed logins from one host after the first are counted into one line per interval (a minute);
    a node stopped within the interval writes that line as it stops instead of losing the count."""
    node, (url,) = secure_node([_plain_listener(pki, users_file)])
    for _ in range(3):
        refused(url, tls=client_tls(pki.ca), mechs="PLAIN", user="alice", password="wrong")
    node.proc.send_signal(signal.SIGTERM)
    node.proc.wait(20)
    node.stopped = True
    log = node.stderr_path.read_text(errors="replace")
    assert "(1 failure(s) from there" in log and "(2 failure(s) from there" in log, log[-3000:]
