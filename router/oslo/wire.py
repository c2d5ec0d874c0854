"""One connection to one host, with what an operator configures: router.rpc's :class:`~router.rpc.wire.Wire`
(own socket, Proton-C transport driven through cproton_ffi) opened with TLS from the driver's SSL options,
SASL from the URL and the SASL options, the Open frame's container id, hostname, idle timeout and
properties, and frame tracing.

router.rpc opens ``amqps://`` with OpenSSL's default CAs only and takes credentials from its URL; here the
host, its credentials and a python-qpid-proton ``SSLDomain`` (CA file, client certificate, key password)
come from the driver's configuration.
"""

from __future__ import annotations

import selectors
import socket
from dataclasses import dataclass, field
from typing import Any

from cproton_ffi import ffi
from cproton_ffi.lib import (
    pn_connection,
    pn_connection_collect,
    pn_connection_open,
    pn_connection_properties,
    pn_connection_remote_properties,
    pn_connection_set_container,
    pn_connection_set_hostname,
    pn_connection_set_password,
    pn_connection_set_user,
    pn_sasl,
    pn_sasl_allowed_mechs,
    pn_sasl_config_name,
    pn_sasl_config_path,
    pn_sasl_set_allow_insecure_mechs,
    pn_session,
    pn_session_open,
    pn_ssl,
    pn_ssl_init,
    pn_ssl_set_peer_hostname,
    pn_transport,
    pn_transport_bind,
    pn_transport_set_idle_timeout,
    pn_transport_trace,
)
from proton import SSLDomain, symbol
from proton._data import Data

from router.rpc.loop import EventLoop
from router.rpc.wire import Wire, WireHandler

from .hosts import Host

PN_TRACE_FRM = 2


@dataclass
class ConnectSettings:
    """How to open a connection (the same for every host but the host itself)."""

    tls: SSLDomain | None = None           # None: plain TCP
    verify_name: str | None = None         # the name the server's certificate must carry (None: the host)
    sasl_mechanisms: str = ""              # "" -> PLAIN with a user name, else ANONYMOUS
    sasl_config_dir: str = ""
    sasl_config_name: str = ""
    open_hostname: str | None = None       # the Open frame's hostname (the vhost, without pseudo_vhost)
    idle_timeout: float = 0.0
    properties: dict[str, Any] = field(default_factory=dict)
    trace: bool = False
    connect_timeout: float = 10.0


class DriverWire(Wire):
    """A :class:`Wire` to ``host`` opened with ``settings``."""

    def __init__(self, loop: EventLoop, handler: WireHandler, host: Host, settings: ConnectSettings,
                 container_id: str) -> None:
        scheme = "amqps" if settings.tls is not None else "amqp"
        super().__init__(loop, handler, f"{scheme}://{host}", container_id)
        self.host = host
        self.settings = settings

    def open(self, connect_timeout: float) -> None:
        """Connect and open the connection and its session (loop thread; blocks for the TCP connect).
        Raises ``OSError`` or ``ValueError``."""
        host, s = self.host, self.settings
        sock = socket.create_connection((host.hostname, host.port), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self.sock = sock
        c = self._conn = pn_connection()
        t = self._transport = pn_transport()
        if s.trace:
            pn_transport_trace(t, PN_TRACE_FRM)
        if s.idle_timeout:
            pn_transport_set_idle_timeout(t, int(s.idle_timeout * 1000))
        if s.tls is not None:
            ssl = pn_ssl(t)
            if pn_ssl_init(ssl, s.tls._domain, ffi.NULL) != 0:
                raise ValueError(f"{self.url}: TLS is not available in this Proton build")
            pn_ssl_set_peer_hostname(ssl, (s.verify_name or host.hostname).encode())
        sasl = pn_sasl(t)
        if s.sasl_config_dir:
            pn_sasl_config_path(sasl, s.sasl_config_dir.encode())
        if s.sasl_config_name:
            pn_sasl_config_name(sasl, s.sasl_config_name.encode())
        if host.username:
            pn_connection_set_user(c, host.username.encode())
            pn_connection_set_password(c, (host.password or "").encode())
        mechs = s.sasl_mechanisms or ("PLAIN" if host.username else "ANONYMOUS")
        pn_sasl_allowed_mechs(sasl, mechs.encode())
        pn_sasl_set_allow_insecure_mechs(sasl, True)
        pn_connection_set_container(c, self.container_id.encode())
        pn_connection_set_hostname(c, (s.open_hostname or host.hostname).encode())
        if s.properties:
            Data(pn_connection_properties(c)).put_object({symbol(k): v for k, v in s.properties.items()})
        pn_connection_collect(c, self._collector)
        pn_transport_bind(t, c)
        pn_connection_open(c)
        self._session = pn_session(c)
        pn_session_open(self._session)
        self.loop.selector.register(sock, selectors.EVENT_READ, self._on_io)
        self.dirty = True

    def remote_properties(self) -> dict[str, Any]:
        """The peer's Open properties (after it opened), keys as plain strings."""
        if self._conn is None:
            return {}
        d = Data(pn_connection_remote_properties(self._conn))
        d.rewind()
        if not d.next():
            return {}
        obj = d.get_object()
        return {str(k): v for k, v in obj.items()} if isinstance(obj, dict) else {}

    @property
    def failure(self) -> str:
        """The transport's error, if any (e.g. ``amqp:unauthorized-access: Authentication failed``)."""
        return self._transport_error
