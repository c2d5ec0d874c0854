"""Reading a config file: YAML, every key's own check, then the checks across keys, then a NodeConfig.

Every problem is a :class:`ConfigError` that names the file, the exact key path (``listeners[1].port``)
and what is wrong with the value.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from router.config.brokers import check_brokers
from router.config.checks import first_duplicate
from router.config.keys import Invalid, layout, read, type_name
from router.config.model import ConnectorConfig, ListenerConfig, NodeConfig
from router.config.policy import check_policy
from router.config.secure import Files, one_sasldb, secure_connector, secure_listener
from router.config.yamlfile import read_yaml_file


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
    return load_config_data(path)[1]


def load_config_data(path: str | os.PathLike[str]) -> tuple[object, NodeConfig]:
    """:func:`load_config`, with the YAML data it was built from (what management writes edit)."""
    source = os.fsdecode(os.fspath(path))
    data = read_yaml_file(path, ConfigError)
    return data, parse_config(data, source)


def parse_config(data: object, source: str) -> NodeConfig:
    """Validate already-parsed YAML data (``source`` names it in errors) and build a :class:`NodeConfig`."""
    try:
        return _build(data, source)
    except Invalid as exc:
        raise ConfigError(source, exc.key_path, exc.problem) from None


def _build(data: object, source: str) -> NodeConfig:
    top = ", ".join(layout(NodeConfig))
    if data is None:
        raise Invalid("<root>", f"config is empty: expected a mapping with keys {top}")
    if not isinstance(data, Mapping):
        raise Invalid("<root>", f"top level must be a mapping with keys {top}, got {type_name(data)}")
    config = NodeConfig(**read(NodeConfig, data, ""), source=source)
    files = Files(source)
    listeners = [secure_listener(lc, f"listeners[{i}]", files) for i, lc in enumerate(config.listeners)]
    one_sasldb(listeners)
    first_duplicate([lc.port or None for lc in listeners], lambda i: f"listeners[{i}].port", "port")
    _metrics_port_free(config, listeners)
    first_duplicate([lc.name for lc in listeners], lambda i: f"listeners[{i}].name", "name")
    first_duplicate([r.prefix for r in config.address_rules], lambda i: f"addresses.rules[{i}].prefix",
                    "prefix")
    first_duplicate([r.name for r in config.address_rules], lambda i: f"addresses.rules[{i}].name", "name")
    connectors = [secure_connector(cc, f"connectors[{i}]", files) for i, cc in enumerate(config.connectors)]
    first_duplicate([(c.host, c.port) for c in connectors], lambda i: f"connectors[{i}]", "host and port")
    first_duplicate([c.name for c in connectors], lambda i: f"connectors[{i}].name", "name")
    uplinks = [secure_connector(u, f"uplinks[{i}]", files) for i, u in enumerate(config.uplinks)]
    first_duplicate([(u.host, u.port) for u in uplinks], lambda i: f"uplinks[{i}]", "host and port")
    _check_mode(config, listeners, connectors, uplinks)
    timers = config.router_timers
    hello, max_age = timers["hello_interval"], timers["hello_max_age"]
    if max_age <= hello:
        raise Invalid("router.hello_max_age",
                      f"must exceed router.hello_interval ({hello:g}), got {max_age:g}")
    ra, flux = timers["ra_interval"], timers["ra_interval_flux"]
    if flux > ra:
        raise Invalid("router.ra_interval_flux",
                      f"must not exceed router.ra_interval ({ra:g}), got {flux:g}")
    check_policy(config.policy, listeners)
    check_brokers(config.brokers, [(r.prefix, r.distribution) for r in config.address_rules],
                  config.default_distribution)
    return dataclasses.replace(config, listeners=tuple(listeners), connectors=tuple(connectors),
                               uplinks=tuple(uplinks))


def _check_mode(config: NodeConfig, listeners: list[ListenerConfig], connectors: list[ConnectorConfig],
                uplinks: list[ConnectorConfig]) -> None:
    """An edge has uplinks and no inter-router or edge ports (edges never connect to edges); an interior
    has no uplinks and dials no `role: edge` connector."""
    if config.mode == "edge":
        if not uplinks:
            raise Invalid("uplinks", "router.mode edge needs at least one uplink (an interior's `role: edge` "
                                     "listener)")
        if connectors:
            raise Invalid("connectors", "an edge node joins the mesh through `uplinks:` only; it has no "
                                        "inter-router connectors")
        for i, lc in enumerate(listeners):
            if lc.role != "normal":
                raise Invalid(f"listeners[{i}].role", f"an edge node listens for clients only, not "
                                                      f"{lc.role!r}")
        return
    if uplinks:
        raise Invalid("uplinks", "only a node with router.mode edge has uplinks")
    for i, cc in enumerate(connectors):
        if cc.role == "edge":
            raise Invalid(f"connectors[{i}].role", "an interior dials no edge uplink; put it in the edge's "
                                                   "`uplinks:` with router.mode edge")


def _metrics_port_free(config: NodeConfig, listeners: list[ListenerConfig]) -> None:
    """The metrics listener cannot share a port with an AMQP listener (0: a free port, never shared)."""
    port = config.metrics.port if config.metrics is not None else 0
    for i, lc in enumerate(listeners):
        if port and lc.port == port:
            raise Invalid("metrics.port", f"{port} is also the port of listeners[{i}]")
