"""router.rpc with SASL PLAIN: ``amqp://user:password@host:port`` authenticates (router.rpc runs its own
SASL client through cproton_ffi since it left python-qpid-proton's Container)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from router.rpc import RpcClient, RpcConnectionError, RpcServer
from tests.support.security import USERS


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
