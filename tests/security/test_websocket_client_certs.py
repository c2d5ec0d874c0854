"""Client certificates and SASL EXTERNAL on a WebSocket listener are refused at config check (issue 33,
point 5), naming the file and the key, as `meshrouter check` and a starting node print them (exit 2).

A WebSocket listener's TLS is Python's ``ssl`` (router.adapter.websocket), not Proton's: Proton never sees
the client's certificate, so SASL EXTERNAL could not name the user. Rather than a listener that fails
only when the node starts (as before), the combination is an error in the config itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from router.config import ConfigError, parse_config
from tests.support.nodes import REPO_ROOT


def _config(pki, **tls) -> dict:
    return {"node": {"id": "A"},
            "listeners": [{"host": "127.0.0.1", "port": 0, "websocket": True,
                           "tls": {"cert": pki.server.cert, "key": pki.server.key, "ca": pki.ca, **tls}}]}


def test_require_client_cert_on_a_websocket_listener_is_a_config_error(pki):
    with pytest.raises(ConfigError) as info:
        parse_config(_config(pki, require_client_cert=True), "ws.yaml")
    assert info.value.file == "ws.yaml"
    assert info.value.key_path == "listeners[0].tls.require_client_cert"
    assert "websocket: true" in info.value.problem


def test_external_on_a_websocket_listener_is_refused_too(pki):
    data = _config(pki, require_client_cert=True)
    data["listeners"][0]["sasl"] = {"mechanisms": ["EXTERNAL"]}
    with pytest.raises(ConfigError) as info:
        parse_config(data, "ws.yaml")
    assert info.value.key_path == "listeners[0].tls.require_client_cert"


def test_wss_without_client_certs_is_still_accepted(pki):
    (lc,) = parse_config(_config(pki), "ws.yaml").listeners
    assert lc.websocket and lc.tls is not None and not lc.tls.require_client_cert


def test_the_node_refuses_to_start_with_exit_2_naming_file_and_key(pki, tmp_path):
    path = tmp_path / "ws.yaml"
    path.write_text(yaml.safe_dump(_config(pki, require_client_cert=True)))
    run = subprocess.run([sys.executable, "-m", "router", "run", str(path)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert f"{path}: listeners[0].tls.require_client_cert:" in run.stderr
    assert "Traceback" not in run.stderr
