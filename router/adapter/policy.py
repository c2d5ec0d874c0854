"""What a listener or a connector applies to each of its connections: TLS, SASL and limits.

A policy is built once per listener or connector when the node starts (TLS contexts, SASL mechanism
lists, the users file) and applied to each new connection before any byte is read or written: a few
Proton setters, nothing on the data path. A plain connection without a limit configured is exactly
what it was without a policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cproton_ffi import ffi
from cproton_ffi.lib import (
    pn_sasl,
    pn_sasl_allowed_mechs,
    pn_sasl_extended,
    pn_sasl_set_allow_insecure_mechs,
    pn_ssl,
    pn_ssl_init,
    pn_ssl_set_peer_hostname,
    pn_transport_require_auth,
    pn_transport_set_channel_max,
    pn_transport_set_idle_timeout,
    pn_transport_set_max_frame,
)

from router.adapter.connection import MAX_FRAME, UNLIMITED
from router.adapter.tls import TlsSetupError, client_domain, server_domain
from router.config import ConnectorConfig, ListenerConfig


class PolicyError(ValueError):
    """A setting that cannot be put in force; `key` is its path within the listener or connector."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(key, problem)
        self.key = key
        self.problem = problem


@dataclass
class ConnectionPolicy:
    """Settings applied to every connection of one listener or connector (see `apply`)."""

    listener: str | None = None            # "host:port" of the listener (None for a connector)
    domain: object = None                  # pn_ssl_domain_t*, None without TLS
    peer_name: bytes | None = None         # connectors: the name the peer's certificate must carry
    sasl: object = None                    # a UsersFileSasl, "cyrus", or None (Proton's built-in)
    mechanisms: bytes = b"ANONYMOUS"
    allow_insecure: bool = False
    require_auth: bool = False
    max_frame: int = MAX_FRAME
    idle_timeout: float = 0.0
    channel_max: int | None = None
    max_message_size: int = UNLIMITED
    max_links: int = UNLIMITED
    vhost: str | None = None               # the listener's policy_vhost (router.policy)
    websocket_path: str | None = None      # AMQP over WebSocket on this path (router.adapter.websocket)
    websocket_tls: object = None           # its ssl.SSLContext (wss://): Python's TLS, not Proton's
    bind_edge_id: bool = False             # an edge's id must be its client certificate's CN (edges.py)

    def wrap(self, sock: object) -> object:
        """The stream a new accepted socket is read and written through (a WebSocket, or the socket)."""
        if self.websocket_path is None:
            return sock
        from router.adapter.websocket import WebSocketStream

        return WebSocketStream(sock, self.websocket_path, self.websocket_tls)

    def apply(self, conn: object) -> None:
        """Configure a new connection's transport (before its first byte) and its limits."""
        t = conn.pn_transport
        pn_transport_set_max_frame(t, self.max_frame)
        pn_transport_set_idle_timeout(t, int(self.idle_timeout * 1000))
        if self.channel_max is not None:
            pn_transport_set_channel_max(t, self.channel_max)
        if self.domain is not None:
            ssl = pn_ssl(t)
            pn_ssl_init(ssl, self.domain, ffi.NULL)
            if self.peer_name is not None:
                pn_ssl_set_peer_hostname(ssl, self.peer_name)
            conn.ssl = ssl
        s = pn_sasl(t)
        if self.sasl == "cyrus":
            from router.adapter import sasl as sasl_impl  # loaded by listener_policy already

            sasl_impl.use_cyrus(t)
        elif self.sasl is not None:
            self.sasl.install(t)
        pn_sasl_allowed_mechs(s, self.mechanisms)
        pn_sasl_set_allow_insecure_mechs(s, self.allow_insecure)
        pn_transport_require_auth(t, self.require_auth)
        conn.listener = self.listener
        conn.max_message_size = self.max_message_size
        conn.max_links = self.max_links
        conn.policy_vhost = self.vhost
        conn.bind_edge_id = self.bind_edge_id


def _password(path: str | None) -> str | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        return f.readline().rstrip("\r\n")


def _tls_error(exc: TlsSetupError) -> PolicyError:
    return PolicyError(f"tls.{exc.key}" if exc.key else "tls", exc.problem)


def listener_policy(lc: ListenerConfig, name: str, node_idle_timeout: float, loop: object,
                    resolve: Callable[[object], object], wake: Callable[[object], None]) -> ConnectionPolicy:
    """The policy of listener `lc` bound as `name` ("host:port"); raises PolicyError."""
    p = ConnectionPolicy(listener=name, max_frame=lc.max_frame_size,
                         idle_timeout=node_idle_timeout if lc.idle_timeout is None else lc.idle_timeout,
                         channel_max=lc.max_sessions - 1 if lc.max_sessions is not None else None,
                         max_message_size=lc.max_message_size or UNLIMITED,
                         max_links=lc.max_links or UNLIMITED, vhost=lc.policy_vhost)
    tls, sasl = lc.tls, lc.sasl
    if lc.websocket:
        p.websocket_path = lc.websocket_path
        if tls is not None:
            p.websocket_tls = _websocket_tls(tls)
    elif tls is not None:
        try:
            p.domain = server_domain(tls.cert, tls.key, _password(tls.key_password_file), tls.ca,
                                     tls.require_client_cert, tls.protocols)
        except TlsSetupError as exc:
            raise _tls_error(exc) from None
        # only a certificate verified against `ca` names the edge (docs/EDGE.md, "Security")
        p.bind_edge_id = lc.role == "edge" and tls.require_client_cert and tls.bind_edge_id
    mechs = sasl.mechanisms
    p.mechanisms = " ".join(mechs).encode()
    p.allow_insecure = sasl.allow_plain_without_tls
    # a client may skip SASL only where ANONYMOUS is allowed anyway
    p.require_auth = "ANONYMOUS" not in mechs
    if sasl.users_file is not None or sasl.sasldb is not None:
        # only such listeners need the plugin API (its cffi declarations cost ~30-50 ms of start-up)
        from router.adapter import sasl as sasl_impl
        from router.security.users import UsersFile, UsersFileError
    if sasl.users_file is not None:
        try:
            users = UsersFile(sasl.users_file)
        except UsersFileError as exc:
            raise PolicyError("sasl.users_file", f"{sasl.users_file}: {exc}") from None
        p.sasl = sasl_impl.UsersFileSasl(mechs, users, sasl.allow_plain_without_tls, loop, resolve, wake)
    elif sasl.sasldb is not None:
        if not pn_sasl_extended():
            raise PolicyError("sasl.sasldb", "this python-qpid-proton build has no Cyrus SASL "
                                             "(install libsasl2-dev, then rebuild: make clean && make)")
        sasl_impl.configure_cyrus(sasl.sasldb, mechs)
        p.sasl = "cyrus"
    return p


def _websocket_tls(tls: object) -> object:
    """The ssl.SSLContext of a `wss://` listener; raises PolicyError."""
    import ssl

    from router.adapter.websocket import tls_context

    if tls.require_client_cert:
        raise PolicyError("tls.require_client_cert", "not available with websocket: true (client "
                                                     "certificates and SASL EXTERNAL need plain AMQP)")
    try:
        return tls_context(tls.cert, tls.key, _password(tls.key_password_file), tls.ca, False, tls.protocols)
    except (OSError, ssl.SSLError) as exc:
        raise PolicyError("tls", f"cannot load the certificate or key: {exc}") from None


def connector_policy(cc: ConnectorConfig, node_idle_timeout: float) -> ConnectionPolicy:
    """The policy of connector `cc` (client side of SASL: Proton's built-in mechanisms)."""
    p = ConnectionPolicy(idle_timeout=node_idle_timeout if cc.idle_timeout is None else cc.idle_timeout)
    tls = cc.tls
    mechs = cc.sasl_mechanisms
    if mechs is None:
        mechs = ("EXTERNAL", "ANONYMOUS") if tls is not None and tls.cert is not None else ("ANONYMOUS",)
    p.mechanisms = " ".join(mechs).encode()
    if tls is not None:
        try:
            p.domain = client_domain(tls.ca, tls.cert, tls.key, _password(tls.key_password_file),
                                     tls.verify_peer_name, tls.protocols)
        except TlsSetupError as exc:
            raise _tls_error(exc) from None
        p.peer_name = (tls.peer_name or cc.host).encode()
    return p
