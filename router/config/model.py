"""The configuration model: frozen dataclasses the node runs from, each field a YAML key declared once.

The layout is fixed by docs/CONTRACTS.md. Each field's :func:`~router.config.keys.key` holds the key's
checker, its default (the field's) and its line in docs/CONFIGURATION.md; the field
order is the order keys are checked in. ``NodeConfig`` is flat for the code that reads it; its fields'
``group`` puts them back into the file's ``node:`` and ``addresses:`` mappings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from router.config import checks as c
from router.config.brokers import BrokerConfig
from router.config.keys import Check, Invalid, declare, join, section, wrong_type
from router.config.policy import POLICY, PolicyConfig
from router.config.telemetry import TelemetryConfig
from router.defaults import (
    HELLO_INTERVAL,
    HELLO_MAX_AGE,
    LINK_CAPACITY,
    LS_MAX_AGE,
    MAX_FRAME_SIZE,
    MEMORY_LIMIT_MIN,
    RA_INTERVAL,
    RA_INTERVAL_FLUX,
    STREAM_WINDOW,
    STREAM_WINDOW_MIN,
    STREAM_WINDOW_SHARED,
)

DISTRIBUTIONS = ("closest", "balanced", "multicast")
ROLES = ("normal", "inter-router", "edge")
CONNECTOR_ROLES = ("inter-router", "edge")
MODES = ("interior", "edge")
LOG_LEVELS = ("debug", "info", "warning", "error")
TLS_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
SASL_MECHANISMS = ("ANONYMOUS", "PLAIN", "EXTERNAL")
CONNECTOR_SASL_MECHANISMS = ("ANONYMOUS", "EXTERNAL")
MAX_COST = 2**24
#: The cost of a link when neither end configures one (listeners, connectors, topology edges).
DEFAULT_COST = 1
#: Credit is granted through Proton as a C int.
MAX_LINK_CAPACITY = 2**31 - 1
UINT32_MAX = 2**32 - 1
#: Listener limits by default: ~3.4 KB per session and ~2.5 KB per link (measured), so one connection
#: holds at most ~3.5 MB of them, a full listener ~14 GB (a 2-core / 24 GB node survives it).
MAX_SESSIONS = 256
MAX_LINKS = 1000
MAX_CONNECTIONS = 4096
#: A listener's accept queue by default: a reconnect storm of thousands of clients must not overflow it (at
#: 128, Proton's default, 10,000 clients took 33-59 s: dropped SYNs wait 1, 3, 7 ... s). Linux caps one
#: socket's queue to net.core.somaxconn (4096 since kernel 5.4): see router.node.listening.
BACKLOG = 4096

_cost = c.int_in(1, MAX_COST)
_seconds = c.number_at_least(0, "seconds")
_distribution = c.choice(DISTRIBUTIONS, "distribution")
_log_level = c.choice(LOG_LEVELS, "log level")


@dataclass(frozen=True)
class ListenerTls:
    """TLS on a listener: our certificate, and optionally the client certificates we require."""

    cert: str = declare(c.file_path, "PEM file of our certificate (chain)")
    key: str = declare(c.file_path, "PEM file of our private key")
    key_password_file: str | None = declare(c.file_path, "file whose first line is the key's password", None)
    ca: str | None = declare(
        c.file_path, "PEM file of the CAs that sign acceptable client certificates", None)
    require_client_cert: bool = declare(
        c.boolean, "mutual TLS: a client without a certificate signed by `ca` is refused (needs `ca`)", False)
    protocols: tuple[str, ...] = declare(
        c.protocols(TLS_PROTOCOLS), "allowed TLS versions", (), show="OpenSSL's defaults")
    bind_edge_id: bool = declare(
        c.boolean, "on a `role: edge` listener with `require_client_cert`: an edge's id (its container "
                   "id) must be its certificate's subject CN, else it is refused; false: any free id "
                   "(docs/EDGE.md)",
        True)


@dataclass(frozen=True)
class ListenerSasl:
    """SASL on a listener: what clients may authenticate with, and where PLAIN users come from."""

    mechanisms: tuple[str, ...] = declare(
        c.mechanisms(SASL_MECHANISMS),
        "offered mechanisms; without `ANONYMOUS` a client must authenticate (skipping SASL is refused)",
        ("ANONYMOUS",))
    users_file: str | None = declare(
        c.file_path, "PLAIN checks this meshrouter users file (`meshrouter passwd`); re-read when it changes",
        None)
    sasldb: str | None = declare(
        c.file_path, "or PLAIN checks this Cyrus sasldb (e.g. `/etc/sasldb2`, `saslpasswd2`); one per node",
        None)
    allow_plain_without_tls: bool = declare(
        c.boolean, "offer and accept PLAIN on connections without TLS", False)


#: The longest `name` of a listener, connector or address rule.
MAX_NAME = 200


def _entity_name(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise wrong_type(value, "a string", path)
    if not value.strip() or not value.isprintable() or len(value) > MAX_NAME:
        raise Invalid(path, f"must be printable text of 1 to {MAX_NAME} characters, got {value!r}")
    return value


_name = Check(_entity_name, "string")
_NAME_DOC = "its management name (qdmanage `--name`), unique among them"
_NAME_SHOW = "`{what}/<host>:<port>`"


def _ws_path(value: object, path: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or any(ch.isspace() for ch in value):
        raise Invalid(path, f"must be an HTTP path starting with '/', without spaces, got {value!r}")
    return value


@dataclass(frozen=True)
class ListenerConfig:
    """One listening socket, with its security settings and per-connection limits (None = no limit).

    The default limits bound what one connection and one listener can make the node hold (docs/SECURITY.md,
    "Worst-case memory per connection")."""

    host: str = declare(c.host, "address to bind")
    port: int = declare(c.int_in(0, 65535), "0 picks a free port (printed on stdout)")
    role: str = declare(c.choice(ROLES, "role"), "clients, peer nodes of the mesh (`inter-router`), or edge "
                        "nodes' uplinks (`edge`, docs/EDGE.md)", "normal")
    cost: int = declare(_cost, "inter-router: this end's cost of links made through it", DEFAULT_COST)
    tls: ListenerTls | None = declare(
        section(ListenerTls), "TLS on this listener (plain AMQP is then refused there); the node prints "
                              "`amqps://`", None)
    sasl: ListenerSasl = declare(section(ListenerSasl), "SASL on this listener", ListenerSasl())
    max_connections: int = declare(
        c.int_in(1, 2**31 - 1), "more connections get a Close `amqp:resource-limit-exceeded`",
        MAX_CONNECTIONS)
    backlog: int = declare(
        c.int_in(1, 2**31 - 1), "connections waiting to be accepted (`listen()`); beyond "
                                "`net.core.somaxconn` (one socket's cap) the port gets several accept queues "
                                "(`SO_REUSEPORT`, at most 16), logged at start", BACKLOG)
    max_frame_size: int = declare(c.int_in(512, UINT32_MAX), "max-frame-size of our Open", MAX_FRAME_SIZE)
    max_message_size: int | None = declare(
        c.int_in(1, 2**63 - 1), "bigger transfers are REJECTED `amqp:link:message-size-exceeded`; "
                                "advertised on receiving links", None)
    max_sessions: int = declare(
        c.int_in(1, 65536), "sessions per connection (our Open's channel-max + 1)", MAX_SESSIONS)
    max_links: int = declare(
        c.int_in(1, 2**31 - 1), "client links per connection; more attaches are refused "
                                "`amqp:resource-limit-exceeded`", MAX_LINKS)
    idle_timeout: float | None = declare(
        _seconds, "idle timeout of this listener's connections; 0 disables it", None,
        show="`node.idle_timeout`")
    handshake_timeout: float = declare(
        _seconds, "seconds a new connection has to complete the protocol header, TLS, SASL and Open; "
                  "then it is closed (counted: `handshakeTimeouts`); 0 disables it", 10.0)
    policy_vhost: str | None = declare(
        c.host, "the `policy:` vhost of this listener's connections, whatever their Open's hostname "
                "(`default`: the top-level groups)", None, show="by the Open's hostname")
    websocket: bool = declare(
        c.boolean, "AMQP over WebSocket (subprotocol `amqp`, RFC 6455) instead of plain AMQP: for browsers "
                   "and JavaScript clients such as rhea; with `tls`, WebSocket over TLS (`wss://`)", False)
    websocket_path: str = declare(
        Check(_ws_path, "string"), "the HTTP path of the WebSocket upgrade; requests for others get 404", "/")
    name: str | None = declare(_name, _NAME_DOC, None, show=_NAME_SHOW.format(what="listener"))


@dataclass(frozen=True)
class ConnectorTls:
    """TLS on a connector: the CA that must sign the peer's certificate, and ours if we present one."""

    ca: str = declare(c.file_path, "PEM file of the CAs that must sign the peer's certificate")
    cert: str | None = declare(c.file_path, "our client certificate, for a peer that requires one", None)
    key: str | None = declare(c.file_path, "the private key of `cert`", None)
    key_password_file: str | None = declare(c.file_path, "file whose first line is the key's password", None)
    verify_peer_name: bool = declare(
        c.boolean, "the peer's certificate must name `peer_name` (a DNS name in its subjectAltName or CN)",
        True)
    peer_name: str | None = declare(c.host, "the name the peer's certificate must carry", None, show="`host`")
    protocols: tuple[str, ...] = declare(
        c.protocols(TLS_PROTOCOLS), "allowed TLS versions", (), show="OpenSSL's defaults")


@dataclass(frozen=True)
class ConnectorSasl:
    """SASL on a connector: the ``sasl:`` mapping, held as :attr:`ConnectorConfig.sasl_mechanisms`."""

    mechanisms: tuple[str, ...] = declare(
        c.mechanisms(CONNECTOR_SASL_MECHANISMS),
        "mechanisms we may use (EXTERNAL is preferred when the peer offers it)")


def _connector_sasl(value: object, path: str) -> tuple[str, ...]:
    return section(ConnectorSasl)(value, path).mechanisms


@dataclass(frozen=True)
class ConnectorConfig:
    """An outgoing connection this node keeps open (retrying with backoff) to a peer node."""

    host: str = declare(c.host, "the peer's inter-router listener: host")
    port: int = declare(c.int_in(1, 65535), "the peer's inter-router listener: port")
    role: str = declare(c.choice(CONNECTOR_ROLES, "role"), "peer nodes of the mesh; `edge` in `uplinks:`",
                        "inter-router")
    cost: int = declare(_cost, "link cost = max of both ends' configured cost", DEFAULT_COST)
    tls: ConnectorTls | None = declare(section(ConnectorTls), "dial with TLS", None)
    sasl_mechanisms: tuple[str, ...] | None = declare(
        Check(_connector_sasl, "map", keys=ConnectorSasl),
        "SASL when dialling; without it `[EXTERNAL, ANONYMOUS]` with `tls.cert`, else `[ANONYMOUS]`",
        None, name="sasl")
    name: str | None = declare(_name, _NAME_DOC, None, show=_NAME_SHOW.format(what="connector"))
    idle_timeout: float | None = declare(
        _seconds, "idle timeout of this connection (heartbeats at half of it; 0: none); an edge's uplinks "
                  "use it to notice a silent interior (docs/EDGE.md)", None, show="`node.idle_timeout`")


@dataclass(frozen=True)
class MetricsConfig:
    """The optional HTTP listener serving Prometheus metrics at `/metrics`."""

    host: str = declare(c.host, "where `/metrics` listens", "127.0.0.1")
    port: int = declare(
        c.int_in(0, 65535), "0 picks a free port (printed on stdout as `listening: role=metrics url=...`)",
        9464)
    addresses: tuple[str, ...] = declare(
        c.list_of(c.string, "addresses"), "addresses that always have per-address series", ())
    top_addresses: int = declare(
        c.int_in(0, 10000), "per-address series also for the N addresses with the most deliveries (so a "
        "scrape stays small whatever the number of addresses)", 20)


@dataclass(frozen=True)
class AddressRule:
    """Distribution for every address under ``prefix`` (normalised: no ``amqp:/`` or leading ``/``)."""

    prefix: str = declare(c.prefix, "addresses under this prefix (`amqp:/` and a leading `/` are dropped)")
    distribution: str = declare(_distribution, "how they are distributed")
    name: str | None = declare(_name, _NAME_DOC, None, show="`address/<prefix>`")


_timer = c.number_at_least(0.001, "seconds")


@dataclass(frozen=True)
class RouterTimers:
    """``router:``: the node's mode and the control-plane timers in seconds (the timers are passed on as
    router.linkstate.LinkStateConfig; `mode` becomes ``NodeConfig.mode``)."""

    mode: str = declare(c.choice(MODES, "mode"), "`interior` runs the link-state protocol; `edge` attaches "
                        "to one interior through `uplinks:` instead (docs/EDGE.md)", "interior")

    hello_interval: float = declare(_timer, "HELLO period", HELLO_INTERVAL)
    hello_max_age: float = declare(
        _timer, "a neighbour silent this long is lost; more than `hello_interval`", HELLO_MAX_AGE)
    ra_interval: float = declare(_timer, "router advertisements while the topology is stable", RA_INTERVAL)
    ra_interval_flux: float = declare(
        _timer, "router advertisements while the topology changes; at most `ra_interval`", RA_INTERVAL_FLUX)
    ls_max_age: float = declare(_timer, "a remote link state not refreshed this long is cleared", LS_MAX_AGE)


#: The ``router:`` timers and their defaults.
ROUTER_TIMERS = {f.name: f.default for f in dataclasses.fields(RouterTimers) if f.name != "mode"}


def _router_timers(value: object, path: str) -> Mapping[str, float]:
    return MappingProxyType(dataclasses.asdict(section(RouterTimers)(value, path)))


def _telemetry(value: object, path: str) -> TelemetryConfig:
    """TelemetryConfig checks its own keys; its ``"KEY: problem"`` becomes a key path and a problem."""
    try:
        return TelemetryConfig.from_mapping(value)
    except ValueError as exc:
        key_name, sep, problem = str(exc).partition(": ")   # "KEY: problem", or a whole-section problem
        if sep and " " not in key_name:
            raise Invalid(join(path, key_name), problem) from None
        raise Invalid(path, str(exc)) from None


def _empty_mapping() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class NodeConfig:
    """A validated node configuration (see docs/CONTRACTS.md for the meaning of each field)."""

    node_id: str = declare(
        c.node_id, "node name, used as the AMQP container-id; letters, digits, `_ . -`", name="id",
        group="node")
    listeners: tuple[ListenerConfig, ...] = declare(
        c.list_of(section(ListenerConfig), "listener", at_least=1), "sockets accepting AMQP connections")
    default_distribution: str = declare(
        _distribution, "for addresses that match no rule", "balanced", name="default", group="addresses")
    address_rules: tuple[AddressRule, ...] = declare(
        c.list_of(section(AddressRule), "rules"), "distribution by address prefix; the longest matching "
                                                  "prefix wins", (), name="rules", group="addresses")
    link_capacity: int = declare(
        c.int_in(1, MAX_LINK_CAPACITY), "credit window per producer link, and the most unsettled deliveries "
                                        "it may have in flight", LINK_CAPACITY, group="node")
    idle_timeout: float = declare(
        _seconds, "idle timeout advertised on every connection; 0 disables it", 16.0, group="node")
    memory_limit: int | None = declare(
        c.int_in(MEMORY_LIMIT_MIN, 2**48),
        "bytes the node may buffer for slow consumers (and paused streamed messages) before producers wait "
        "for credit; nothing is dropped. Absent: a quarter of physical memory, 256 MiB to 2 GiB "
        "(docs/MEMORY-LIMITS.md)", None, group="node")
    log_level: str = declare(_log_level, "log level (stderr, one line per event)", "info", group="node")
    log_levels: Mapping[str, str] = declare(
        c.log_levels(_log_level), "per-module levels, e.g. `{router.node: debug}`", factory=_empty_mapping,
        hash=False, group="node")
    heavy_read: float = declare(
        _timer, "CPU seconds a read of a client connection may take before the connection counts as heavy "
                "(its reads then take turns with the other heavy ones)", 0.001, group="node")
    read_budget: float = declare(
        _timer, "CPU seconds per event-loop turn for client reads while some client is heavy: once spent, "
                "heavy connections and those whose last read was not cheap (over a quarter of heavy_read) "
                "wait for the next turn (peers are read at once, cheap connections too at most 4 KiB a read)",
        0.002, group="node")
    forget_after: float = declare(
        _timer, "seconds after which the node forgets what it remembered per routing key and no longer "
                "uses (annotations sections, anonymous-relay `to` keys: a reply address of a client that "
                "left); one kept in use stays", 60.0, group="node")
    stream_window: int = declare(
        c.int_in(STREAM_WINDOW_MIN, 2**31 - 1),
        "bytes of a streamed message a peer node may have in flight to this node while the peer's data link "
        "is quiet (the rate of a stream is at most this per round trip)", STREAM_WINDOW, group="node")
    stream_window_shared: int = declare(
        c.int_in(STREAM_WINDOW_MIN, 2**31 - 1),
        "the same while other messages cross from that peer too (they wait behind what is in flight of "
        "the stream); raise both for meshes over long round trips", STREAM_WINDOW_SHARED, group="node")
    connectors: tuple[ConnectorConfig, ...] = declare(
        c.list_of(section(ConnectorConfig), "connectors"), "peer nodes this node dials and keeps connected "
                                                           "(retry 0.02 s doubling to 5 s)", ())
    router_timers: Mapping[str, float] = declare(
        Check(_router_timers, "map", keys=RouterTimers), "control-plane timers", factory=_empty_mapping,
        hash=False, name="router")
    uplinks: tuple[ConnectorConfig, ...] = declare(
        c.list_of(section(ConnectorConfig), "uplinks"), "`router.mode: edge`: interiors' `role: edge` "
        "listeners this edge dials (connectors whose `role` is always `edge`), all kept open; the cheapest "
        "open one carries its traffic (docs/EDGE.md)", ())
    telemetry: TelemetryConfig | None = declare(
        Check(_telemetry, "map", keys=TelemetryConfig),
        "write a record per settled delivery and per link or connection event (see Telemetry)", None)
    brokers: tuple[BrokerConfig, ...] = declare(
        c.list_of(section(BrokerConfig), "brokers"),
        "bridge addresses through AMQP 0-9-1 brokers (see Brokers)", ())
    metrics: MetricsConfig | None = declare(
        section(MetricsConfig), "serve Prometheus metrics over HTTP at `/metrics`; `metrics: {}` turns it "
                                "on with the defaults", None)
    policy: PolicyConfig | None = declare(
        POLICY, "who may connect, receive from and send to what, and manage the node (see Security); "
                "absent: only the reserved-address rules", None)
    source: str = "<memory>"
    mode: str = "interior"      # from `router.mode` (not a key of its own)

    def __post_init__(self) -> None:
        # Keep the instance immutable even when built by hand from lists and dicts.
        object.__setattr__(self, "listeners", tuple(self.listeners))
        object.__setattr__(self, "connectors", tuple(self.connectors))
        object.__setattr__(self, "uplinks", tuple(dataclasses.replace(u, role="edge") for u in self.uplinks))
        timers = dict(self.router_timers)
        mode = timers.pop("mode", None)
        if mode is not None:
            object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "router_timers", timers)
        object.__setattr__(self, "brokers", tuple(self.brokers))
        object.__setattr__(self, "router_timers", MappingProxyType({**ROUTER_TIMERS,
                                                                    **self.router_timers}))
        object.__setattr__(self, "address_rules", tuple(self.address_rules))
        object.__setattr__(self, "log_levels", MappingProxyType(dict(self.log_levels)))
