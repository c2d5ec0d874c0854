"""AMQP over WebSocket (RFC 6455, subprotocol `amqp`): a socket-like stream for a listener's connections.

A listener with `websocket: true` hands each accepted socket to :class:`WebSocketStream`; the connection
reads and writes it exactly as it does a plain socket (`recv_into`, `send`, `fileno`, `close`), and the
stream does the HTTP upgrade, framing, pings and the closing handshake with wsproto (sans-IO) on the
node's own reads. AMQP bytes travel in binary messages, in both directions, as browsers and rhea expect.

With `tls`, TLS is Python's (an `ssl.SSLContext`, `wss://`), outside the WebSocket, so Proton's own TLS
is not used on such a listener. An upgrade request for another path gets 404; one that offers
subprotocols but not `amqp` gets 400.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

SUBPROTOCOL = "amqp"
READ_CHUNK = 65536
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class WebSocketStream:
    """One accepted connection: WebSocket (over TLS if given) outside, AMQP bytes inside."""

    framed = True           # the connection asks `pending()` before it calls its output flushed

    def __init__(self, sock: socket.socket, path: str = "/", tls: ssl.SSLContext | None = None) -> None:
        self.raw: Any = tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False) if tls \
            else sock
        self.path = path
        self.ws = WSConnection(ConnectionType.SERVER)
        self.inbox = bytearray()        # AMQP bytes received, not read yet
        self.outbox = bytearray()       # WebSocket bytes not written yet
        self.held = bytearray()         # AMQP bytes written before the upgrade was accepted
        self.upgraded = False
        self.ended = False              # closed by the peer, refused, or broken: reads return 0
        self.refusal: str | None = None     # why the upgrade was refused (for the log)
        self.start = bytearray()        # the first bytes received (an HTTP GET, or refused at once)

    # ---- the socket interface the connection uses ---------------------------------------------------
    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        self.raw.close()

    def recv_into(self, buffer: Any, nbytes: int) -> int:
        """AMQP bytes into `buffer`; BlockingIOError while none have arrived, 0 at the end."""
        while not self.inbox:
            if self.ended:
                return 0
            try:
                data = self.raw.recv(READ_CHUNK)
            except _WOULD_BLOCK:
                raise BlockingIOError from None
            except (ssl.SSLError, OSError):
                data = b""
            self._receive(data or None)
            self.pending()
            if not data:
                self.ended = True
        k = min(nbytes, len(self.inbox))
        buffer[:k] = self.inbox[:k]
        del self.inbox[:k]
        return k

    def send(self, data: Any) -> int:
        """Take AMQP bytes to send (all of them, as one binary message), or BlockingIOError while the
        previous ones still wait for the socket."""
        if self.pending():
            raise BlockingIOError
        if self.ended:
            raise BrokenPipeError("the WebSocket is closed")
        if not self.upgraded:
            self.held += data
            return len(data)
        self.outbox += self.ws.send(Message(data=bytes(data)))
        self.pending()
        return len(data)

    def pending(self) -> bool:
        """Write what waits; True while some still does (the socket is full)."""
        while self.outbox:
            try:
                n = self.raw.send(self.outbox)
            except _WOULD_BLOCK:
                return True
            except (ssl.SSLError, OSError):
                self.outbox.clear()
                self.ended = True
                return False
            del self.outbox[:n]
        return False

    # ---- the WebSocket protocol -----------------------------------------------------------------------
    def _receive(self, data: bytes | None) -> None:
        if len(self.start) < 4 and data:
            self.start += data[:4 - len(self.start)]
            if not _could_be_http_get(bytes(self.start)):
                self._refuse(400, "expected a WebSocket upgrade (HTTP GET); this listener speaks AMQP over "
                                  "WebSocket only")
                return
        try:
            self.ws.receive_data(data)
            for event in self.ws.events():
                self._event(event)
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self.refusal = self.refusal or f"bad WebSocket input: {exc}"
            self.ended = True

    def _event(self, event: object) -> None:
        if isinstance(event, Request):
            self._upgrade(event)
        elif isinstance(event, BytesMessage):
            self.inbox += event.data
        elif isinstance(event, TextMessage):
            self.outbox += self.ws.send(CloseConnection(code=1003, reason="AMQP frames come as binary"))
            self.ended = True
        elif isinstance(event, Ping):
            self.outbox += self.ws.send(event.response())
        elif isinstance(event, CloseConnection):
            if self.ws.state.name != "CLOSED":
                self.outbox += self.ws.send(event.response())
            self.ended = True

    def _upgrade(self, request: Request) -> None:
        path = request.target.split("?", 1)[0]
        if path != self.path:
            self._refuse(404, f"no WebSocket endpoint at {path!r} (this listener's path is {self.path!r})")
        elif request.subprotocols and SUBPROTOCOL not in request.subprotocols:
            self._refuse(400, f"subprotocol {SUBPROTOCOL!r} required, offered {request.subprotocols}")
        else:
            offered = SUBPROTOCOL if SUBPROTOCOL in request.subprotocols else None
            self.outbox += self.ws.send(AcceptConnection(subprotocol=offered))
            self.upgraded = True
            if self.held:
                self.outbox += self.ws.send(Message(data=bytes(self.held)))
                self.held.clear()

    def _refuse(self, status: int, why: str) -> None:
        body = (why + "\n").encode()
        self.outbox += self.ws.send(RejectConnection(status_code=status, has_body=True,
                                                     headers=[(b"content-type", b"text/plain"),
                                                              (b"content-length", str(len(body)).encode())]))
        self.outbox += self.ws.send(RejectData(data=body))
        self.refusal = why
        self.ended = True


def _could_be_http_get(data: bytes) -> bool:
    """Whether the first bytes of a connection can start an HTTP GET (an upgrade request)."""
    return b"GET "[:len(data)] == data[:4]


def tls_context(cert: str, key: str, password: str | None, ca: str | None, require_client_cert: bool,
                protocols: tuple[str, ...] | list[str]) -> ssl.SSLContext:
    """The server TLS context of a `wss://` listener, from the listener's `tls` settings."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key, password)
    if ca:
        ctx.load_verify_locations(ca)
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
    versions = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
    chosen = [versions[p] for p in protocols if p in versions]
    if chosen:
        ctx.minimum_version, ctx.maximum_version = min(chosen), max(chosen)
    return ctx
