"""Who belongs to which group, the vhost of a connection, its management level and connection limits
(router.policy.groups, router.policy.engine), table-driven on parsed configs."""

from __future__ import annotations

import pytest

from router.config import parse_config
from router.policy.engine import Peer, Policy
from router.policy.hosts import HostSet, parse_address
from router.policy.levels import NONE, READ, REDACTED, WRITE

GROUPS = {
    "admins": {"users": ["admin", "CN=ops,O=example"], "management": "write"},
    "om": {"users": ["nova", "neutron"], "remote_hosts": ["10.0.0.0/8", "127.0.0.1"], "management": "none"},
    "om-remote": {"users": ["nova"], "remote_hosts": ["192.168.0.0/16"]},
    "monitoring": {"users": ["anonymous"], "remote_hosts": ["localhost"]},
    "others": {"users": ["*"], "remote_hosts": ["10.1.0.0/16"]},
    "guests": {"remote_hosts": ["172.16.0.0/12"]},
}


def policy(groups=None, default_group="guests", **more) -> Policy:
    section = {"groups": GROUPS if groups is None else groups, "default_group": default_group, **more}
    config = parse_config({"node": {"id": "A"}, "listeners": [{"host": "127.0.0.1", "port": 0}],
                           "policy": section}, "p.yaml")
    return Policy(config.policy)


def peer(user: str | None, host: str, mechanism: str | None = "PLAIN", **kw) -> Peer:
    return Peer(user, mechanism, f"{host}:40000", "127.0.0.1:5672", **kw)


MEMBERSHIP = [
    # user, mechanism, host, group (None: refused)
    ("admin", "PLAIN", "192.0.2.7", "admins"),                   # listed by name, any host
    ("CN=ops,O=example", "EXTERNAL", "192.0.2.7", "admins"),     # an EXTERNAL certificate subject
    ("nova", "PLAIN", "10.2.3.4", "om"),                          # name and host
    ("nova", "PLAIN", "127.0.0.1", "om"),
    ("nova", "PLAIN", "192.168.1.1", "om-remote"),                # same name, other hosts: other group
    ("nova", "PLAIN", "10.1.2.3", "om"),                          # the named group wins over '*'
    ("neutron", "PLAIN", "192.168.1.1", None),                    # named elsewhere only, not '*' hosts
    ("neutron", "PLAIN", "172.16.5.5", "guests"),                 # ... so the default group, by its hosts
    ("whoever", "PLAIN", "10.1.9.9", "others"),                   # '*'
    ("whoever", "PLAIN", "10.2.0.1", None),                       # '*' but not its hosts, default neither
    ("anonymous", "ANONYMOUS", "10.1.9.9", None),                  # '*' is any authenticated user
    ("anyone", None, "127.0.0.1", "monitoring"),                  # no SASL: anonymous
    ("anonymous", "ANONYMOUS", "::1", "monitoring"),              # localhost is both loopbacks
    ("x", "ANONYMOUS", "127.0.0.2", "monitoring"),                # ANONYMOUS whatever user Proton says
    ("anonymous", "ANONYMOUS", "::ffff:127.0.0.1", "monitoring"),  # an IPv4-mapped address is IPv4
    ("anonymous", "ANONYMOUS", "172.20.0.1", "guests"),
    ("anonymous", "ANONYMOUS", "192.0.2.1", None),
]


@pytest.mark.parametrize(("user", "mechanism", "host", "group"), MEMBERSHIP)
def test_membership(user: str, mechanism: str | None, host: str, group: str | None) -> None:
    result = policy().open(peer(user, host, mechanism))
    if group is None:
        assert isinstance(result, str) and "is in no group" in result, result
    else:
        assert not isinstance(result, str), result
        assert result.group.name == group


LEVELS = [
    # group setting or none, user, mechanism, host, level
    ("write", "admin", "PLAIN", "192.0.2.7", WRITE),
    ("none", "nova", "PLAIN", "10.0.0.1", NONE),
    (None, "nova", "PLAIN", "192.168.1.1", READ),                 # authenticated: read by default
    (None, "anonymous", "ANONYMOUS", "127.0.0.1", READ),          # localhost: read by default
    (None, "anonymous", "ANONYMOUS", "172.16.0.9", REDACTED),     # anonymous from elsewhere: redacted
]


@pytest.mark.parametrize(("setting", "user", "mechanism", "host", "level"), LEVELS)
def test_management_level(setting: str | None, user: str, mechanism: str, host: str, level: int) -> None:
    result = policy().open(peer(user, host, mechanism))
    assert result.level == level
    assert (result.group.management is None) == (setting is None)


@pytest.mark.parametrize(("mechanism", "host", "level"), [
    (None, "127.0.0.1", READ), ("PLAIN", "192.0.2.1", READ), ("ANONYMOUS", "192.0.2.1", REDACTED)])
def test_without_a_policy_everyone_is_admitted_with_the_default_level(mechanism, host, level) -> None:
    result = Policy(None).open(peer("u", host, mechanism))
    assert result.group is None and result.level == level and result.sources is None


def test_vhost_by_listener_then_open_hostname_then_default() -> None:
    p = policy(groups={"all": {"users": ["*", "anonymous"]}}, default_group="deny",
               vhosts={"tenant.example": {"groups": {"t": {"users": ["*"]}}, "default_group": "deny"}})
    assert p.open(peer("u", "10.0.0.1")).vhost == "default"
    assert p.open(peer("u", "10.0.0.1", hostname="Tenant.Example")).group.name == "t"
    assert p.open(peer("u", "10.0.0.1", hostname="elsewhere")).vhost == "default"
    forced = p.open(peer("u", "10.0.0.1", hostname="elsewhere", vhost="tenant.example"))
    assert forced.vhost == "tenant.example" and forced.group.name == "t"
    refused = p.open(peer("anonymous", "10.0.0.1", mechanism="ANONYMOUS", vhost="tenant.example"))
    assert isinstance(refused, str) and "vhost 'tenant.example'" in refused
    assert p.open(peer("u", "10.0.0.1", hostname="x", vhost="default")).vhost == "default"


def test_default_group_deny_refuses_and_counts() -> None:
    p = policy(groups={"a": {"users": ["alice"]}}, default_group="deny")
    assert isinstance(p.open(peer("bob", "10.0.0.1")), str)
    s = p.denials.stats[("127.0.0.1:5672", "default", "(none)")]
    assert s.denied_connections == 1 and s.connections == 0


def test_connection_limits_per_user_and_per_host_are_released_when_connections_go() -> None:
    p = policy(groups={"g": {"users": ["*"], "max_connections_per_user": 2, "max_connections_per_host": 3}},
               default_group="g")
    a1, a2 = p.open(peer("alice", "10.0.0.1")), p.open(peer("alice", "10.0.0.2"))
    third = p.open(peer("alice", "10.0.0.3"))
    assert third == ("policy: group 'g' allows 2 connection(s) of user 'alice' at once "
                     "(max_connections_per_user)")
    b1 = p.open(peer("bob", "10.0.0.1"))
    p.open(peer("carol", "10.0.0.1"))
    assert "max_connections_per_host" in p.open(peer("dave", "10.0.0.1"))
    a1.release()
    a1.release()                                # once only
    assert not isinstance(p.open(peer("alice", "10.0.0.3")), str)
    b1.release()
    assert not isinstance(p.open(peer("dave", "10.0.0.1")), str)
    s = p.denials.stats[("127.0.0.1:5672", "default", "g")]
    assert (s.connections, s.opened, s.denied_connections) == (4, 6, 2)
    assert a2.counted


HOSTS = [
    (["10.0.0.0/8"], "10.255.0.1", True),
    (["10.0.0.0/8"], "11.0.0.1", False),
    (["localhost"], "127.8.9.10", True),
    (["localhost"], "::1", True),
    (["::1"], "127.0.0.1", False),
    (["2001:db8::/32"], "2001:db8::5", True),
    (["192.0.2.5"], "192.0.2.5", True),
    ([], "192.0.2.5", False),
    (None, "192.0.2.5", True),
]


@pytest.mark.parametrize(("entries", "host", "admitted"), HOSTS)
def test_remote_hosts(entries, host: str, admitted: bool) -> None:
    assert HostSet(entries).admits(parse_address(host + ":1")) is admitted


@pytest.mark.parametrize(("peer_host", "ip"), [("127.0.0.1:5", "127.0.0.1"), ("::1:5", "::1"),
                                                ("[::1]:5", "::1"), ("gateway:management", None),
                                                ("::ffff:10.0.0.1:7", "10.0.0.1")])
def test_the_ip_of_a_peer(peer_host: str, ip: str | None) -> None:
    found = parse_address(peer_host)
    assert (str(found) if found is not None else None) == ip
