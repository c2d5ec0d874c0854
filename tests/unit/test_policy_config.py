"""`policy:` in a node config and in a topology: every problem names the file, the key and what is wrong
(`meshrouter check-config` exits 2 with that line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from router.config import ConfigError, parse_config
from router.meshctl import TopologyError, load_topology

REPO = Path(__file__).resolve().parents[2]
LISTENER = {"host": "127.0.0.1", "port": 0}


def config(policy: object, listeners: list | None = None) -> dict:
    return {"node": {"id": "A"}, "listeners": listeners or [LISTENER], "policy": policy}


def error(data: dict) -> tuple[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "n.yaml")
    return info.value.key_path, info.value.problem


BAD = [
    # policy, listeners, key path, words of the problem
    ({"groups": []}, None, "policy.groups", "expected a mapping of group name to its settings"),
    ({"groups": {"a b": {}}}, None, "policy.groups.a b", "invalid group name 'a b'"),
    ({"groups": {"deny": {}}}, None, "policy.groups.deny", "'deny' is not a group name"),
    ({"groups": {"g": {"users": "alice"}}}, None, "policy.groups.g.users", "expected a list of user names"),
    ({"groups": {"g": {"users": ["a", "a"]}}}, None, "policy.groups.g.users[1]", "duplicate user 'a'"),
    ({"groups": {"g": {"users": [""]}}}, None, "policy.groups.g.users[0]", "must not be empty"),
    ({"groups": {"g": {"remote_hosts": ["example.com"]}}}, None, "policy.groups.g.remote_hosts[0]",
     "'example.com' is not an IP address, a CIDR range (10.0.0.0/8) or localhost"),
    ({"groups": {"g": {"sources": ["a//b"]}}}, None, "policy.groups.g.sources[0]",
     "bad pattern 'a//b': empty token"),
    ({"groups": {"g": {"targets": ["ok", "a*"]}}}, None, "policy.groups.g.targets[1]",
     "bad pattern 'a*': wildcard '*' must be a whole token"),
    ({"groups": {"g": {"targets": ["$management"]}}}, None, "policy.groups.g.targets[0]",
     "router's own address space"),
    ({"groups": {"g": {"sources": ["q.${user}.#"]}}}, None, "policy.groups.g.sources[0]",
     "${user} must be followed by '/'"),
    ({"groups": {"g": {"management": "admin"}}}, None, "policy.groups.g.management",
     "unknown management level 'admin' (valid: none, redacted, read, write)"),
    ({"groups": {"g": {"max_senders": 0}}}, None, "policy.groups.g.max_senders", "out of range"),
    ({"groups": {"g": {"allow_dynamic_source": "no"}}}, None, "policy.groups.g.allow_dynamic_source",
     "expected boolean"),
    ({"groups": {"g": {}}, "default_group": "guests"}, None, "policy.default_group",
     "unknown group 'guests' (groups: g; or deny)"),
    ({"groups": {"a": {"users": ["alice"]}, "b": {"users": ["bob", "alice"]}}}, None,
     "policy.groups.b.users[1]",
     "user 'alice' is also in group 'a' and their remote hosts overlap (any host)"),
    ({"groups": {"a": {"users": ["*"], "remote_hosts": ["10.0.0.0/8"]},
                 "b": {"users": ["*"], "remote_hosts": ["10.1.0.0/16"]}}}, None,
     "policy.groups.b.users[0]",
     "user '*' is also in group 'a' and their remote hosts overlap (10.1.0.0/16)"),
    ({"groups": {"g": {"max_sessions": 100}}}, [{**LISTENER, "max_sessions": 10}],
     "policy.groups.g.max_sessions",
     "conflicts with listeners[0].max_sessions (10): 100 can never be reached"),
    ({"groups": {"g": {"max_message_size": 5000}}}, [{**LISTENER, "max_message_size": 1000}],
     "policy.groups.g.max_message_size", "conflicts with listeners[0].max_message_size (1000)"),
    ({"groups": {"g": {"max_senders": 50}}}, [{**LISTENER, "max_links": 20}], "policy.groups.g.max_senders",
     "conflicts with listeners[0].max_links (20)"),
    ({"vhosts": {"default": {}}}, None, "policy.vhosts.default", "'default' is the top-level policy"),
    ({"vhosts": {"t.example": {"default_group": "x"}}}, None, "policy.vhosts.t.example.default_group",
     "unknown group 'x' (groups: none; or deny)"),
    ({"groups": {}}, [{**LISTENER, "policy_vhost": "nowhere"}], "listeners[0].policy_vhost",
     "unknown vhost 'nowhere' (vhosts: default)"),
    ({"groups": {}}, [{**LISTENER, "role": "inter-router", "policy_vhost": "default"}],
     "listeners[0].policy_vhost", "only client (normal) listeners have a policy vhost"),
    (None, [{**LISTENER, "policy_vhost": "default"}], "listeners[0].policy_vhost",
     "there is no policy: section"),
]


@pytest.mark.parametrize(("policy", "listeners", "key_path", "problem"), BAD,
                         ids=[f"{case[2]}-{i}" for i, case in enumerate(BAD)])
def test_bad_policy_names_its_key_and_problem(policy, listeners, key_path: str, problem: str) -> None:
    path, text = error(config(policy, listeners))
    assert path == key_path and problem in text, (path, text)


def test_good_policies() -> None:
    ok = {"default_group": "guests", "groups": {
        "a": {"users": ["alice"], "remote_hosts": ["10.0.0.0/8"]},
        "a2": {"users": ["alice"], "remote_hosts": ["192.168.0.0/16"]},        # same user, other hosts
        "guests": {}},
        "vhosts": {"T.Example": {"groups": {"a": {"users": ["alice"]}}}}}   # same user, other vhost
    # max_sessions 20 can be reached on the second listener, which serves the default vhost too
    listeners = [{**LISTENER, "max_sessions": 10}, LISTENER, {**LISTENER, "policy_vhost": "t.example"}]
    groups = {**ok["groups"], "big": {"max_sessions": 20}}
    cfg = parse_config(config({**ok, "groups": groups}, listeners), "n")
    assert set(cfg.policy.all_vhosts()) == {"default", "t.example"}      # hostnames compare in lower case
    assert parse_config(config(None), "n").policy is None


def test_check_config_exits_2_with_file_key_and_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config({"groups": {"g": {"sources": ["a//b"]}}})))
    out = subprocess.run([sys.executable, "-m", "router", "check-config", str(path)], capture_output=True,
                         text=True, cwd=REPO, check=False)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"meshrouter: error: {path}: policy.groups.g.sources[0]: bad pattern "
                                  "'a//b': empty token (a leading or trailing separator, or two in a row)")


def test_a_topology_copies_its_policy_into_every_node_and_names_the_topology_key(tmp_path: Path) -> None:
    topo = {"nodes": {"A": {"client_port": 6101, "inter_router_port": 6201}, "B": {"client_port": 6102}},
            "edges": [{"from": "B", "to": "A"}],
            "policy": {"groups": {"om": {"users": ["*"], "targets": ["openstack.org/om/#"]}}}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(topo))
    t = load_topology(path)
    from router.meshctl.nodeconfig import node_config
    for node_id in ("A", "B"):
        cfg = parse_config(node_config(t, node_id), "gen")
        assert cfg.policy.groups["om"].targets == ("openstack.org/om/#",)
    topo["policy"]["default_group"] = "nobody"
    path.write_text(yaml.safe_dump(topo))
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert (info.value.key_path, info.value.problem) == (
        "policy.default_group", "unknown group 'nobody' (groups: om; or deny)")


def _with_policy(policy: dict) -> dict:
    return {"node": {"id": "A"}, "listeners": [LISTENER], "policy": policy}


def test_the_guides_example_is_a_valid_policy() -> None:
    text = (REPO / "docs" / "SECURITY.md").read_text()
    block = text.split("**A policy.**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = parse_config(_with_policy(yaml.safe_load(block)["policy"]), "docs/SECURITY.md")
    groups = cfg.policy.groups
    assert set(groups) == {"openstack", "admins", "monitoring"}
    assert groups["openstack"].sources == ("openstack.org/om/#",) and groups["admins"].management == "write"
    assert groups["monitoring"].remote_hosts == ("localhost",) and groups["monitoring"].management == "read"


def test_the_commented_policy_of_config_node_yaml_is_valid() -> None:
    lines = (REPO / "config" / "node.yaml").read_text().splitlines()
    start = lines.index("# policy:")
    block = "\n".join(line[2:] for line in lines[start:] if line.startswith("# ") or line == "#")
    cfg = parse_config(_with_policy(yaml.safe_load(block)["policy"]), "config/node.yaml")
    assert set(cfg.policy.groups) == {"openstack", "admins", "monitoring"}
    assert set(cfg.policy.vhosts) == {"tenant-a.example"}
