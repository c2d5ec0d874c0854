"""Node configuration: the YAML layout, its validation and the frozen dataclasses the node runs from.

The layout is fixed by docs/CONTRACTS.md. Each key is declared once, as a field of the model
(:mod:`~router.config.model`, :mod:`~router.config.brokers`): its name, type, default, checker and the
line of docs/CONFIGURATION.md live in that one declaration (:mod:`~router.config.keys`
says how). Every problem is a :class:`ConfigError` naming the file, the key path and what is wrong.

Modules: ``keys`` (declaring and reading keys), ``checks`` (checkers of single values), ``model``,
``brokers`` and ``telemetry`` (the dataclasses), ``secure`` (TLS and SASL keys together, with their
files), ``load`` (file -> NodeConfig, the checks across keys), ``reference`` (the table of
docs/CONFIGURATION.md; ``python -m router.config --markdown`` prints it).

Owns the config model; the gateway's and telemetry's configuration objects are part of it
(router.gateway.config and router.telemetry.config re-export the classes declared here, in ``brokers``
and ``telemetry``; TelemetryConfig checks its own keys). Part of the core layer (docs/ARCHITECTURE.md).
May import: router.defaults, router.addressing (the brokers' check against the address rules),
router.security (files, users). Never imports router.adapter, router.node or the services: the layers
above import this one.
"""

from router.config.brokers import DIRECTIONS, SEMANTICS, BridgeConfig, BrokerConfig
from router.config.checks import RESERVED_FIRST_TOKENS
from router.config.keys import Invalid, wrong_type
from router.config.load import ConfigError, load_config, load_config_data, parse_config
from router.config.model import (
    CONNECTOR_ROLES,
    CONNECTOR_SASL_MECHANISMS,
    DEFAULT_COST,
    DISTRIBUTIONS,
    LOG_LEVELS,
    MAX_COST,
    MAX_LINK_CAPACITY,
    ROLES,
    ROUTER_TIMERS,
    SASL_MECHANISMS,
    TLS_PROTOCOLS,
    UINT32_MAX,
    AddressRule,
    ConnectorConfig,
    ConnectorSasl,
    ConnectorTls,
    ListenerConfig,
    ListenerSasl,
    ListenerTls,
    MetricsConfig,
    NodeConfig,
    RouterTimers,
)

# The names router.meshctl.topology used before they were public.
_Invalid = Invalid
_wrong_type = wrong_type

__all__ = [
    "CONNECTOR_ROLES", "CONNECTOR_SASL_MECHANISMS", "DEFAULT_COST", "DIRECTIONS", "DISTRIBUTIONS",
    "LOG_LEVELS", "MAX_COST", "MAX_LINK_CAPACITY", "RESERVED_FIRST_TOKENS", "ROLES", "ROUTER_TIMERS",
    "SASL_MECHANISMS", "SEMANTICS", "TLS_PROTOCOLS", "UINT32_MAX",
    "AddressRule", "BridgeConfig", "BrokerConfig", "ConfigError", "ConnectorConfig", "ConnectorSasl",
    "ConnectorTls", "Invalid", "ListenerConfig", "ListenerSasl", "ListenerTls", "MetricsConfig",
    "NodeConfig", "RouterTimers", "load_config", "load_config_data", "parse_config", "wrong_type",
]
