"""router.config: the exact text of the errors check-config prints, one case per kind of message.

test_config.py checks that each problem is found at the right key; this file pins the wording byte for
byte (people and scripts match on it), including the order in which an "unknown key" error lists the
allowed keys and which of several problems is reported first.
"""

from __future__ import annotations

from typing import Any

import pytest

from router.config import ConfigError, parse_config

NODE = {"id": "A"}
LISTENER = {"host": "127.0.0.1", "port": 5700}
BRIDGE = {"address": "svc"}
BROKER = {"name": "rabbit", "addresses": [BRIDGE]}


def config(**sections: Any) -> dict[str, Any]:
    """A valid minimal config with top-level sections added or replaced."""
    return {"node": NODE, "listeners": [LISTENER], **sections}


def error(data: object) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "n.yaml")
    return str(info.value)


def bogus(mapping: dict[str, Any]) -> dict[str, Any]:
    return {**mapping, "bogus": 1}


UNKNOWN = [
    (bogus(config()), "bogus",
     "node, listeners, addresses, connectors, router, uplinks, telemetry, brokers, metrics, policy"),
    (config(node=bogus(NODE)), "node.bogus",
     "id, link_capacity, idle_timeout, memory_limit, log_level, log_levels, heavy_read, read_budget, "
     "forget_after, stream_window, stream_window_shared"),
    (config(listeners=[LISTENER, bogus({"host": "h", "port": 0})]), "listeners[1].bogus",
     "host, port, role, cost, tls, sasl, max_connections, backlog, max_frame_size, max_message_size, "
     "max_sessions, max_links, idle_timeout, handshake_timeout, policy_vhost, websocket, websocket_path, "
     "name"),
    (config(listeners=[{**LISTENER, "tls": {"bogus": 1}}]), "listeners[0].tls.bogus",
     "cert, key, key_password_file, ca, require_client_cert, protocols, bind_edge_id"),
    (config(listeners=[{**LISTENER, "sasl": {"bogus": 1}}]), "listeners[0].sasl.bogus",
     "mechanisms, users_file, sasldb, allow_plain_without_tls"),
    (config(addresses={"bogus": 1}), "addresses.bogus", "default, rules"),
    (config(addresses={"rules": [bogus({"prefix": "a", "distribution": "closest"})]}),
     "addresses.rules[0].bogus", "prefix, distribution, name"),
    (config(connectors=[bogus({"host": "h", "port": 1})]), "connectors[0].bogus",
     "host, port, role, cost, tls, sasl, name, idle_timeout"),
    (config(connectors=[{"host": "h", "port": 1, "tls": {"bogus": 1}}]), "connectors[0].tls.bogus",
     "ca, cert, key, key_password_file, verify_peer_name, peer_name, protocols"),
    (config(connectors=[{"host": "h", "port": 1, "sasl": {"bogus": 1}}]), "connectors[0].sasl.bogus",
     "mechanisms"),
    (config(router={"bogus": 1}), "router.bogus",
     "mode, hello_interval, hello_max_age, ra_interval, ra_interval_flux, ls_max_age"),
    (config(brokers=[bogus(BROKER)]), "brokers[0].bogus", "name, url, heartbeat, confirm_window, addresses"),
    (config(brokers=[{**BROKER, "addresses": [bogus(BRIDGE)]}]), "brokers[0].addresses[0].bogus",
     "address, semantics, direction, durable, dead_letter_exchange, ttl, declare"),
    (config(metrics={"bogus": 1}), "metrics.bogus", "host, port, addresses, top_addresses"),
    (config(policy={"bogus": 1}), "policy.bogus", "groups, default_group, vhosts"),
    (config(policy={"groups": {"g": {"bogus": 1}}}), "policy.groups.g.bogus",
     "users, remote_hosts, sources, targets, allow_dynamic_source, allow_anonymous_sender, "
     "max_connections_per_user, max_connections_per_host, max_senders, max_receivers, max_sessions, "
     "max_message_size, management"),
    (config(policy={"vhosts": {"v.example": {"bogus": 1}}}), "policy.vhosts.v.example.bogus",
     "groups, default_group"),
]


@pytest.mark.parametrize("data, path, allowed", UNKNOWN, ids=[case[1] for case in UNKNOWN])
def test_unknown_key_lists_the_allowed_keys_in_order(data: dict[str, Any], path: str, allowed: str) -> None:
    assert error(data) == f"n.yaml: {path}: unknown key 'bogus' (allowed: {allowed})"


MESSAGES = [
    # the whole file
    (None, "<root>: config is empty: expected a mapping with keys node, listeners, addresses, connectors, "
           "router, uplinks, telemetry, brokers, metrics, policy"),
    (["node"], "<root>: top level must be a mapping with keys node, listeners, addresses, connectors, "
               "router, uplinks, telemetry, brokers, metrics, policy, got list"),
    ({"listeners": [LISTENER]}, "node: missing required key"),
    (config(node=None), "node: wrong type: expected a mapping, got null"),
    (config(node={}), "node.id: missing required key"),
    # types and ranges
    (config(node={"id": 7}), "node.id: wrong type: expected string, got integer 7 (quote it)"),
    (config(node={"id": "a/b"}),
     "node.id: invalid node id 'a/b': use only letters, digits, '_', '.' and '-'"),
    (config(node={"id": "A", "link_capacity": 2**31}),
     "node.link_capacity: out of range: must be between 1 and 2147483647, got 2147483648"),
    (config(node={"id": "A", "link_capacity": True}),
     "node.link_capacity: wrong type: expected integer, got boolean True"),
    (config(node={"id": "A", "idle_timeout": "16s"}),
     "node.idle_timeout: wrong type: expected number, got string '16s'"),
    (config(node={"id": "A", "idle_timeout": -0.5}),
     "node.idle_timeout: out of range: must be a finite number >= 0, got -0.5"),
    (config(node={"id": "A", "log_level": "loud"}),
     "node.log_level: unknown log level 'loud' (valid: debug, info, warning, error)"),
    (config(node={"id": "A", "log_levels": ["x"]}),
     "node.log_levels: wrong type: expected a mapping of logger name to log level, got list"),
    (config(node={"id": "A", "log_levels": {"": "info"}}),
     "node.log_levels[]: invalid logger name '': expected a non-empty string"),
    (config(listeners=None), "listeners: wrong type: expected a list of listener, got null"),
    (config(listeners=[]), "listeners: at least 1 listener required"),
    (config(listeners=["h:1"]), "listeners[0]: wrong type: expected a mapping, got string 'h:1'"),
    (config(listeners=[{"host": "h"}]), "listeners[0].port: missing required key"),
    (config(listeners=[{"host": "", "port": 1}]), "listeners[0].host: must not be empty"),
    (config(listeners=[{"host": "a b", "port": 1}]),
     "listeners[0].host: invalid host 'a b': must not contain whitespace"),
    (config(listeners=[{"host": "h", "port": 65536}]),
     "listeners[0].port: out of range: must be between 0 and 65535, got 65536"),
    (config(listeners=[{"host": "h", "port": 1, "role": "route-container"}]),
     "listeners[0].role: unknown role 'route-container' (valid: normal, inter-router, edge)"),
    (config(listeners=[{"host": "h", "port": 1, "max_frame_size": 100}]),
     "listeners[0].max_frame_size: out of range: must be between 512 and 4294967295, got 100"),
    (config(listeners=[{"host": "h", "port": 1, "tls": {"key": "k"}}]),
     "listeners[0].tls.cert: missing required key"),
    (config(listeners=[{"host": "h", "port": 1, "tls": {"cert": "c", "key": "k", "protocols": []}}]),
     "listeners[0].tls.protocols: at least 1 TLS protocols required"),
    (config(listeners=[{"host": "h", "port": 1, "tls": {"cert": "c", "key": "k", "protocols": ["TLSv9"]}}]),
     "listeners[0].tls.protocols[0]: unknown TLS protocol 'TLSv9' (valid: TLSv1, TLSv1.1, TLSv1.2, TLSv1.3)"),
    (config(listeners=[{"host": "h", "port": 1, "sasl": {"mechanisms": ["PLAIN", "plain"]}}]),
     "listeners[0].sasl.mechanisms[1]: duplicate mechanism 'PLAIN' (already used by "
     "listeners[0].sasl.mechanisms[0])"),
    (config(listeners=[{"host": "h", "port": 1, "sasl": {"mechanisms": ["GSSAPI"]}}]),
     "listeners[0].sasl.mechanisms[0]: unknown SASL mechanism 'GSSAPI' (valid: ANONYMOUS, PLAIN, EXTERNAL)"),
    (config(listeners=[{"host": "h", "port": 1, "sasl": {"allow_plain_without_tls": "yes"}}]),
     "listeners[0].sasl.allow_plain_without_tls: wrong type: expected boolean, got string 'yes'"),
    (config(addresses={"default": "anycast"}),
     "addresses.default: unknown distribution 'anycast' (valid: closest, balanced, multicast)"),
    (config(addresses={"rules": {"a": 1}}),
     "addresses.rules: wrong type: expected a list of rules, got mapping"),
    (config(addresses={"rules": [{"prefix": "a//b", "distribution": "closest"}]}),
     "addresses.rules[0].prefix: bad prefix 'a//b': empty token between separators"),
    (config(addresses={"rules": [{"prefix": "a.#", "distribution": "closest"}]}),
     "addresses.rules[0].prefix: bad prefix 'a.#': wildcard '#' not supported (prefixes are literal)"),
    (config(addresses={"rules": [{"prefix": "_topo/x", "distribution": "closest"}]}),
     "addresses.rules[0].prefix: bad prefix '_topo/x': reserved address space (_topo, _local, $...)"),
    (config(connectors=[{"host": "h", "port": 0}]),
     "connectors[0].port: out of range: must be between 1 and 65535, got 0"),
    (config(connectors=[{"host": "h", "port": 1, "cost": 2**24 + 1}]),
     "connectors[0].cost: out of range: must be between 1 and 16777216, got 16777217"),
    (config(connectors=[{"host": "h", "port": 1, "role": "normal"}]),
     "connectors[0].role: unknown role 'normal' (valid: inter-router, edge)"),
    (config(connectors=[{"host": "h", "port": 1, "sasl": {}}]),
     "connectors[0].sasl.mechanisms: missing required key"),
    (config(connectors=[{"host": "h", "port": 1, "sasl": {"mechanisms": ["PLAIN"]}}]),
     "connectors[0].sasl.mechanisms[0]: unknown SASL mechanism 'PLAIN' (valid: ANONYMOUS, EXTERNAL)"),
    (config(router={"hello_interval": 0}),
     "router.hello_interval: out of range: must be a finite number >= 0.001, got 0"),
    (config(node={**NODE, "heavy_read": 0}),
     "node.heavy_read: out of range: must be a finite number >= 0.001, got 0"),
    (config(node={**NODE, "read_budget": "5ms"}),
     "node.read_budget: wrong type: expected number, got string '5ms'"),
    (config(telemetry={"sample": 0.5}), "telemetry.dir: required"),
    (config(telemetry={"dir": "/t", "every": 1}),
     "telemetry.every: unknown key (expected one of dir, rotate_mb, sample)"),
    (config(telemetry={"dir": "/t", "sample": 2}), "telemetry.sample: must be a number from 0 to 1, not 2"),
    (config(telemetry="yes"), "telemetry: must be a mapping with keys dir, rotate_mb, sample"),
    (config(brokers=[{"name": "a b", "addresses": [BRIDGE]}]),
     "brokers[0].name: invalid name 'a b': use only letters, digits, '_', '.' and '-'"),
    (config(brokers=[{"name": "r"}]), "brokers[0].addresses: missing required key"),
    (config(brokers=[{"name": "r", "addresses": []}]), "brokers[0].addresses: at least 1 addresses required"),
    (config(brokers=[{**BROKER, "url": "http://h"}]),
     "brokers[0].url: bad URL 'http://h': scheme must be amqp or amqps"),
    (config(brokers=[{**BROKER, "url": "amqp://h:0"}]), "brokers[0].url: bad URL 'amqp://h:0': port 0"),
    (config(brokers=[{**BROKER, "confirm_window": 0}]),
     "brokers[0].confirm_window: out of range: must be between 1 and 65535, got 0"),
    (config(brokers=[{**BROKER, "addresses": [{"address": "a" * 201}]}]),
     "brokers[0].addresses[0].address: address too long for a broker queue name (201 bytes, max 200)"),
    (config(brokers=[{**BROKER, "addresses": [{**BRIDGE, "semantics": "fanout"}]}]),
     "brokers[0].addresses[0].semantics: unknown semantics 'fanout' (valid: anycast, multicast, unicast)"),
    (config(brokers=[{**BROKER, "addresses": [{**BRIDGE, "dead_letter_exchange": ""}]}]),
     "brokers[0].addresses[0].dead_letter_exchange: must be a non-empty exchange name of at most 255 bytes"),
    (config(brokers=[{**BROKER, "addresses": [{**BRIDGE, "ttl": 0}]}]),
     "brokers[0].addresses[0].ttl: out of range: must be a finite number >= 0.001, got 0"),
    (config(metrics={"port": -1}), "metrics.port: out of range: must be between 0 and 65535, got -1"),
    # across keys, after every key's own check
    (config(listeners=[LISTENER, {"host": "::1", "port": 5700}]),
     "listeners[1].port: duplicate port 5700 (already used by listeners[0].port)"),
    (config(addresses={"rules": [{"prefix": "a", "distribution": "closest"},
                                 {"prefix": "/a", "distribution": "balanced"}]}),
     "addresses.rules[1].prefix: duplicate prefix 'a' (already used by addresses.rules[0].prefix)"),
    (config(connectors=[{"host": "h", "port": 1}, {"host": "h", "port": 1}]),
     "connectors[1]: duplicate host and port ('h', 1) (already used by connectors[0])"),
    (config(router={"hello_interval": 3}),
     "router.hello_max_age: must exceed router.hello_interval (3), got 3"),
    (config(router={"ra_interval": 2}),
     "router.ra_interval_flux: must not exceed router.ra_interval (2), got 4"),
    (config(listeners=[{**LISTENER, "sasl": {"mechanisms": ["EXTERNAL"]}}]),
     "listeners[0].sasl.mechanisms: EXTERNAL needs tls with require_client_cert: true"),
    (config(connectors=[{"host": "h", "port": 1, "sasl": {"mechanisms": ["EXTERNAL"]}}]),
     "connectors[0].sasl.mechanisms: EXTERNAL needs tls.cert and tls.key (our client certificate)"),
    (config(brokers=[BROKER, BROKER]),
     "brokers[1].name: duplicate broker name 'rabbit' (already used by brokers[0].name)"),
    (config(brokers=[{"name": "a", "addresses": [BRIDGE]}, {"name": "b", "addresses": [BRIDGE]}]),
     "brokers[1].addresses[0].address: duplicate address 'svc' (already bridged by brokers[0].addresses[0])"),
    (config(brokers=[{**BROKER, "addresses": [{**BRIDGE, "semantics": "multicast"}]}]),
     "brokers[0].addresses[0].semantics: semantics 'multicast' does not match the address's distribution "
     "'balanced' (addresses.rules): multicast needs multicast, anycast and unicast need closest or balanced"),
    # of several problems: a key's own check before any check across keys, keys in table order
    (config(listeners=[LISTENER, LISTENER], metrics={"port": "x"}),
     "metrics.port: wrong type: expected integer, got string 'x'"),
    (config(node={"id": "a/b", "colour": 1}, listeners=5),
     "node.colour: unknown key 'colour' (allowed: id, link_capacity, idle_timeout, memory_limit, log_level, "
     "log_levels, heavy_read, read_budget, forget_after, stream_window, stream_window_shared)"),
    (config(node={"id": "a/b"}, listeners=5),
     "node.id: invalid node id 'a/b': use only letters, digits, '_', '.' and '-'"),
]


@pytest.mark.parametrize("data, expected", MESSAGES, ids=[case[1].split(":")[0] for case in MESSAGES])
def test_message(data: object, expected: str) -> None:
    assert error(data) == f"n.yaml: {expected}"
