"""Edge mode's configuration keys (`router.mode`, `uplinks:`, listener role `edge`): parsed, and every
inconsistent combination named with its key (docs/EDGE.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from router.config import ConfigError, parse_config

LISTEN = [{"host": "127.0.0.1", "port": 5700}]
UPLINK = {"host": "127.0.0.1", "port": 5900}


def edge(**more):
    return {"node": {"id": "E1"}, "router": {"mode": "edge"}, "listeners": LISTEN, "uplinks": [UPLINK],
            **more}


def test_an_edge_parses_with_its_uplinks_as_edge_connectors():
    cfg = parse_config(edge(uplinks=[UPLINK, {"host": "h2", "port": 5901, "cost": 3}]), "e.yaml")
    assert cfg.mode == "edge"
    assert [(u.host, u.port, u.role, u.cost) for u in cfg.uplinks] == [("127.0.0.1", 5900, "edge", 1),
                                                                       ("h2", 5901, "edge", 3)]
    assert "mode" not in cfg.router_timers and cfg.router_timers["hello_interval"] == 1.0


def test_an_interior_is_the_default_and_takes_edge_listeners():
    listeners = [*LISTEN, {"host": "h", "port": 1, "role": "edge"}]
    cfg = parse_config({"node": {"id": "I"}, "listeners": listeners}, "i.yaml")
    assert cfg.mode == "interior" and cfg.listeners[1].role == "edge" and cfg.uplinks == ()


@pytest.mark.parametrize("data, key_path, problem", [
    (edge(uplinks=[]), "uplinks", "at least one uplink"),
    (edge(connectors=[UPLINK]), "connectors", "through `uplinks:` only"),
    (edge(listeners=[*LISTEN, {"host": "h", "port": 1, "role": "inter-router"}]), "listeners[1].role",
     "clients only"),
    (edge(listeners=[*LISTEN, {"host": "h", "port": 1, "role": "edge"}]), "listeners[1].role",
     "clients only"),
    ({"node": {"id": "I"}, "listeners": LISTEN, "uplinks": [UPLINK]}, "uplinks", "only a node with"),
    ({"node": {"id": "I"}, "listeners": LISTEN, "connectors": [{**UPLINK, "role": "edge"}]},
     "connectors[0].role", "dials no edge uplink"),
    (edge(router={"mode": "spoke"}), "router.mode", "spoke"),
    (edge(uplinks=[UPLINK, UPLINK]), "uplinks[1]", "duplicate"),
    (edge(uplinks=[{**UPLINK, "sasl": {"mechanisms": ["EXTERNAL"]}}]), "uplinks[0].sasl.mechanisms",
     "EXTERNAL needs tls.cert"),
])
def test_inconsistent_edge_settings_are_named(data, key_path, problem):
    with pytest.raises(ConfigError) as info:
        parse_config(data, "e.yaml")
    assert info.value.key_path == key_path and problem in info.value.problem, str(info.value)


def test_check_config_reports_one_line_and_exit_2(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("node: {id: E1}\nrouter: {mode: edge}\nlisteners: [{host: 127.0.0.1, port: 0}]\n")
    r = subprocess.run([sys.executable, "-m", "router", "check-config", str(path)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stderr.strip() == (f"meshrouter: error: {path}: uplinks: router.mode edge "
                                                      "needs at least one uplink (an interior's `role: edge` "
                                                      "listener)")


def test_uplinks_take_their_own_idle_timeout():
    cfg = parse_config(edge(uplinks=[{**UPLINK, "idle_timeout": 2}]), "e.yaml")
    assert cfg.uplinks[0].idle_timeout == 2 and cfg.idle_timeout == 16.0
    with pytest.raises(ConfigError, match=r"uplinks\[0\].idle_timeout"):
        parse_config(edge(uplinks=[{**UPLINK, "idle_timeout": -1}]), "e.yaml")
