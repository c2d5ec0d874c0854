"""router.config: parsing, defaults and every validation error (file, key path and problem)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest

from router.config import (
    AddressRule,
    ConfigError,
    ListenerConfig,
    NodeConfig,
    load_config,
    parse_config,
)

REPO = Path(__file__).resolve().parents[2]

FULL_YAML = """\
node:
  id: node-1.a_b
  link_capacity: 100
  idle_timeout: 2.5
  log_level: debug
  log_levels:
    router.node: warning
listeners:
  - host: 127.0.0.1
    port: 5701
    role: normal
  - host: localhost
    port: 0
  - host: ::1
    port: 0
addresses:
  default: closest
  rules:
    - prefix: amqp:/openstack.org/om/rpc/multicast
      distribution: multicast
    - prefix: /a/b.c
      distribution: balanced
"""

MINIMAL: dict[str, Any] = {"node": {"id": "A"}, "listeners": [{"host": "127.0.0.1", "port": 5700}]}


def with_changes(**sections: Any) -> dict[str, Any]:
    """MINIMAL with top-level sections replaced (None removes the section)."""
    data = copy.deepcopy(MINIMAL)
    for key, value in sections.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def error_for(data: object, source: str = "test.yaml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data, source)
    return info.value


def assert_error(err: ConfigError, key_path: str, *problem_parts: str, file: str = "test.yaml") -> None:
    text = str(err)
    assert err.file == file
    assert err.key_path == key_path, text
    assert text.startswith(f"{file}: {key_path}: "), text
    for part in problem_parts:
        assert part in err.problem, text


# ------------------------------------------------------------------------------------ valid


def test_full_config_parses(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    path.write_text(FULL_YAML)
    config = load_config(path)
    assert config.node_id == "node-1.a_b"
    assert config.link_capacity == 100
    assert config.idle_timeout == 2.5
    assert config.log_level == "debug"
    assert dict(config.log_levels) == {"router.node": "warning"}
    assert config.listeners == (
        ListenerConfig("127.0.0.1", 5701, "normal"),
        ListenerConfig("localhost", 0, "normal"),
        ListenerConfig("::1", 0, "normal"),
    )
    assert config.default_distribution == "closest"
    assert config.address_rules == (
        AddressRule("openstack.org/om/rpc/multicast", "multicast"),
        AddressRule("a/b.c", "balanced"),
    )
    assert config.source == str(path)


def test_defaults() -> None:
    config = parse_config(MINIMAL, "min.yaml")
    assert config == NodeConfig(
        node_id="A",
        listeners=(ListenerConfig("127.0.0.1", 5700, "normal"),),
        address_rules=(),
        default_distribution="balanced",
        link_capacity=250,
        idle_timeout=16.0,
        log_level="info",
        log_levels={},
        source="min.yaml",
    )
    assert isinstance(config.idle_timeout, float)


def test_empty_optional_keys_take_defaults() -> None:
    data = with_changes(addresses={"default": None, "rules": None})
    data["node"].update(log_levels=None, idle_timeout=None)
    config = parse_config(data, "x.yaml")
    assert config.default_distribution == "balanced"
    assert config.address_rules == ()
    assert dict(config.log_levels) == {}
    assert config.idle_timeout == 16.0


def test_int_idle_timeout_becomes_float() -> None:
    data = with_changes()
    data["node"]["idle_timeout"] = 0
    assert parse_config(data, "x").idle_timeout == 0.0


def test_node_config_is_immutable() -> None:
    config = parse_config(with_changes(), "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.node_id = "B"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.log_levels["x"] = "debug"  # type: ignore[index]
    hash(config)


def test_node_config_built_by_hand() -> None:
    config = NodeConfig(node_id="A", listeners=[ListenerConfig("127.0.0.1", 0)])  # type: ignore[arg-type]
    assert config.listeners == (ListenerConfig("127.0.0.1", 0, "normal"),)
    assert config.address_rules == ()
    assert dict(config.log_levels) == {}
    assert config.source == "<memory>"


def test_shipped_demo_config_loads() -> None:
    config = load_config(REPO / "config" / "node.yaml")
    assert config.node_id == "A"
    assert config.listeners == (ListenerConfig("127.0.0.1", 5700, "normal"),)
    assert config.default_distribution == "balanced"
    assert {(r.prefix, r.distribution) for r in config.address_rules} == {
        ("openstack.org/om/rpc/multicast", "multicast"),
        ("openstack.org/om/rpc/unicast", "closest"),
        ("openstack.org/om/rpc/anycast", "balanced"),
        ("openstack.org/om/notify", "balanced"),
        ("multicast", "multicast"),
    }


def test_config_error_str_and_attributes() -> None:
    err = ConfigError("f.yaml", "listeners[1].port", "boom")
    assert str(err) == "f.yaml: listeners[1].port: boom"
    assert (err.file, err.key_path, err.problem) == ("f.yaml", "listeners[1].port", "boom")
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)


# --------------------------------------------------------------------------- file and YAML errors


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_error(info.value, "<file>", "cannot read file", "No such file", file=str(path))


def test_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert_error(info.value, "<file>", "cannot read file", file=str(tmp_path))


def test_yaml_syntax_error_has_line_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("node:\n  id: A\nlisteners: [\n  {host: x, port: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_error(info.value, "<file>", "invalid YAML at line ", file=str(path))


def test_yaml_tab_indent_error(tmp_path: Path) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text("node:\n\tid: A\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_error(info.value, "<file>", "invalid YAML at line 2", file=str(path))


def test_python_tags_are_not_constructed(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text("node: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_error(info.value, "<file>", "invalid YAML at line 1", file=str(path))


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_error(info.value, "<file>", "UTF-8", file=str(path))


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("", ("config is empty",)),
        ("# only a comment\n", ("config is empty",)),
        ("- a\n- b\n", ("top level must be a mapping", "got list")),
        ("just a string\n", ("top level must be a mapping", "got string")),
    ],
)
def test_top_level_not_a_mapping(tmp_path: Path, text: str, parts: tuple[str, ...]) -> None:
    path = tmp_path / "top.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_error(info.value, "<root>", *parts, file=str(path))


# ------------------------------------------------------------------------------ structure errors


def test_unknown_top_level_key() -> None:
    err = error_for(with_changes(extra=1))
    assert_error(err, "extra", "unknown key 'extra'", "allowed: node, listeners, addresses")


def test_unknown_node_key() -> None:
    data = with_changes()
    data["node"]["link_capcity"] = 5
    assert_error(error_for(data), "node.link_capcity", "unknown key 'link_capcity'", "link_capacity")


def test_unknown_listener_key() -> None:
    data = with_changes(listeners=[{"host": "h", "port": 1}, {"host": "h", "port": 2, "prot": 3}])
    assert_error(error_for(data), "listeners[1].prot", "unknown key 'prot'", "allowed: host, port, role")


def test_unknown_rule_key() -> None:
    data = with_changes(addresses={"rules": [{"prefix": "a", "distribution": "closest", "x": 1}]})
    assert_error(error_for(data), "addresses.rules[0].x", "unknown key 'x'", "prefix, distribution")


def test_unknown_addresses_key() -> None:
    data = with_changes(addresses={"defaults": "closest"})
    assert_error(error_for(data), "addresses.defaults", "unknown key", "allowed: default, rules")


@pytest.mark.parametrize("section", ["node", "listeners"])
def test_missing_top_level_section(section: str) -> None:
    assert_error(error_for(with_changes(**{section: None})), section, "missing required key")


def test_missing_node_id() -> None:
    assert_error(error_for(with_changes(node={"link_capacity": 3})), "node.id", "missing required key")


@pytest.mark.parametrize("key", ["host", "port"])
def test_missing_listener_key(key: str) -> None:
    listener = {"host": "h", "port": 1}
    del listener[key]
    data = with_changes(listeners=[{"host": "h", "port": 1}, listener])
    assert_error(error_for(data), f"listeners[1].{key}", "missing required key")


@pytest.mark.parametrize("key", ["prefix", "distribution"])
def test_missing_rule_key(key: str) -> None:
    rule = {"prefix": "a", "distribution": "closest"}
    del rule[key]
    data = with_changes(addresses={"rules": [rule]})
    assert_error(error_for(data), f"addresses.rules[0].{key}", "missing required key")


def test_no_listeners() -> None:
    assert_error(error_for(with_changes(listeners=[])), "listeners", "at least 1 listener")


# ----------------------------------------------------------------------------------- type errors


@pytest.mark.parametrize(
    ("data", "key_path", "parts"),
    [
        (with_changes(node=["A"]), "node", ("expected a mapping", "got list")),
        (with_changes(node="A"), "node", ("expected a mapping", "got string")),
        (with_changes(listeners={"host": "h", "port": 1}), "listeners", ("expected a list", "got mapping")),
        (with_changes(listeners=None) | {"listeners": None}, "listeners", ("expected a list", "got null")),
        (with_changes(listeners=["h:1"]), "listeners[0]", ("expected a mapping", "got string")),
        (with_changes(addresses=["x"]), "addresses", ("expected a mapping", "got list")),
        (with_changes(addresses={"rules": {"a": 1}}), "addresses.rules", ("expected a list", "got mapping")),
        (with_changes(addresses={"rules": ["a"]}), "addresses.rules[0]", ("expected a mapping",)),
        (with_changes(addresses={"default": 3}), "addresses.default", ("expected string", "got integer 3")),
    ],
)
def test_section_wrong_type(data: dict[str, Any], key_path: str, parts: tuple[str, ...]) -> None:
    assert_error(error_for(data), key_path, "wrong type", *parts)


@pytest.mark.parametrize(
    ("key", "value", "parts"),
    [
        ("port", "5700", ("expected integer", "got string '5700'")),
        ("port", True, ("expected integer", "got boolean True")),
        ("port", 5700.0, ("expected integer", "got float 5700.0")),
        ("host", 127, ("expected string", "got integer 127")),
        ("host", None, ("expected string", "got null")),
        ("role", 1, ("expected string", "got integer 1")),
    ],
)
def test_listener_wrong_type(key: str, value: Any, parts: tuple[str, ...]) -> None:
    listener = {"host": "h", "port": 1, key: value}
    data = with_changes(listeners=[{"host": "h", "port": 2}, listener])
    assert_error(error_for(data), f"listeners[1].{key}", "wrong type", *parts)


@pytest.mark.parametrize(
    ("key", "value", "parts"),
    [
        ("link_capacity", True, ("expected integer", "got boolean")),
        ("link_capacity", "10", ("expected integer", "got string")),
        ("link_capacity", 1.5, ("expected integer", "got float")),
        ("idle_timeout", False, ("expected number", "got boolean")),
        ("idle_timeout", "16s", ("expected number", "got string '16s'")),
        ("log_level", 10, ("expected string", "got integer")),
        ("log_levels", ["router.node"], ("expected a mapping", "got list")),
        ("id", None, ("expected string", "got null")),
        ("id", ["A"], ("expected string", "got list")),
        ("id", 7, ("expected string", "got integer 7", "quote it")),
    ],
)
def test_node_wrong_type(key: str, value: Any, parts: tuple[str, ...]) -> None:
    data = with_changes()
    data["node"][key] = value
    assert_error(error_for(data), f"node.{key}", "wrong type", *parts)


def test_rule_wrong_type() -> None:
    data = with_changes(addresses={"rules": [{"prefix": 5, "distribution": "closest"}]})
    assert_error(error_for(data), "addresses.rules[0].prefix", "wrong type", "expected string")


# ---------------------------------------------------------------------------------- value errors


@pytest.mark.parametrize("port", [-1, 65536, 10**9])
def test_port_out_of_range(port: int) -> None:
    err = error_for(with_changes(listeners=[{"host": "h", "port": port}]))
    assert_error(err, "listeners[0].port", "out of range", "between 0 and 65535", str(port))


@pytest.mark.parametrize("port", [0, 65535])
def test_port_bounds_accepted(port: int) -> None:
    assert parse_config(with_changes(listeners=[{"host": "h", "port": port}]), "x").listeners[0].port == port


@pytest.mark.parametrize(
    ("value", "part"), [(0, "between 1 and"), (-5, "between 1 and"), (2**31, "2147483647")]
)
def test_link_capacity_out_of_range(value: int, part: str) -> None:
    data = with_changes()
    data["node"]["link_capacity"] = value
    assert_error(error_for(data), "node.link_capacity", "out of range", part)


@pytest.mark.parametrize("value", [-1, -0.5, float("inf"), float("nan")])
def test_idle_timeout_out_of_range(value: float) -> None:
    data = with_changes()
    data["node"]["idle_timeout"] = value
    assert_error(error_for(data), "node.idle_timeout", "out of range", ">= 0")


@pytest.mark.parametrize("host", ["", "   ", "local host"])
def test_bad_host(host: str) -> None:
    err = error_for(with_changes(listeners=[{"host": host, "port": 1}]))
    assert err.key_path == "listeners[0].host"


def test_duplicate_listener_port() -> None:
    listeners = [{"host": "127.0.0.1", "port": 5700}, {"host": "h", "port": 0}, {"host": "::1", "port": 5700}]
    err = error_for(with_changes(listeners=listeners))
    assert_error(err, "listeners[2].port", "duplicate port 5700", "listeners[0].port")


def test_port_zero_may_repeat() -> None:
    listeners = [{"host": "127.0.0.1", "port": 0}, {"host": "127.0.0.1", "port": 0}]
    assert len(parse_config(with_changes(listeners=listeners), "x").listeners) == 2


def test_unknown_role() -> None:
    err = error_for(with_changes(listeners=[{"host": "h", "port": 1, "role": "route-container"}]))
    assert_error(err, "listeners[0].role", "unknown role 'route-container'",
                 "valid: normal, inter-router, edge")


def test_mesh_keys_parse_with_defaults() -> None:
    cfg = parse_config(with_changes(
        listeners=[{"host": "h", "port": 1}, {"host": "h", "port": 2, "role": "inter-router", "cost": 3}],
        connectors=[{"host": "peer", "port": 5800, "cost": 2}, {"host": "other", "port": 5800}],
        router={"hello_interval": 0.5, "hello_max_age": 1.5}), "t.yaml")
    assert cfg.listeners[1].role == "inter-router" and cfg.listeners[1].cost == 3
    assert [(c.host, c.port, c.role, c.cost) for c in cfg.connectors] == [
        ("peer", 5800, "inter-router", 2), ("other", 5800, "inter-router", 1)]
    assert cfg.router_timers["hello_interval"] == 0.5 and cfg.router_timers["ra_interval"] == 30.0


@pytest.mark.parametrize("changes, path, problem", [
    ({"connectors": [{"host": "a", "port": 1}, {"host": "a", "port": 1}]}, "connectors[1]", "duplicate"),
    ({"connectors": [{"host": "a", "port": 0}]}, "connectors[0].port", "out of range"),
    ({"connectors": [{"host": "a", "port": 1, "cost": 0}]}, "connectors[0].cost", "out of range"),
    ({"connectors": [{"host": "a", "port": 1, "role": "normal"}]}, "connectors[0].role", "unknown role"),
    ({"router": {"hello_interval": 3, "hello_max_age": 3}}, "router.hello_max_age", "must exceed"),
    ({"router": {"ra_interval": 2, "ra_interval_flux": 4}}, "router.ra_interval_flux", "must not exceed"),
    ({"router": {"hello_interval": -1}}, "router.hello_interval", "out of range"),
    ({"router": {"tick": 1}}, "router.tick", "unknown key"),
])
def test_mesh_key_errors(changes, path, problem) -> None:
    assert_error(error_for(with_changes(**changes)), path, problem)


@pytest.mark.parametrize("node_id", ["a/b", "", "has space", "é", "A:1", "A*"])
def test_invalid_node_id(node_id: str) -> None:
    err = error_for(with_changes(node={"id": node_id}))
    assert_error(err, "node.id", f"invalid node id {node_id!r}", "letters, digits")


def test_node_id_at_most_255_characters() -> None:
    assert parse_config(with_changes(node={"id": "A" * 255}), "test.yaml").node_id == "A" * 255
    assert_error(error_for(with_changes(node={"id": "A" * 256})), "node.id", "too long (256 characters")


@pytest.mark.parametrize("level", ["verbose", "INFO", "warn", "critical"])
def test_unknown_log_level(level: str) -> None:
    err = error_for(with_changes(node={"id": "A", "log_level": level}))
    assert_error(err, "node.log_level", f"unknown log level {level!r}", "valid: debug, info, warning, error")


def test_unknown_per_module_log_level() -> None:
    err = error_for(with_changes(node={"id": "A", "log_levels": {"router": "info", "router.node": "loud"}}))
    assert_error(err, "node.log_levels[router.node]", "unknown log level 'loud'")


def test_bad_per_module_logger_name() -> None:
    err = error_for(with_changes(node={"id": "A", "log_levels": {"": "info"}}))
    assert_error(err, "node.log_levels[]", "invalid logger name")


@pytest.mark.parametrize("distribution", ["roundrobin", "Balanced", ""])
def test_unknown_rule_distribution(distribution: str) -> None:
    rules = [{"prefix": "a", "distribution": "closest"}, {"prefix": "b", "distribution": distribution}]
    err = error_for(with_changes(addresses={"rules": rules}))
    assert_error(err, "addresses.rules[1].distribution", f"unknown distribution {distribution!r}",
                 "valid: closest, balanced, multicast")


def test_unknown_default_distribution() -> None:
    err = error_for(with_changes(addresses={"default": "anycast"}))
    assert_error(err, "addresses.default", "unknown distribution 'anycast'", "closest, balanced, multicast")


@pytest.mark.parametrize(
    ("prefix", "part"),
    [
        ("", "must not be empty"),
        ("/", "must not be empty"),
        ("amqp:/", "must not be empty"),
        ("a b", "whitespace"),
        (" a", "whitespace"),
        ("a\t", "whitespace"),
        ("a//b", "empty token"),
        ("a..b", "empty token"),
        ("a./b", "empty token"),
        ("//a", "start or end with a separator"),
        (".a", "start or end with a separator"),
        ("a/", "start or end with a separator"),
        ("a.", "start or end with a separator"),
        ("a/*", "wildcard '*'"),
        ("a.#", "wildcard '#'"),
        ("a*b", "wildcard '*'"),
        ("_topo", "reserved"),
        ("_topo/0/A", "reserved"),
        ("amqp:/_local.x", "reserved"),
        ("/_local", "reserved"),
        ("$management", "reserved"),
        ("$", "reserved"),
    ],
)
def test_bad_prefix(prefix: str, part: str) -> None:
    rules = [{"prefix": "ok", "distribution": "closest"}, {"prefix": prefix, "distribution": "closest"}]
    err = error_for(with_changes(addresses={"rules": rules}))
    assert_error(err, "addresses.rules[1].prefix", "bad prefix", repr(prefix), part)


@pytest.mark.parametrize(
    ("prefix", "normalised"),
    [
        ("amqp:/a/b", "a/b"),
        ("amqp://a/b", "a/b"),
        ("/a.b", "a.b"),
        ("a", "a"),
        ("_topology", "_topology"),
        ("a/$b", "a/$b"),
        ("a-b_c~d", "a-b_c~d"),
    ],
)
def test_prefix_normalised(prefix: str, normalised: str) -> None:
    data = with_changes(addresses={"rules": [{"prefix": prefix, "distribution": "closest"}]})
    config = parse_config(data, "x")
    assert config.address_rules == (AddressRule(normalised, "closest"),)


@pytest.mark.parametrize(("first", "second"), [("a/b", "a/b"), ("a/b", "amqp:/a/b"), ("/x", "x")])
def test_duplicate_prefix(first: str, second: str) -> None:
    rules = [
        {"prefix": first, "distribution": "closest"},
        {"prefix": "other", "distribution": "closest"},
        {"prefix": second, "distribution": "multicast"},
    ]
    err = error_for(with_changes(addresses={"rules": rules}))
    assert_error(err, "addresses.rules[2].prefix", "duplicate prefix", "addresses.rules[0].prefix")


def test_error_names_file_from_load_config(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("node:\n  id: A\nlisteners:\n  - host: h\n    port: 1\n  - host: h\n    port: 99999\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    expected = f"{path}: listeners[1].port: out of range: must be between 0 and 65535, got 99999"
    assert str(info.value) == expected


def test_telemetry_section() -> None:
    cfg = parse_config(with_changes(telemetry={"dir": "/tmp/t", "sample": 0.5}), "t.yaml")
    assert str(cfg.telemetry.dir) == "/tmp/t" and cfg.telemetry.sample == 0.5
    assert cfg.telemetry.rotate_mb == 64
    assert parse_config(with_changes(), "t.yaml").telemetry is None


@pytest.mark.parametrize("section, path, problem", [
    ({"sample": 0.5}, "telemetry.dir", "required"),
    ({"dir": "/tmp/t", "sample": 2}, "telemetry.sample", "from 0 to 1"),
    ({"dir": "/tmp/t", "rotate_mb": 0}, "telemetry.rotate_mb", "> 0"),
    ({"dir": "/tmp/t", "every": 1}, "telemetry.every", "unknown key"),
    ("yes", "telemetry", "mapping"),
])
def test_telemetry_errors(section, path, problem) -> None:
    assert_error(error_for(with_changes(telemetry=section)), path, problem)
