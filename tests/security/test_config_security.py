"""Config of listener/connector security and limits: values, defaults, and every error naming its key."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from router.config import (
    ConfigError,
    ConnectorTls,
    ListenerConfig,
    ListenerSasl,
    ListenerTls,
    load_config,
    parse_config,
)
from tests.support.nodes import REPO_ROOT

BASE: dict[str, Any] = {"node": {"id": "A"}, "listeners": [{"host": "127.0.0.1", "port": 0}]}


def config(listener: dict | None = None, connector: dict | None = None, extra_listener: dict | None = None):
    data = copy.deepcopy(BASE)
    data["listeners"][0].update(listener or {})
    if extra_listener is not None:
        data["listeners"].append({"host": "127.0.0.1", "port": 0, **extra_listener})
    if connector is not None:
        data["connectors"] = [{"host": "127.0.0.1", "port": 5801, **connector}]
    return data


def error(data: dict) -> tuple[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "test.yaml")
    assert info.value.file == "test.yaml"
    return info.value.key_path, info.value.problem


def test_defaults_keep_a_plain_listener_as_before():
    (lc,) = parse_config(config(), "t").listeners
    assert lc == ListenerConfig("127.0.0.1", 0)
    assert lc.tls is None and lc.sasl == ListenerSasl(("ANONYMOUS",))
    assert lc.max_frame_size == 16384 and lc.idle_timeout is None
    assert lc.max_message_size is None
    # bounded by default (issue 17): what one connection and one listener can make the node hold
    assert (lc.max_connections, lc.max_sessions, lc.max_links) == (4096, 256, 1000)
    assert lc.handshake_timeout == 10.0


def test_full_listener_and_connector(pki, users_file):
    cfg = parse_config(config(
        {"tls": {"cert": pki.server.cert, "key": pki.encrypted_key, "key_password_file": pki.password_file,
                 "ca": pki.ca, "require_client_cert": True, "protocols": ["TLSv1.2", "TLSv1.3"]},
         "sasl": {"mechanisms": ["plain", "EXTERNAL"], "users_file": str(users_file)},
         "max_connections": 10, "max_frame_size": 65536, "max_message_size": 1 << 20, "max_sessions": 4,
         "max_links": 100, "idle_timeout": 2.5},
        {"tls": {"ca": pki.ca, "cert": pki.node_a.cert, "key": pki.node_a.key, "peer_name": "localhost"},
         "sasl": {"mechanisms": ["EXTERNAL"]}}), "t")
    (lc,) = cfg.listeners
    assert lc.tls == ListenerTls(pki.server.cert, pki.encrypted_key, pki.password_file, pki.ca, True,
                                 ("TLSv1.2", "TLSv1.3"))
    assert lc.sasl == ListenerSasl(("PLAIN", "EXTERNAL"), str(users_file), None, False)
    assert (lc.max_connections, lc.max_frame_size, lc.max_message_size, lc.max_sessions, lc.max_links,
            lc.idle_timeout) == (10, 65536, 1 << 20, 4, 100, 2.5)
    (cc,) = cfg.connectors
    assert cc.tls == ConnectorTls(pki.ca, pki.node_a.cert, pki.node_a.key, None, True, "localhost", ())
    assert cc.sasl_mechanisms == ("EXTERNAL",)


def test_relative_paths_are_relative_to_the_config_file(tmp_path, pki):
    (tmp_path / "certs").mkdir()
    for name in ("server.pem", "server.key"):
        (tmp_path / "certs" / name).write_bytes((pki.dir / name).read_bytes())
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config({"tls": {"cert": "certs/server.pem", "key": "certs/server.key"}})))
    (lc,) = load_config(path).listeners
    assert lc.tls.cert == str(tmp_path / "certs" / "server.pem")


@pytest.mark.parametrize("listener, key, problem", [
    ({"tls": {"cert": "/nonexistent.pem", "key": "/nonexistent.key"}}, "listeners[0].tls.cert",
     "no such file"),
    ({"tls": {"key": "x"}}, "listeners[0].tls.cert", "missing required key"),
    ({"tls": {"cert": "{server.cert}", "key": "{server.key}", "certificate": 1}},
     "listeners[0].tls.certificate", "unknown key"),
    ({"tls": {"cert": "{server.cert}", "key": "{client.key}"}}, "listeners[0].tls.key", "does not match"),
    ({"tls": {"cert": "{server.cert}", "key": "{encrypted_key}"}}, "listeners[0].tls.key",
     "key_password_file"),
    ({"tls": {"cert": "{server.cert}", "key": "{encrypted_key}", "key_password_file": "{server.cert}"}},
     "listeners[0].tls.key", "wrong password in key_password_file"),
    ({"tls": {"cert": "{server.key}", "key": "{server.key}"}}, "listeners[0].tls.cert",
     "not a PEM certificate"),
    ({"tls": {"cert": "{server.cert}", "key": "{server.key}", "ca": "{server.key}"}}, "listeners[0].tls.ca",
     "CA certificate"),
    ({"tls": {"cert": "{server.cert}", "key": "{server.key}", "require_client_cert": True}},
     "listeners[0].tls.require_client_cert", "needs tls.ca"),
    ({"tls": {"cert": "{server.cert}", "key": "{server.key}", "protocols": ["TLSv9"]}},
     "listeners[0].tls.protocols[0]", "unknown TLS protocol"),
    ({"tls": {"cert": "{server.cert}", "key": "{server.key}", "require_client_cert": "yes"}},
     "listeners[0].tls.require_client_cert", "expected boolean"),
    ({"sasl": {"mechanisms": ["ANONYMOUS", "GSSAPI"]}}, "listeners[0].sasl.mechanisms[1]",
     "unknown SASL mechanism"),
    ({"sasl": {"mechanisms": []}}, "listeners[0].sasl.mechanisms", "at least 1"),
    ({"sasl": {"mechanisms": ["PLAIN", "plain"], "users_file": "{users}"}}, "listeners[0].sasl.mechanisms[1]",
     "duplicate mechanism"),
    ({"sasl": {"mechanisms": ["EXTERNAL"]}}, "listeners[0].sasl.mechanisms", "EXTERNAL needs tls"),
    ({"tls": {"cert": "{server.cert}", "key": "{server.key}"}, "sasl": {"mechanisms": ["EXTERNAL"]}},
     "listeners[0].sasl.mechanisms", "require_client_cert"),
    ({"sasl": {"mechanisms": ["PLAIN", "ANONYMOUS"]}}, "listeners[0].sasl.mechanisms", "users_file"),
    ({"sasl": {"mechanisms": ["PLAIN"], "users_file": "{users}", "sasldb": "{users}",
               "allow_plain_without_tls": True}}, "listeners[0].sasl.sasldb", "exactly one"),
    ({"sasl": {"mechanisms": ["PLAIN"], "users_file": "{users}"}}, "listeners[0].sasl.mechanisms",
     "allow_plain_without_tls"),
    ({"sasl": {"users_file": "{users}"}}, "listeners[0].sasl.users_file", "only used with PLAIN"),
    ({"sasl": {"allow_plain_without_tls": True}}, "listeners[0].sasl.allow_plain_without_tls",
     "only used with"),
    ({"sasl": {"mechanisms": ["PLAIN", "ANONYMOUS"], "users_file": "/nonexistent"}},
     "listeners[0].sasl.users_file", "no such file"),
    ({"sasl": {"mechanisms": ["PLAIN", "ANONYMOUS"], "users_file": "{bad_users}"}},
     "listeners[0].sasl.users_file", "line 2: expected USER:HASH"),
    ({"max_frame_size": 100}, "listeners[0].max_frame_size", "out of range"),
    ({"max_sessions": 0}, "listeners[0].max_sessions", "out of range"),
    ({"max_links": "many"}, "listeners[0].max_links", "expected integer"),
    ({"max_message_size": 0}, "listeners[0].max_message_size", "out of range"),
    ({"max_connections": -1}, "listeners[0].max_connections", "out of range"),
    ({"idle_timeout": -1}, "listeners[0].idle_timeout", "out of range"),
])
def test_listener_errors(pki, users_file, tmp_path, listener, key, problem):
    bad_users = tmp_path / "bad-users"
    bad_users.write_text("# users\nalice\n")
    values = {"server.cert": pki.server.cert, "server.key": pki.server.key, "client.key": pki.client.key,
              "encrypted_key": pki.encrypted_key, "users": str(users_file), "bad_users": str(bad_users)}
    text = yaml.safe_dump(listener)
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    got_key, got_problem = error(config(yaml.safe_load(text)))
    assert (got_key, problem in got_problem) == (key, True), got_problem


def test_one_sasldb_per_node(tmp_path):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    a.write_text("")
    b.write_text("")

    def lis(db):
        return {"sasl": {"mechanisms": ["PLAIN", "ANONYMOUS"], "sasldb": str(db)}}
    key, problem = error(config(lis(a), extra_listener=lis(b)))
    assert key == "listeners[1].sasl.sasldb" and "only one sasldb per node" in problem
    parse_config(config(lis(a), extra_listener=lis(a)), "t")            # the same one twice is fine


@pytest.mark.parametrize("connector, key, problem", [
    ({"tls": {"cert": "{node_a.cert}", "key": "{node_a.key}"}}, "connectors[0].tls.ca",
     "missing required key"),
    ({"tls": {"ca": "{ca}", "cert": "{node_a.cert}"}}, "connectors[0].tls.cert", "together"),
    ({"tls": {"ca": "{ca}", "key": "{node_a.key}"}}, "connectors[0].tls.key", "together"),
    ({"tls": {"ca": "{ca}"}, "sasl": {"mechanisms": ["EXTERNAL"]}}, "connectors[0].sasl.mechanisms",
     "EXTERNAL needs tls.cert"),
    ({"sasl": {"mechanisms": ["PLAIN"]}}, "connectors[0].sasl.mechanisms[0]", "unknown SASL mechanism"),
    ({"sasl": {}}, "connectors[0].sasl.mechanisms", "missing required key"),
    ({"tls": {"ca": "{ca}", "peer_name": "a b"}}, "connectors[0].tls.peer_name", "whitespace"),
])
def test_connector_errors(pki, connector, key, problem):
    text = yaml.safe_dump(connector)
    for name, value in {"ca": pki.ca, "node_a.cert": pki.node_a.cert, "node_a.key": pki.node_a.key}.items():
        text = text.replace("{" + name + "}", value)
    got_key, got_problem = error(config(connector=yaml.safe_load(text)))
    assert (got_key, problem in got_problem) == (key, True), got_problem


def _meshrouter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router", *args], capture_output=True, text=True, timeout=30,
                          cwd=REPO_ROOT)


@pytest.mark.parametrize("command", ["run", "check-config"])
def test_bad_security_config_exits_2_naming_the_key(tmp_path: Path, pki, command):
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config({"tls": {"cert": pki.server.cert, "key": pki.client.key}})))
    proc = _meshrouter(command, str(path))
    assert proc.returncode == 2, proc
    assert proc.stderr.strip().splitlines() == [
        f"meshrouter: error: {path}: listeners[0].tls.key: the key does not match the certificate "
        f"{pki.server.cert!r}"], proc.stderr
    assert "Traceback" not in proc.stderr


def test_setting_proton_refuses_at_start_is_a_config_error(tmp_path: Path, pki):
    """A file that changed between check and start: the node stops before binding, naming the key."""
    import asyncio
    import shutil

    from router.node.server import NodeServer

    cert = tmp_path / "server.pem"
    shutil.copy(pki.server.cert, cert)
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config({"tls": {"cert": str(cert), "key": pki.server.key}})))
    cfg = load_config(path)
    cert.write_text("not a certificate any more\n")
    loop = asyncio.new_event_loop()
    try:
        server = NodeServer(cfg, loop)
        with pytest.raises(ConfigError) as info:
            server.start()
        assert server.listeners == []
    finally:
        loop.close()
    assert info.value.file == str(path) and info.value.key_path == "listeners[0].tls.key"
    assert "could not load the certificate" in info.value.problem
