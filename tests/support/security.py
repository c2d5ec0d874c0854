"""TLS and SASL from the client side: blocking python-qpid-proton connections, and a users file.

:func:`connect` opens a ``BlockingConnection`` with a TLS domain (:func:`client_tls`) and SASL settings;
:func:`refused` expects the node (or TLS) to refuse it. :func:`set_password` writes the users file a node
checks SASL PLAIN against (``meshrouter passwd``), for the users of :data:`USERS`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from proton import ConnectionException, SSLDomain
from proton.utils import BlockingConnection

from tests.support.nodes import REPO_ROOT

TIMEOUT = 10
USERS = {"alice": "wonderland", "bob": "b0b-pw"}


def client_tls(ca: str, cert: str | None = None, key: str | None = None,
               verify_name: bool = True) -> SSLDomain:
    """A client SSL domain trusting `ca` (and checking the server's name), presenting `cert` if given."""
    d = SSLDomain(SSLDomain.MODE_CLIENT)
    d.set_trusted_ca_db(ca)
    d.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if verify_name else SSLDomain.VERIFY_PEER, ca)
    if cert is not None:
        d.set_credentials(cert, key, None)
    return d


def connect(url: str, *, tls: SSLDomain | None = None, mechs: str | None = None, user: str | None = None,
            password: str | None = None, host: str = "localhost", **kw) -> BlockingConnection:
    """Open a connection (raises ConnectionException when the node or TLS refuses it)."""
    if mechs is not None:
        kw["allowed_mechs"] = mechs
    if user is not None:
        kw["user"] = user
        kw["password"] = password
    return BlockingConnection(url, timeout=TIMEOUT, ssl_domain=tls, virtual_host=host, **kw)


def refused(url: str, **kw) -> str:
    """Connect expecting a refusal; returns the error text (fails the test if it connects)."""
    try:
        c = connect(url, **kw)
    except ConnectionException as exc:
        return str(exc)
    c.close()
    raise AssertionError(f"connection to {url} with {kw} was not refused")


def set_password(path: Path, user: str, password: str) -> None:
    """`meshrouter passwd PATH USER` with the password on stdin."""
    subprocess.run([sys.executable, "-m", "router", "passwd", str(path), user], input=password + "\n",
                   text=True, check=True, capture_output=True, cwd=REPO_ROOT)
