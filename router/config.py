"""Node configuration: the YAML layout, its validation and the frozen dataclasses the node runs from.

The layout is fixed by docs/CONTRACTS.md. Every problem is reported as a :class:`ConfigError` that names
the file, the exact key path (``listeners[1].port``) and what is wrong with the value.

Validation is table driven: each mapping in the file has a table of ``_Key`` entries (checker, required,
default); :func:`_section` applies a table to a mapping. Checkers raise ``_Invalid(key_path, problem)``,
which :func:`parse_config` turns into a ``ConfigError`` carrying the file name.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from router.gateway.config import DIRECTIONS, SEMANTICS, BridgeConfig, BrokerConfig
from router.telemetry.config import TelemetryConfig

DISTRIBUTIONS = ("closest", "balanced", "multicast")
ROLES = ("normal", "inter-router")
CONNECTOR_ROLES = ("inter-router",)
#: Control-plane timers (seconds) and their defaults; the names of router.linkstate.LinkStateConfig.
ROUTER_TIMERS = {"hello_interval": 1.0, "hello_max_age": 3.0, "ra_interval": 30.0,
                 "ra_interval_flux": 4.0, "ls_max_age": 60.0}
MAX_COST = 2**24
LOG_LEVELS = ("debug", "info", "warning", "error")
#: Address namespaces the router uses itself: a first token of these, or anything starting with "$".
RESERVED_FIRST_TOKENS = ("_topo", "_local")
#: Credit is granted through Proton as a C int.
MAX_LINK_CAPACITY = 2**31 - 1

_NODE_ID_RE = re.compile(r"[A-Za-z0-9_.-]+")
_SEPARATORS = re.compile(r"[/.]")
_WILDCARDS = ("*", "#")


# --------------------------------------------------------------------------------------------- API


@dataclass(frozen=True)
class ListenerTls:
    """TLS on a listener: our certificate, and optionally the client certificates we require."""

    cert: str
    key: str
    key_password_file: str | None = None   # first line = the key's password
    ca: str | None = None                  # CAs that sign acceptable client certificates
    require_client_cert: bool = False      # mutual TLS: a client without a certificate signed by ca fails
    protocols: tuple[str, ...] = ()        # e.g. ("TLSv1.2", "TLSv1.3"); () = OpenSSL's defaults


@dataclass(frozen=True)
class ListenerSasl:
    """SASL on a listener: what clients may authenticate with, and where PLAIN users come from."""

    mechanisms: tuple[str, ...] = ("ANONYMOUS",)   # ANONYMOUS, PLAIN, EXTERNAL
    users_file: str | None = None          # PLAIN against this meshrouter users file (scrypt hashes)
    sasldb: str | None = None              # or PLAIN against this Cyrus sasldb (the system's SASL database)
    allow_plain_without_tls: bool = False  # offer PLAIN on connections without TLS too


@dataclass(frozen=True)
class ListenerConfig:
    """One listening socket, with its security settings and per-connection limits (None = no limit)."""

    host: str
    port: int  # 0 = pick a free port
    role: str = "normal"   # "normal" (clients) or "inter-router" (peer nodes)
    cost: int = 1          # inter-router: cost of links made through this listener
    tls: ListenerTls | None = None
    sasl: ListenerSasl = ListenerSasl()
    max_connections: int | None = None     # more are refused (amqp:resource-limit-exceeded)
    max_frame_size: int = 16384            # offered in our Open frame
    max_message_size: int | None = None    # bigger transfers are REJECTED (amqp:link:message-size-exceeded)
    max_sessions: int | None = None        # Proton channel-max + 1
    max_links: int | None = None           # client links per connection; more are refused
    idle_timeout: float | None = None      # seconds; None = node.idle_timeout, 0 = no heartbeats


@dataclass(frozen=True)
class ConnectorTls:
    """TLS on a connector: the CA that must sign the peer's certificate, and ours if we present one."""

    ca: str
    cert: str | None = None
    key: str | None = None
    key_password_file: str | None = None
    verify_peer_name: bool = True          # the peer certificate must name peer_name (default: host)
    peer_name: str | None = None
    protocols: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConnectorConfig:
    """An outgoing connection this node keeps open (retrying with backoff) to a peer node."""

    host: str
    port: int
    role: str = "inter-router"
    cost: int = 1
    tls: ConnectorTls | None = None
    # SASL mechanisms we may use (EXTERNAL preferred); None = EXTERNAL (with a certificate) and ANONYMOUS
    sasl_mechanisms: tuple[str, ...] | None = None


@dataclass(frozen=True)
class MetricsConfig:
    """The optional HTTP listener serving Prometheus metrics at `/metrics`."""

    host: str = "127.0.0.1"
    port: int = 9464       # 0 = pick a free port (printed as "listening: role=metrics url=...")


@dataclass(frozen=True)
class AddressRule:
    """Distribution for every address under ``prefix`` (normalised: no ``amqp:/`` or leading ``/``)."""

    prefix: str
    distribution: str  # "closest" | "balanced" | "multicast"


def _empty_mapping() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class NodeConfig:
    """A validated node configuration (see docs/CONTRACTS.md for the meaning of each field)."""

    node_id: str
    listeners: tuple[ListenerConfig, ...]
    address_rules: tuple[AddressRule, ...] = ()
    default_distribution: str = "balanced"
    link_capacity: int = 250
    idle_timeout: float = 16.0
    log_level: str = "info"
    log_levels: Mapping[str, str] = field(default_factory=_empty_mapping, hash=False)
    connectors: tuple[ConnectorConfig, ...] = ()
    router_timers: Mapping[str, float] = field(default_factory=_empty_mapping, hash=False)
    telemetry: TelemetryConfig | None = None
    brokers: tuple[BrokerConfig, ...] = ()
    metrics: MetricsConfig | None = None
    source: str = "<memory>"

    def __post_init__(self) -> None:
        # Keep the instance immutable even when built by hand from lists and dicts.
        object.__setattr__(self, "listeners", tuple(self.listeners))
        object.__setattr__(self, "connectors", tuple(self.connectors))
        object.__setattr__(self, "brokers", tuple(self.brokers))
        object.__setattr__(self, "router_timers", MappingProxyType({**ROUTER_TIMERS,
                                                                    **self.router_timers}))
        object.__setattr__(self, "address_rules", tuple(self.address_rules))
        object.__setattr__(self, "log_levels", MappingProxyType(dict(self.log_levels)))


class ConfigError(Exception):
    """An invalid or unreadable config; ``str(e) == "FILE: KEY_PATH: PROBLEM"``."""

    def __init__(self, file: str, key_path: str, problem: str) -> None:
        super().__init__(file, key_path, problem)
        self.file = file
        self.key_path = key_path
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.file}: {self.key_path}: {self.problem}"


def load_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read, parse and validate a YAML config file; every failure is a :class:`ConfigError`."""
    source = os.fsdecode(os.fspath(path))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(source, "<file>", f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, "<file>", f"not valid UTF-8 text (byte offset {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, "<file>", _yaml_problem(exc)) from None
    return parse_config(data, source)


def parse_config(data: object, source: str) -> NodeConfig:
    """Validate already-parsed YAML data (``source`` names it in errors) and build a :class:`NodeConfig`."""
    try:
        return _build(data, source)
    except _Invalid as exc:
        raise ConfigError(source, exc.key_path, exc.problem) from None


# ------------------------------------------------------------------------------------- internals


class _Invalid(Exception):
    def __init__(self, key_path: str, problem: str) -> None:
        super().__init__(key_path, problem)
        self.key_path = key_path
        self.problem = problem


Checker = Callable[[Any, str], Any]  # (value, key_path) -> validated value


@dataclass(frozen=True)
class _Key:
    check: Checker
    required: bool = False
    default: Any = None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return f"invalid YAML: {problem}"
    text = f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        text += f" ({context} at line {context_mark.line + 1})"
    return text


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _type_name(value: object) -> str:
    for kind, name in ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "float"),
                       (str, "string"), (Mapping, "mapping"), (list, "list")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _wrong_type(value: object, expected: str, path: str) -> _Invalid:
    got = _type_name(value)
    if isinstance(value, bool | int | float | str):
        got += f" {value!r}"
    return _Invalid(path, f"wrong type: expected {expected}, got {got}")


def _section(value: object, path: str, keys: Mapping[str, _Key]) -> dict[str, Any]:
    """Check a mapping against a key table: unknown keys, missing keys, then each value."""
    if not isinstance(value, Mapping):
        raise _wrong_type(value, "a mapping", path or "<root>")
    for key in value:
        if key not in keys:
            raise _Invalid(_join(path, key), f"unknown key {key!r} (allowed: {', '.join(keys)})")
    out: dict[str, Any] = {}
    for key, spec in keys.items():
        key_path = _join(path, key)
        if key not in value:
            if spec.required:
                raise _Invalid(key_path, "missing required key")
            out[key] = spec.default
        elif value[key] is None and not spec.required:
            out[key] = spec.default  # "key:" with nothing after it means "use the default"
        else:
            out[key] = spec.check(value[key], key_path)
    return out


# ------------------------------------------------------------------------------------ checkers


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _wrong_type(value, "string", path)
    return value


def _int_in(low: int, high: int) -> Checker:
    def check(value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong_type(value, "integer", path)
        if not low <= value <= high:
            raise _Invalid(path, f"out of range: must be between {low} and {high}, got {value}")
        return value

    return check


def _number_at_least(low: float) -> Checker:
    def check(value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _wrong_type(value, "number", path)
        if not math.isfinite(value) or value < low:
            raise _Invalid(path, f"out of range: must be a finite number >= {low:g}, got {value}")
        return float(value)

    return check


def _choice(choices: tuple[str, ...], what: str) -> Checker:
    def check(value: object, path: str) -> str:
        if _string(value, path) not in choices:
            raise _Invalid(path, f"unknown {what} {value!r} (valid: {', '.join(choices)})")
        return value

    return check


_distribution = _choice(DISTRIBUTIONS, "distribution")
_log_level = _choice(LOG_LEVELS, "log level")


def _node_id(value: object, path: str) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise _Invalid(path, f"wrong type: expected string, got {_type_name(value)} {value!r} (quote it)")
    if not _NODE_ID_RE.fullmatch(_string(value, path)):
        raise _Invalid(path, f"invalid node id {value!r}: use only letters, digits, '_', '.' and '-'")
    return value


def _host(value: object, path: str) -> str:
    if not _string(value, path).strip():
        raise _Invalid(path, "must not be empty")
    if any(c.isspace() for c in value):
        raise _Invalid(path, f"invalid host {value!r}: must not contain whitespace")
    return value


def _log_levels(value: object, path: str) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise _wrong_type(value, "a mapping of logger name to log level", path)
    out: dict[str, str] = {}
    for name, level in value.items():
        key_path = f"{path}[{name}]"
        if not isinstance(name, str) or not name.strip():
            raise _Invalid(key_path, f"invalid logger name {name!r}: expected a non-empty string")
        out[name] = _log_level(level, key_path)
    return MappingProxyType(out)


def _prefix(value: object, path: str) -> str:
    """Validate an address prefix and return it normalised (no ``amqp:/``, no leading ``/``)."""
    raw = _string(value, path)
    prefix = raw.removeprefix("amqp:/").removeprefix("/")
    if not prefix:
        raise _Invalid(path, f"bad prefix {raw!r}: must not be empty")
    if any(c.isspace() for c in prefix):
        raise _Invalid(path, f"bad prefix {raw!r}: must not contain whitespace")
    for wildcard in _WILDCARDS:
        if wildcard in prefix:
            problem = f"bad prefix {raw!r}: wildcard {wildcard!r} not supported (prefixes are literal)"
            raise _Invalid(path, problem)
    if prefix[0] in "/." or prefix[-1] in "/.":
        raise _Invalid(path, f"bad prefix {raw!r}: must not start or end with a separator ('/' or '.')")
    tokens = _SEPARATORS.split(prefix)
    if "" in tokens:
        raise _Invalid(path, f"bad prefix {raw!r}: empty token between separators")
    if tokens[0] in RESERVED_FIRST_TOKENS or prefix.startswith("$"):
        reserved = ", ".join((*RESERVED_FIRST_TOKENS, "$..."))
        raise _Invalid(path, f"bad prefix {raw!r}: reserved address space ({reserved})")
    return prefix


def _list_of(item: Checker, what: str, at_least: int = 0) -> Checker:
    def check(value: object, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise _wrong_type(value, f"a list of {what}", path)
        if len(value) < at_least:
            raise _Invalid(path, f"at least {at_least} {what} required")
        return [item(entry, f"{path}[{i}]") for i, entry in enumerate(value)]

    return check


def _telemetry(value: object, path: str) -> TelemetryConfig:
    try:
        return TelemetryConfig.from_mapping(value)
    except ValueError as exc:
        key, sep, problem = str(exc).partition(": ")      # "KEY: problem", or a whole-section problem
        if sep and " " not in key:
            raise _Invalid(_join(path, key), problem) from None
        raise _Invalid(path, str(exc)) from None


def _table(keys: Mapping[str, _Key]) -> Checker:
    return lambda value, path: _section(value, path, keys)


# ------------------------------------------------------------------------- brokers (router.gateway)


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise _wrong_type(value, "boolean", path)
    return value


def _name(value: object, path: str) -> str:
    if not _NODE_ID_RE.fullmatch(_string(value, path)):
        raise _Invalid(path, f"invalid name {value!r}: use only letters, digits, '_', '.' and '-'")
    return value


def _broker_url(value: object, path: str) -> str:
    from urllib.parse import urlsplit

    raw = _string(value, path)
    try:
        u = urlsplit(raw)
        port = u.port
    except ValueError as exc:
        raise _Invalid(path, f"bad URL {raw!r}: {exc}") from None
    if u.scheme not in ("amqp", "amqps"):
        raise _Invalid(path, f"bad URL {raw!r}: scheme must be amqp or amqps")
    if not u.hostname:
        raise _Invalid(path, f"bad URL {raw!r}: no host")
    if port == 0:
        raise _Invalid(path, f"bad URL {raw!r}: port 0")
    return raw


def _exchange_name(value: object, path: str) -> str:
    if not _string(value, path) or len(value.encode()) > 255:
        raise _Invalid(path, "must be a non-empty exchange name of at most 255 bytes")
    return value


def _bridged_address(value: object, path: str) -> str:
    address = _prefix(value, path)
    if len(address.encode()) > 200:     # queue names (address.<node id>) are at most 255 bytes
        size = len(address.encode())
        raise _Invalid(path, f"address too long for a broker queue name ({size} bytes, max 200)")
    return address


_BRIDGE = {
    "address": _Key(_bridged_address, required=True),
    "semantics": _Key(_choice(SEMANTICS, "semantics"), default="anycast"),
    "direction": _Key(_choice(DIRECTIONS, "direction"), default="both"),
    "durable": _Key(_bool, default=True),
    "dead_letter_exchange": _Key(_exchange_name, default=None),
    "ttl": _Key(_number_at_least(0.001), default=None),
    "declare": _Key(_bool, default=True),
}
_BROKER = {
    "name": _Key(_name, required=True),
    "url": _Key(_broker_url, default="amqp://guest:guest@127.0.0.1:5672/%2F"),
    "heartbeat": _Key(_int_in(0, 65535), default=10),
    "confirm_window": _Key(_int_in(1, 65535), default=250),
    "addresses": _Key(lambda v, p: _list_of(_table(_BRIDGE), "addresses", at_least=1)(v, p), required=True),
}


def _brokers(entries: list[dict[str, Any]], rules: list[AddressRule],
             default: str) -> tuple[BrokerConfig, ...]:
    """Build the broker configs; check names and addresses across brokers and against the rules."""
    from router.addressing import AddressRules

    table = AddressRules([(r.prefix, r.distribution) for r in rules], default)
    _first_duplicate([e["name"] for e in entries], lambda i: f"brokers[{i}].name", "broker name")
    seen: dict[str, str] = {}
    out = []
    for i, entry in enumerate(entries):
        bridges = []
        for j, b in enumerate(entry["addresses"]):
            path = f"brokers[{i}].addresses[{j}]"
            if b["address"] in seen:
                raise _Invalid(f"{path}.address", f"duplicate address {b['address']!r} "
                                                  f"(already bridged by {seen[b['address']]})")
            seen[b["address"]] = path
            dist = table.distribution(b["address"])
            if (b["semantics"] == "multicast") != (dist == "multicast"):
                raise _Invalid(f"{path}.semantics",
                               f"semantics {b['semantics']!r} does not match the address's distribution "
                               f"{dist!r} (addresses.rules): multicast needs multicast, anycast and "
                               f"unicast need closest or balanced")
            bridges.append(BridgeConfig(**b))
        out.append(BrokerConfig(name=entry["name"], url=entry["url"], heartbeat=entry["heartbeat"],
                                confirm_window=entry["confirm_window"], addresses=tuple(bridges)))
    return tuple(out)


# ------------------------------------------------- listeners and connectors: TLS, SASL, limits

TLS_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
SASL_MECHANISMS = ("ANONYMOUS", "PLAIN", "EXTERNAL")
CONNECTOR_SASL_MECHANISMS = ("ANONYMOUS", "EXTERNAL")
UINT32_MAX = 2**32 - 1


def _path(value: object, path: str) -> str:
    if not _string(value, path).strip():
        raise _Invalid(path, "must not be empty")
    return value


def _protocols(value: object, path: str) -> tuple[str, ...]:
    names = _list_of(_choice(TLS_PROTOCOLS, "TLS protocol"), "TLS protocols", at_least=1)(value, path)
    _first_duplicate(names, lambda i: f"{path}[{i}]", "protocol")
    return tuple(names)


def _mechanisms(allowed: tuple[str, ...]) -> Checker:
    def check(value: object, path: str) -> tuple[str, ...]:
        def one(v: object, p: str) -> str:
            name = _string(v, p).upper()
            if name not in allowed:
                raise _Invalid(p, f"unknown SASL mechanism {v!r} (valid: {', '.join(allowed)})")
            return name

        names = _list_of(one, "SASL mechanisms", at_least=1)(value, path)
        _first_duplicate(names, lambda i: f"{path}[{i}]", "mechanism")
        return tuple(names)

    return check


def _dataclass_of(cls: type, keys: Mapping[str, _Key]) -> Checker:
    return lambda value, path: cls(**_section(value, path, keys))


_LISTENER_TLS = {
    "cert": _Key(_path, required=True),
    "key": _Key(_path, required=True),
    "key_password_file": _Key(_path, default=None),
    "ca": _Key(_path, default=None),
    "require_client_cert": _Key(_bool, default=False),
    "protocols": _Key(_protocols, default=()),
}
_LISTENER_SASL = {
    "mechanisms": _Key(_mechanisms(SASL_MECHANISMS), default=("ANONYMOUS",)),
    "users_file": _Key(_path, default=None),
    "sasldb": _Key(_path, default=None),
    "allow_plain_without_tls": _Key(_bool, default=False),
}
_CONNECTOR_TLS = {
    "ca": _Key(_path, required=True),
    "cert": _Key(_path, default=None),
    "key": _Key(_path, default=None),
    "key_password_file": _Key(_path, default=None),
    "verify_peer_name": _Key(_bool, default=True),
    "peer_name": _Key(_host, default=None),
    "protocols": _Key(_protocols, default=()),
}
_CONNECTOR_SASL = {
    "mechanisms": _Key(_mechanisms(CONNECTOR_SASL_MECHANISMS), required=True),
}


class _Files:
    """Resolves paths against the config file's directory and checks that the files can be used."""

    def __init__(self, source: str) -> None:
        self.base = os.path.dirname(os.path.abspath(source)) if os.path.isfile(source) else os.getcwd()

    def file(self, value: str | None, path: str) -> str | None:
        if value is None:
            return None
        from router.security.files import readable_file

        full = os.path.normpath(os.path.join(self.base, os.path.expanduser(value)))
        problem = readable_file(full)
        if problem is not None:
            raise _Invalid(path, problem)
        return full

    def cert_key(self, tls: ListenerTls | ConnectorTls, path: str) -> dict[str, Any]:
        """Resolved cert, key, password file and CA of a tls section, checked to load together."""
        from router.security.files import check_ca, check_cert_key, read_password_file

        out = {"cert": self.file(tls.cert, f"{path}.cert"), "key": self.file(tls.key, f"{path}.key"),
               "key_password_file": self.file(tls.key_password_file, f"{path}.key_password_file"),
               "ca": self.file(tls.ca, f"{path}.ca")}
        if out["ca"] is not None and (problem := check_ca(out["ca"])) is not None:
            raise _Invalid(f"{path}.ca", problem)
        if (out["cert"] is None) != (out["key"] is None):
            which = "key" if out["cert"] is None else "cert"
            raise _Invalid(f"{path}.{which}", "needs tls.cert and tls.key together")
        password = None
        if out["key_password_file"] is not None:
            password, problem = read_password_file(out["key_password_file"])
            if problem is not None:
                raise _Invalid(f"{path}.key_password_file", problem)
        if out["cert"] is not None and (bad := check_cert_key(out["cert"], out["key"], password)):
            raise _Invalid(f"{path}.{bad[0]}", bad[1])
        return out


def _secure_listener(lc: ListenerConfig, path: str, files: _Files) -> ListenerConfig:
    """Check a listener's TLS and SASL settings together, with their files; resolve their paths."""
    import dataclasses

    from router.security.users import UsersFileError, load_users

    tls, sasl = lc.tls, lc.sasl
    if tls is not None:
        tls = dataclasses.replace(tls, **files.cert_key(tls, f"{path}.tls"))
        if tls.require_client_cert and tls.ca is None:
            raise _Invalid(f"{path}.tls.require_client_cert", "needs tls.ca (the CAs that sign client "
                                                              "certificates)")
    mechs = sasl.mechanisms
    if "EXTERNAL" in mechs and (tls is None or not tls.require_client_cert):
        raise _Invalid(f"{path}.sasl.mechanisms", "EXTERNAL needs tls with require_client_cert: true")
    if "PLAIN" in mechs:
        if (sasl.users_file is None) == (sasl.sasldb is None):
            key = "mechanisms" if sasl.users_file is None else "sasldb"
            raise _Invalid(f"{path}.sasl.{key}", "PLAIN needs exactly one of sasl.users_file (a meshrouter "
                                                 "users file) or sasl.sasldb (a Cyrus sasldb)")
        if tls is None and not sasl.allow_plain_without_tls and mechs == ("PLAIN",):
            raise _Invalid(f"{path}.sasl.mechanisms", "PLAIN is refused on connections without TLS, so no "
                                                      "client could authenticate here: add tls, or set "
                                                      "sasl.allow_plain_without_tls: true")
    else:
        for key in ("users_file", "sasldb", "allow_plain_without_tls"):
            if getattr(sasl, key):
                raise _Invalid(f"{path}.sasl.{key}", "only used with PLAIN: add PLAIN to sasl.mechanisms")
    users_file = files.file(sasl.users_file, f"{path}.sasl.users_file")
    if users_file is not None:
        try:
            load_users(users_file)
        except UsersFileError as exc:
            raise _Invalid(f"{path}.sasl.users_file", f"{users_file}: {exc}") from None
    sasl = dataclasses.replace(sasl, users_file=users_file,
                               sasldb=files.file(sasl.sasldb, f"{path}.sasl.sasldb"))
    return dataclasses.replace(lc, tls=tls, sasl=sasl)


def _secure_connector(cc: ConnectorConfig, path: str, files: _Files) -> ConnectorConfig:
    """Check a connector's TLS and SASL settings with their files; resolve their paths."""
    import dataclasses

    tls = cc.tls
    if tls is not None:
        tls = dataclasses.replace(tls, **files.cert_key(tls, f"{path}.tls"))
    mechs = cc.sasl_mechanisms or ()
    if "EXTERNAL" in mechs and (tls is None or tls.cert is None):
        raise _Invalid(f"{path}.sasl.mechanisms", "EXTERNAL needs tls.cert and tls.key (our client "
                                                  "certificate)")
    return dataclasses.replace(cc, tls=tls)


def _connector(entry: dict[str, Any]) -> ConnectorConfig:
    sasl = entry.pop("sasl")
    return ConnectorConfig(**entry, sasl_mechanisms=sasl["mechanisms"] if sasl else None)


def _one_sasldb(listeners: list[ListenerConfig]) -> None:
    """Cyrus reads one configuration per process: every listener must use the same sasldb."""
    first: tuple[int, str] | None = None
    for i, lc in enumerate(listeners):
        db = lc.sasl.sasldb
        if db is None:
            continue
        if first is None:
            first = (i, db)
        elif db != first[1]:
            raise _Invalid(f"listeners[{i}].sasl.sasldb",
                           f"only one sasldb per node (Cyrus reads one configuration per process); "
                           f"listeners[{first[0]}] uses {first[1]!r}")


# -------------------------------------------------------------------------------------- tables

_LISTENER = {
    "host": _Key(_host, required=True),
    "port": _Key(_int_in(0, 65535), required=True),
    "role": _Key(_choice(ROLES, "role"), default="normal"),
    "cost": _Key(_int_in(1, MAX_COST), default=1),
    "tls": _Key(_dataclass_of(ListenerTls, _LISTENER_TLS), default=None),
    "sasl": _Key(_dataclass_of(ListenerSasl, _LISTENER_SASL), default=ListenerSasl()),
    "max_connections": _Key(_int_in(1, 2**31 - 1), default=None),
    "max_frame_size": _Key(_int_in(512, UINT32_MAX), default=16384),
    "max_message_size": _Key(_int_in(1, 2**63 - 1), default=None),
    "max_sessions": _Key(_int_in(1, 65536), default=None),
    "max_links": _Key(_int_in(1, 2**31 - 1), default=None),
    "idle_timeout": _Key(_number_at_least(0), default=None),
}
_CONNECTOR = {
    "host": _Key(_host, required=True),
    "port": _Key(_int_in(1, 65535), required=True),
    "role": _Key(_choice(CONNECTOR_ROLES, "role"), default="inter-router"),
    "cost": _Key(_int_in(1, MAX_COST), default=1),
    "tls": _Key(_dataclass_of(ConnectorTls, _CONNECTOR_TLS), default=None),
    "sasl": _Key(_table(_CONNECTOR_SASL), default=None),
}
_METRICS = {
    "host": _Key(_host, default="127.0.0.1"),
    "port": _Key(_int_in(0, 65535), default=9464),
}
_ROUTER = {name: _Key(_number_at_least(0.001), default=default) for name, default in ROUTER_TIMERS.items()}
_RULE = {
    "prefix": _Key(_prefix, required=True),
    "distribution": _Key(_distribution, required=True),
}
_NODE = {
    "id": _Key(_node_id, required=True),
    "link_capacity": _Key(_int_in(1, MAX_LINK_CAPACITY), default=250),
    "idle_timeout": _Key(_number_at_least(0), default=16.0),
    "log_level": _Key(_log_level, default="info"),
    "log_levels": _Key(_log_levels, default=MappingProxyType({})),
}
_ADDRESSES = {
    "default": _Key(_distribution, default="balanced"),
    "rules": _Key(_list_of(_table(_RULE), "rules"), default=[]),
}
_ROOT = {
    "node": _Key(_table(_NODE), required=True),
    "listeners": _Key(_list_of(_table(_LISTENER), "listener", at_least=1), required=True),
    "addresses": _Key(_table(_ADDRESSES), default={"default": "balanced", "rules": []}),
    "connectors": _Key(_list_of(_table(_CONNECTOR), "connectors"), default=[]),
    "router": _Key(_table(_ROUTER), default=dict(ROUTER_TIMERS)),
    "telemetry": _Key(_telemetry, default=None),
    "brokers": _Key(lambda v, p: _list_of(_table(_BROKER), "brokers")(v, p), default=[]),
    "metrics": _Key(_table(_METRICS), default=None),
}


def _first_duplicate(values: list[Any], path: Callable[[int], str], what: str) -> None:
    """Raise for the first value seen twice (None values are skipped)."""
    seen: dict[Any, int] = {}
    for i, v in enumerate(values):
        if v is None:
            continue
        if v in seen:
            raise _Invalid(path(i), f"duplicate {what} {v!r} (already used by {path(seen[v])})")
        seen[v] = i


def _build(data: object, source: str) -> NodeConfig:
    if data is None:
        raise _Invalid("<root>", f"config is empty: expected a mapping with keys {', '.join(_ROOT)}")
    if not isinstance(data, Mapping):
        raise _Invalid("<root>", f"top level must be a mapping with keys {', '.join(_ROOT)}, "
                                 f"got {_type_name(data)}")
    root = _section(data, "", _ROOT)
    node, addresses = root["node"], root["addresses"]
    files = _Files(source)
    listeners = [_secure_listener(ListenerConfig(**entry), f"listeners[{i}]", files)
                 for i, entry in enumerate(root["listeners"])]
    _one_sasldb(listeners)
    rules = [AddressRule(**entry) for entry in addresses["rules"]]
    _first_duplicate([lc.port or None for lc in listeners], lambda i: f"listeners[{i}].port", "port")
    _first_duplicate([r.prefix for r in rules], lambda i: f"addresses.rules[{i}].prefix", "prefix")
    connectors = [_secure_connector(_connector(entry), f"connectors[{i}]", files)
                  for i, entry in enumerate(root["connectors"])]
    _first_duplicate([(c.host, c.port) for c in connectors],
                     lambda i: f"connectors[{i}]", "host and port")
    timers = root["router"]
    hello, max_age = timers["hello_interval"], timers["hello_max_age"]
    if max_age <= hello:
        raise _Invalid("router.hello_max_age",
                       f"must exceed router.hello_interval ({hello:g}), got {max_age:g}")
    ra, flux = timers["ra_interval"], timers["ra_interval_flux"]
    if flux > ra:
        raise _Invalid("router.ra_interval_flux",
                       f"must not exceed router.ra_interval ({ra:g}), got {flux:g}")
    brokers = _brokers(root["brokers"], rules, addresses["default"])
    return NodeConfig(
        node_id=node["id"],
        listeners=tuple(listeners),
        address_rules=tuple(rules),
        default_distribution=addresses["default"],
        link_capacity=node["link_capacity"],
        idle_timeout=node["idle_timeout"],
        log_level=node["log_level"],
        log_levels=node["log_levels"],
        connectors=tuple(connectors),
        router_timers=timers,
        telemetry=root["telemetry"],
        brokers=brokers,
        metrics=MetricsConfig(**root["metrics"]) if root["metrics"] is not None else None,
        source=source,
    )
