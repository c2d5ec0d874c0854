"""TLS and SASL from the client side: blocking python-qpid-proton connections, and a users file.

:func:`connect` opens a ``BlockingConnection`` with a TLS domain (:func:`client_tls`) and SASL settings;
:func:`refused` expects the node (or TLS) to refuse it. :func:`set_password` writes the users file a node
checks SASL PLAIN against (``meshrouter passwd``), for the users of :data:`USERS`. :func:`sasl_plain` is
a hand-made PLAIN exchange over plain TCP from a chosen source address (password-guessing tests).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
from pathlib import Path

from proton import ConnectionException, Data, Described, SSLDomain, symbol, ulong
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


SASL_HEADER = b"AMQP\x03\x01\x00\x00"
SASL_INIT, SASL_OUTCOME = 0x41, 0x44


def _sasl_frame(code: int, fields: list) -> bytes:
    d = Data()
    d.put_object(Described(ulong(code), fields))
    body = d.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


def sasl_plain(url: str, user: str, password: str, *, source: str | None = None,
               timeout: float = TIMEOUT) -> int | None:
    """SASL PLAIN over plain TCP (the listener must allow it without TLS) from `source` (an address of
    this host, e.g. 127.0.0.2): the outcome code (0 ok, 1 auth failed), None if the node closed the
    connection or said nothing within `timeout`."""
    host, port = url.split("//")[1].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout,
                                      source_address=(source, 0) if source else None) as sock:
            sock.sendall(SASL_HEADER + _sasl_frame(SASL_INIT, [symbol("PLAIN"),
                                                               f"\0{user}\0{password}".encode()]))
            buf = b""
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    return None
                buf += chunk
                pos = 8 if buf.startswith(SASL_HEADER) else 0
                while len(buf) >= pos + 8:
                    size, doff = struct.unpack(">IB", buf[pos:pos + 5])
                    if len(buf) < pos + size:
                        break
                    d = Data()
                    d.decode(buf[pos + doff * 4:pos + size])
                    d.rewind()
                    d.next()
                    obj = d.get_object()
                    if int(obj.descriptor) == SASL_OUTCOME:
                        return int(obj.value[0])
                    pos += size
    except OSError:
        return None
