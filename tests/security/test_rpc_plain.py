"""router.rpc with SASL PLAIN: ``amqp://user:password@host:port`` authenticates (router.rpc runs its own
SASL client through cproton_ffi since it left python-qpid-proton's Container)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from router.rpc import RpcClient, RpcConnectionError, RpcServer
from tests.support.security import USERS

REPO = Path(__file__).resolve().parents[2]


def _plain_listener(users_file) -> dict:
    return {"sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file), "allow_plain_without_tls": True}}


def test_rpc_client_and_server_authenticate_with_plain(secure_node, users_file):
    node, (url,) = secure_node([_plain_listener(users_file)])
    hostport = url.split("//", 1)[1]
    creds = f"amqp://alice:{quote(USERS['alice'], safe='')}@{hostport}"
    server = RpcServer(creds, "balanced/plain", lambda body, props: f"hi {body}", connect_timeout=10)
    try:
        with RpcClient(creds, timeout=10) as client:
            assert client.call("balanced/plain", "alice") == "hi alice"
        with pytest.raises(RpcConnectionError):
            RpcClient(f"amqp://alice:wrong-password@{hostport}", connect_timeout=10)
        with pytest.raises(RpcConnectionError):      # PLAIN only: no anonymous login on this listener
            RpcClient(url, connect_timeout=10)
    finally:
        server.stop(timeout=2)


def test_rpc_over_tls_checks_the_server_certificate(secure_node, pki, users_file, tmp_path):
    """``amqps://`` puts TLS under router.rpc (as python-qpid-proton's client did): the server's certificate
    must be trusted by OpenSSL's default CAs (and match the host name). Run in child processes, which name
    the test CA, or no CA, through SSL_CERT_FILE (OpenSSL reads it when the process's TLS context is
    made)."""
    listener = {"tls": {"cert": pki.server.cert, "key": pki.server.key},
                "sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file)}}
    node, (url,) = secure_node([listener])
    port = url.rsplit(":", 1)[1]
    creds = f"alice:{quote(USERS['alice'], safe='')}"
    script = f"""
import sys
from router.rpc import RpcClient, RpcServer
server = RpcServer("amqps://{creds}@localhost:{port}", "balanced/tls", lambda b, p: "tls " + b,
                   connect_timeout=10)
try:
    with RpcClient("amqps://{creds}@localhost:{port}", timeout=10) as c:
        print(c.call("balanced/tls", "ok"))
finally:
    server.stop(timeout=2)
"""
    env = {**os.environ, "SSL_CERT_FILE": str(pki.ca), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["tls", "ok"], done.stdout + done.stderr[-2000:]
    env["SSL_CERT_FILE"] = str(tmp_path / "none")      # no CA trusts the node's certificate
    untrusted = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                               timeout=60)
    assert untrusted.returncode != 0 and "RpcConnectionError" in untrusted.stderr, untrusted.stderr[-2000:]
