"""One accepted TCP connection: the socket, its Proton transport and connection, and byte pumping.

Bytes read from the socket are pushed into the transport; everything the transport has to say is
written back in large chunks. Proton-C is driven through python-qpid-proton's cffi layer directly.
"""

from __future__ import annotations

import logging
import socket

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_LOCAL_CLOSED,
    PN_REMOTE_UNINIT,
    PN_SSL_CERT_SUBJECT_COMMON_NAME,
    PN_SYMBOL,
    pn_condition_set_description,
    pn_condition_set_name,
    pn_connection,
    pn_connection_close,
    pn_connection_collect,
    pn_connection_condition,
    pn_connection_offered_capabilities,
    pn_connection_open,
    pn_connection_properties,
    pn_connection_release,
    pn_connection_remote_container,
    pn_connection_remote_hostname,
    pn_connection_set_container,
    pn_connection_state,
    pn_data_enter,
    pn_data_exit,
    pn_data_put_array,
    pn_data_put_int,
    pn_data_put_map,
    pn_data_put_string,
    pn_data_put_symbol,
    pn_decref,
    pn_link_is_sender,
    pn_link_set_max_message_size,
    pn_sasl,
    pn_sasl_allowed_mechs,
    pn_sasl_get_mech,
    pn_ssl_get_cipher_name,
    pn_ssl_get_protocol_name,
    pn_ssl_get_remote_subject_subfield,
    pn_transport,
    pn_transport_bind,
    pn_transport_capacity,
    pn_transport_close_head,
    pn_transport_close_tail,
    pn_transport_closed,
    pn_transport_get_user,
    pn_transport_is_authenticated,
    pn_transport_peek,
    pn_transport_pending,
    pn_transport_pop,
    pn_transport_push,
    pn_transport_require_auth,
    pn_transport_set_idle_timeout,
    pn_transport_set_max_frame,
    pn_transport_set_server,
    pn_transport_unbind,
)

from router import PRODUCT, __version__
from router.adapter.builtin_sasl import use_builtin as use_builtin_sasl
from router.adapter.pnbuffers import BUSY_BUFFER, grow_input, grow_output
from router.adapter.streamlinks import STREAMING_LINKS
from router.defaults import MAX_FRAME_SIZE

log = logging.getLogger(__name__)

FLUSHED, BLOCKED, DONE = 0, 1, 2     # results of Connection.flush

IO_CHUNK = 256 * 1024
MAX_FRAME = MAX_FRAME_SIZE  # as qdrouterd's default; larger messages stream frame by frame
UNLIMITED = 2**63          # "no limit" for the per-connection limits
MAX_REFUSED_LINKS = 100    # attaches refused for max_links before the connection is closed (a flood)

_rbuf = bytearray(IO_CHUNK)
_rbuf_c = ffi.from_buffer(_rbuf)
_wbuf = bytearray(IO_CHUNK)
_wbuf_c = ffi.from_buffer(_wbuf)
_wbuf_mv = memoryview(_wbuf)


def _bytes(value: bytes) -> tuple:
    """A pn_bytes_t for `value` plus the buffer that must stay alive while it is used."""
    keep = ffi.new("char[]", value)
    return ffi.new("pn_bytes_t *", (len(value), keep))[0], keep


def _put_symbol(data: object, value: str) -> None:
    b, _keep = _bytes(value.encode())
    pn_data_put_symbol(data, b)


def _put_string(data: object, value: str) -> None:
    b, _keep = _bytes(value.encode())
    pn_data_put_string(data, b)


class Connection:
    """Socket + Proton transport + Proton connection of one peer."""

    __slots__ = ("sock", "pn_conn", "pn_transport", "alive", "links", "sessions", "peer", "role",
                 "want_write", "echo", "input_closed", "cost", "client", "router", "connector",
                 "ident", "opened", "internal", "kind",
                 "ssl", "listener", "max_message_size", "max_links", "access", "policy_vhost",
                 "refused_links", "bind_edge_id", "framed", "heavy", "out_pending", "read_size", "last_read",
                 "read_cpu", "bytes_in")

    def __init__(self, sock: socket.socket, peer: str, node_id: str, idle_timeout: float,
                 collector: object, role: str = "normal", echo_detector: object = None,
                 client: bool = False, cost: int = 1) -> None:
        self.sock = sock
        self.framed = getattr(sock, "framed", False)    # router.adapter.websocket.WebSocketStream
        self.heavy = False      # its last input took long to handle (the node's read budget: server.py)
        self.read_size = IO_CHUNK   # the most one read takes (router.forwarding.readpacing paces clients)
        self.last_read = 0          # bytes the last read took
        self.read_cpu = 0.0         # CPU seconds its last read and pump took (0: too little to measure)
        self.peer = peer
        self.role = role
        self.client = client           # we connected out (a connector), so we open and attach first
        self.cost = cost               # configured inter-router cost of this end
        self.router: object = None     # inter-router state (router.adapter.engine.RouterPeer), if any
        self.connector: object = None  # the connector that made it, if any
        self.ident = 0                 # management identity (set by the engine)
        self.opened = 0.0              # when it was accepted or made (epoch seconds, set by the engine)
        self.internal = False          # an in-process client of this node (broker gateway, management)
        self.kind = "client"           # telemetry's kind of its links: client, broker or inter-router
        # security and limits (router.adapter.policy sets them for listeners and connectors)
        self.ssl: object = None        # pn_ssl_t* when the connection runs TLS
        self.listener: str | None = None           # "host:port" of the listener that accepted it
        self.max_message_size = UNLIMITED          # bigger transfers are rejected (engine)
        self.max_links = UNLIMITED                 # client links beyond this are refused (admit_link)
        self.refused_links = 0                     # attaches refused for max_links (closed past a few)
        self.bind_edge_id = False                  # an edge here must be named by its certificate's CN
        # authorization (router.policy): the listener's forced vhost; the grant resolved at the Open
        self.policy_vhost: str | None = None
        self.access: object = None                 # router.policy.access.Access once the Open arrived
        self.alive = True
        self.want_write = False
        # bytes Proton's transport held for the socket after the last flush (its output buffer, which the
        # session's outgoing bytes do not count): a streamed message pauses on both (streams.py)
        self.out_pending = 0
        self.bytes_in = 0              # bytes read from the socket (the memory budget's size estimate)
        self.input_closed = False      # no more input will be read (peer closed, or decode error)
        self.links: set = set()         # our pn_link_t pointers on this connection
        self.sessions: list = []        # pn_session_t pointers
        self.echo = echo_detector
        c = self.pn_conn = pn_connection()
        t = self.pn_transport = pn_transport()
        if not client:
            pn_transport_set_server(t)
        pn_transport_set_max_frame(t, MAX_FRAME)
        if idle_timeout > 0:
            pn_transport_set_idle_timeout(t, int(idle_timeout * 1000))
        # SASL ANONYMOUS offered (Proton's built-in mechanisms, not Cyrus); clients that skip SASL
        # are accepted too. A listener's or connector's policy replaces this before any I/O.
        sasl = pn_sasl(t)
        use_builtin_sasl(t)
        pn_sasl_allowed_mechs(sasl, b"ANONYMOUS")
        pn_transport_require_auth(t, False)
        pn_connection_set_container(c, node_id.encode())
        props = pn_connection_properties(c)
        pn_data_put_map(props)
        pn_data_enter(props)
        _put_symbol(props, "product")
        _put_string(props, PRODUCT)
        _put_symbol(props, "version")
        _put_string(props, __version__)
        if role in ("inter-router", "edge"):
            _put_symbol(props, "qd.inter-router-cost")
            pn_data_put_int(props, cost)
        pn_data_exit(props)
        caps = pn_connection_offered_capabilities(c)
        pn_data_put_array(caps, False, PN_SYMBOL)
        pn_data_enter(caps)
        _put_symbol(caps, "ANONYMOUS-RELAY")
        if role in ("inter-router", "edge"):
            _put_symbol(caps, STREAMING_LINKS)     # it takes a streaming link per streamed message
        pn_data_exit(caps)
        pn_connection_collect(c, collector)
        pn_transport_bind(t, c)

    def __repr__(self) -> str:   # log lines name a connection (e.g. the link a bad control message came on)
        return f"<{self.role} connection {self.peer}>"

    def read(self, limit: int | None = None) -> list | None:
        """Read what the socket has (at most `read_size` bytes, or `limit`) into the transport. Returns echo
        requests seen, if any."""
        t = self.pn_transport
        if self.input_closed:
            return None
        cap = pn_transport_capacity(t)
        if cap <= 0:                      # no room yet, or the input side is closed
            self.input_closed = cap < 0
            return None
        try:
            size = self.read_size if limit is None else min(limit, self.read_size)
            n = self.sock.recv_into(_rbuf, min(cap, size))
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            n = 0
        self.last_read = n
        if n == 0:
            pn_transport_close_tail(t)
            self.input_closed = True
            return None
        self.bytes_in += n
        if n == cap < BUSY_BUFFER:        # the read filled Proton's buffer: a busy connection's is larger
            grow_input(t)
        if pn_transport_push(t, _rbuf_c, n) < 0 or pn_transport_capacity(t) < 0:
            self.input_closed = True      # Proton stopped reading (e.g. an undecodable frame)
        if self.echo is not None:
            found = self.echo.feed(bytes(_rbuf[:n]))
            return found or None
        return None

    def flush(self) -> int:
        """Write what the transport has: FLUSHED, BLOCKED (socket full) or DONE (output closed)."""
        t, sock = self.pn_transport, self.sock
        # pnbuffers.pending(t), inlined (every flush of every connection): a count that is a power of two
        # under BUSY_BUFFER may be a full output buffer, which grow_output lets Proton double
        p = pn_transport_pending(t)
        if 0 < p < BUSY_BUFFER and not p & (p - 1):
            p = grow_output(t, p)
        while p > 0:
            k = pn_transport_peek(t, _wbuf_c, min(p, IO_CHUNK))
            if k <= 0:
                break
            try:
                s = sock.send(_wbuf_mv[:k])
            except (BlockingIOError, InterruptedError):
                s = 0
            except OSError:
                pn_transport_close_head(t)
                return DONE
            if s > 0:
                pn_transport_pop(t, s)
            if s < k:
                self.out_pending = p - s
                return BLOCKED
            p = pn_transport_pending(t)
            if 0 < p < BUSY_BUFFER and not p & (p - 1):
                p = grow_output(t, p)
        self.out_pending = 0
        if p < 0:
            if self.input_closed:           # all said (our Close) and nothing more to read: tear it down
                pn_transport_close_tail(t)
            return DONE
        if self.framed and sock.pending():      # a WebSocket stream still holds bytes for the socket
            return BLOCKED
        if p == 0 and self.input_closed:
            # Nothing more to say and nothing more to read (an input error, or the node gave up on
            # the connection): close both sides so the connection can be torn down now
            pn_transport_close_head(t)
            pn_transport_close_tail(t)
            return DONE
        return FLUSHED

    def finished(self) -> bool:
        """Both directions of the transport are closed: the connection can be torn down."""
        return bool(pn_transport_closed(self.pn_transport))

    # ---- security and limits ---------------------------------------------------------------------------
    def admit_link(self, link: object) -> bytes | None:
        """Apply the link limits to a link the peer attached: None if admitted, else why it is refused.

        A receiving link is told the connection's max-message-size (in our attach).
        """
        if pn_connection_state(self.pn_conn) & PN_LOCAL_CLOSED:
            return b"the connection is closing"
        if self.role not in ("inter-router", "edge") and len(self.links) >= self.max_links:
            self.refused_links += 1
            why = f"too many links on this connection (max_links {self.max_links})".encode()
            if self.refused_links > MAX_REFUSED_LINKS:      # a client that keeps on: a flood, not a bug
                self.set_close_condition(b"amqp:resource-limit-exceeded",
                                         why + f"; {MAX_REFUSED_LINKS} attaches refused: closing".encode())
                pn_connection_close(self.pn_conn)
                self.input_closed = True                    # read nothing more; the socket goes once written
            return why
        if self.max_message_size < UNLIMITED and not pn_link_is_sender(link):
            pn_link_set_max_message_size(link, self.max_message_size)
        return None

    def set_close_condition(self, name: bytes, description: bytes) -> None:
        """The error condition our Close will carry."""
        cond = pn_connection_condition(self.pn_conn)
        pn_condition_set_name(cond, name)
        pn_condition_set_description(cond, description)

    def close_with(self, name: bytes, description: bytes) -> None:
        """Close an open connection with this error (it goes when the peer's Close or EOF arrives, or
        at the idle timeout)."""
        self.set_close_condition(name, description)
        pn_connection_close(self.pn_conn)

    def refuse(self, name: bytes, description: bytes) -> None:
        """Answer the peer's Open with a Close carrying this error: the connection ends there."""
        self.set_close_condition(name, description)
        pn_connection_open(self.pn_conn)
        pn_connection_close(self.pn_conn)

    @property
    def security(self) -> str:
        """"TLSv1.3(TLS_AES_256_GCM_SHA384)"; "TLS" until the handshake is done; else "no-security"."""
        if self.ssl is None:
            return "no-security"
        buf = ffi.new("char[]", 128)
        if self.pn_transport is None or not pn_ssl_get_protocol_name(self.ssl, buf, 128):
            return "TLS"
        protocol = ffi.string(buf).decode()
        pn_ssl_get_cipher_name(self.ssl, buf, 128)
        return f"{protocol}({ffi.string(buf).decode()})"

    @property
    def remote_opened(self) -> bool:
        """The peer's Open arrived (so its protocol header, TLS and SASL were done before it)."""
        return self.pn_conn is not None and not pn_connection_state(self.pn_conn) & PN_REMOTE_UNINIT

    @property
    def remote_container(self) -> str | None:
        """The container id the peer's Open gave (None before it arrived)."""
        if self.pn_conn is None:
            return None
        p = pn_connection_remote_container(self.pn_conn)
        return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None

    @property
    def remote_hostname(self) -> str | None:
        """The hostname the peer's Open gave (its vhost, for the policy), None if it gave none."""
        if self.pn_conn is None:
            return None
        p = pn_connection_remote_hostname(self.pn_conn)
        return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None

    @property
    def authenticated(self) -> bool:
        """SASL succeeded with a mechanism other than none (ANONYMOUS counts, as in Proton)."""
        return self.pn_transport is not None and bool(pn_transport_is_authenticated(self.pn_transport))

    @property
    def certificate_cn(self) -> str | None:
        """The subject CN of the peer's certificate (TLS with a client certificate), else None."""
        if self.ssl is None or self.pn_transport is None:
            return None
        p = pn_ssl_get_remote_subject_subfield(self.ssl, PN_SSL_CERT_SUBJECT_COMMON_NAME)
        return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None

    @property
    def user(self) -> str | None:
        """The authenticated user: the PLAIN user name, the client certificate's subject (EXTERNAL, in
        RFC 2253 form, e.g. "CN=client,O=example") or "anonymous"; None before authentication."""
        if self.pn_transport is None:
            return None
        p = pn_transport_get_user(self.pn_transport)
        return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None

    @property
    def sasl_mechanism(self) -> str | None:
        """The SASL mechanism the peer used, None if it skipped SASL (or it is not done yet)."""
        if self.pn_transport is None:
            return None
        p = pn_sasl_get_mech(pn_sasl(self.pn_transport))
        return ffi.string(p).decode("ascii", "replace") if p != ffi.NULL else None

    def free(self) -> None:
        """Release the Proton objects (call once, after the connection left every table), and the
        connection's place in its policy's per-user and per-host counts."""
        access = self.access
        if access is not None and access.counted:
            access.release()
        pn_transport_unbind(self.pn_transport)
        pn_decref(self.pn_transport)
        pn_connection_release(self.pn_conn)
        pn_decref(self.pn_conn)         # our reference from pn_connection() (= pn_connection_free)
        self.pn_transport = self.pn_conn = self.ssl = None
