"""qdrouterd's terms <-> this node's (issue 32), sans-IO: qdmanage bodies -> config entries, vhost policies
<-> ``policy:``, address keys."""

from __future__ import annotations

import pytest

from router.config.policy import policy_section
from router.management.qdr.keys import qdr_key, routing_key
from router.management.qdr.rates import LinkRates
from router.management.qdr.schema import PREFIX, TYPES, get_operations, get_types, resolve
from router.management.qdr.translate import Untranslatable, entry, port
from router.management.qdr.vhosts import VhostError, to_policy, vhost_row


def test_ports_are_numbers_digits_or_service_names():
    assert port(5680) == port("5680") == 5680
    assert port("amqp") == 5672 and port("amqps") == 5671
    with pytest.raises(Untranslatable, match="neither a port number nor a known service name"):
        port("no-such-service-here")


def test_listener_attributes_become_listener_keys():
    made = entry("listener", {"name": "l1", "host": "", "port": "amqps", "role": "normal", "cost": "2",
                              "saslMechanisms": "PLAIN EXTERNAL", "authenticatePeer": True,
                              "maxFrameSize": 65536, "idleTimeoutSeconds": 30,
                              "initialHandshakeTimeoutSeconds": 0, "http": "yes", "policyVhost": "$default",
                              "stripAnnotations": "both", "max_connections": 10})
    assert made == {"name": "l1", "host": "0.0.0.0", "port": 5671, "role": "normal", "cost": 2,
                    "max_frame_size": 65536, "idle_timeout": 30, "handshake_timeout": 0, "websocket": True,
                    "policy_vhost": "default", "max_connections": 10,
                    "sasl": {"mechanisms": ["PLAIN", "EXTERNAL"]}}


def test_authenticate_peer_is_anonymous_left_out():
    # qdrouterd's default: a client need not authenticate, so it may skip SASL (ANONYMOUS here)
    assert entry("listener", {"saslMechanisms": "PLAIN"})["sasl"] == {"mechanisms": ["PLAIN", "ANONYMOUS"]}
    # an UPDATE keeps what the listener requires
    current = {"host": "h", "port": 1, "sasl": {"mechanisms": ["PLAIN"], "users_file": "u"}}
    assert entry("listener", {"saslMechanisms": "PLAIN EXTERNAL"}, current)["sasl"] == {
        "mechanisms": ["PLAIN", "EXTERNAL"], "users_file": "u"}
    relaxed = entry("listener", {"authenticatePeer": False}, current)
    assert relaxed["sasl"]["mechanisms"] == ["PLAIN", "ANONYMOUS"]
    with pytest.raises(Untranslatable, match="authenticatePeer: true needs saslMechanisms other than"):
        entry("listener", {"authenticatePeer": "yes"})


@pytest.mark.parametrize("attrs, words", [
    ({"role": "route-container"}, "role: 'route-container' has no equivalent"),
    ({"stripAnnotations": "no"}, "always stripped"),
    ({"linkCapacity": 10}, "node.link_capacity"),
    ({"messageLoggingComponents": "all"}, "telemetry:"),
    ({"multiTenant": True}, "not prefixed by vhost"),
    ({"requireSsl": True}, "listeners[].tls"),
    ({"failoverUrls": "amqp://x"}, "every node's URL"),
    ({"maxFrameSize": "big"}, "expected an integer"),
    ({"nonsense": 1}, "unknown attribute 'nonsense' of listener"),
])
def test_what_has_no_equivalent_says_what_to_use(attrs, words):
    with pytest.raises(Untranslatable) as info:
        entry("listener", {"host": "h", "port": "1", **attrs})
    assert words in str(info.value)


def test_connectors_and_addresses():
    assert entry("connector", {"host": "h", "port": "5801", "role": "inter-router",
                               "saslMechanisms": "ANONYMOUS", "verifyHostname": True,
                               "allowRedirect": False}) == {
        "host": "h", "port": 5801, "role": "inter-router", "sasl": {"mechanisms": ["ANONYMOUS"]}}
    with pytest.raises(Untranslatable, match="role=inter-router"):
        entry("connector", {"host": "h", "port": "5801"})
    with pytest.raises(Untranslatable, match="ANONYMOUS or EXTERNAL"):
        entry("connector", {"host": "h", "port": "1", "role": "inter-router", "saslUsername": "u"})
    assert entry("router.config.address", {"pattern": "a/b/#", "distribution": "closest", "waypoint": False,
                                           "priority": -1, "ingressPhase": 0}) == {
        "prefix": "a/b", "distribution": "closest"}
    assert entry("router.config.address", {"pattern": "a.b.#"}) == {"prefix": "a.b"}
    for pattern in ("#", "a/*/b", "a/#/b", "a"):
        with pytest.raises(Untranslatable, match="address rules match a prefix"):
            entry("router.config.address", {"pattern": pattern})
    with pytest.raises(Untranslatable, match="no phases"):
        entry("router.config.address", {"prefix": "a", "egressPhase": 1})


def test_address_keys_in_qdrouterd_form():
    for key, qd in (("a/b", "M0a/b"), ("_topo/0/A/temp.x", "Ltemp.x"),
                    ("_topo/0/A/$management", "L$management"),
                    ("_topo/0/B/$management/write", "RB/$management/write")):
        assert qdr_key(key, "A") == qd and routing_key(qd, "A") == key
    assert qdr_key(None, "A") is None and routing_key("X", "A") is None


QD_VHOST = {"hostname": "example.com", "allowUnknownUser": True, "maxMessageSize": 5000,
            "maxConnections": 65535,
            "groups": {"$default": {"remoteHosts": "*", "sources": "*", "targets": "*",
                                    "allowDynamicSource": True, "allowAnonymousSender": True},
                       "admins": {"users": "alice, bob", "remoteHosts": "127.0.0.1, ::1", "maxSenders": 10,
                                  "sourcePattern": "admin/#, ${user}/#", "targets": "admin/q, audit",
                                  "allowWaypointLinks": False, "allowUserIdProxy": True,
                                  "management": "read"}}}


def test_a_vhost_becomes_a_policy_vhost_and_reads_back():
    ours = to_policy(QD_VHOST, None)
    assert ours == {"default_group": "default", "groups": {
        "default": {"remote_hosts": None, "sources": None, "targets": None, "allow_dynamic_source": True,
                    "allow_anonymous_sender": True, "max_message_size": 5000},
        "admins": {"users": ["alice", "bob"], "remote_hosts": ["127.0.0.1", "::1"], "max_senders": 10,
                   "sources": ["admin/#", "${user}/#"], "targets": ["admin/q", "audit"], "management": "read",
                   "allow_dynamic_source": False, "allow_anonymous_sender": False, "max_message_size": 5000}}}
    # as the config check reads it, and back in qdrouterd's form: the same groups
    policy = policy_section({"vhosts": {"example.com": ours}}, "policy")
    row = vhost_row("example.com", policy.vhosts["example.com"])
    assert row["allowUnknownUser"] is True and row["name"] == row["identity"] == "vhost/example.com"
    assert row["groups"]["$default"] == {"remoteHosts": "*", "sources": "*", "targets": "*",
                                         "maxMessageSize": 5000, "allowDynamicSource": True,
                                         "allowAnonymousSender": True}
    assert row["groups"]["admins"]["sourcePattern"] == "admin/#, ${user}/#"
    assert to_policy(row, "default") == ours


def test_qdrouterd_group_defaults_deny_what_they_leave_out():
    ours = to_policy({"hostname": "h", "groups": {"g": {"users": "u"}}}, None)
    assert ours == {"default_group": "deny", "groups": {"g": {
        "users": ["u"], "remote_hosts": [], "sources": [], "targets": [], "allow_dynamic_source": False,
        "allow_anonymous_sender": False}}}


@pytest.mark.parametrize("attrs, words", [
    ({"aliases": "a.example"}, "aliases has no equivalent"),
    ({"maxConnectionsPerUser": 5}, "vhost-wide"),
    ({"groups": {"g": {"sources": "queue*"}}}, "trailing '*' wildcard"),
    ({"groups": {"g": {"maxSessionWindow": 10}}}, "listeners[].max_frame_size and max_sessions"),
    ({"groups": {"g": {"bogus": 1}}}, "unknown setting 'bogus'"),
    ({"groups": {"$default": {}, "default": {}}}, "two groups would be named 'default'"),
    ({"groups": ["g"]}, "groups must be a map"),
    ({"allowUnknownUser": "maybe"}, "expected true or false"),
    ({"color": "blue"}, "unknown attribute 'color' of vhost"),
])
def test_vhost_attributes_without_equivalent(attrs, words):
    with pytest.raises(VhostError) as info:
        to_policy({"hostname": "h", **attrs}, None)
    assert words in str(info.value)


def test_schema_answers():
    assert resolve(PREFIX + "router.link", frozenset()) is TYPES["router.link"]
    assert resolve("router.link", frozenset({"router.link"})) is TYPES["router.link"]
    assert resolve("router.link", frozenset()) is None and resolve(7, frozenset()) is None
    types = get_types()
    assert types[PREFIX + "vhost"] == [PREFIX + "configurationEntity", PREFIX + "entity"]
    assert types[PREFIX + "management"][0] == PREFIX + "org.amqp.management"
    assert get_operations(TYPES["allocator"]) == {PREFIX + "allocator": ["READ"]}
    assert all(t.absent is None or t.operations == ("READ",) for t in TYPES.values())
    assert all({"name", "identity", "type"} <= set(t.attributes) for t in TYPES.values())


def test_settle_rates_from_snapshots_every_five_seconds():
    class Link:
        def __init__(self) -> None:
            self.outcomes = [0, 0, 0, 0]

    now = [100.0]
    rates = LinkRates(clock=lambda: now[0])
    old, young = Link(), Link()
    assert rates.rate(old) == 0                              # nothing sampled yet
    rates.sample(100.0, [old])
    old.outcomes[:2] = [30, 10]                              # 40 accepted or rejected (released: not counted)
    old.outcomes[2] = 99
    now[0] = 104.0
    rates.sample(104.0, [old, young])                        # too soon: no new snapshot
    assert rates.rate(old) == 10 and rates.rate(young) == 0
    now[0] = 105.0
    rates.sample(105.0, [old, young])
    now[0] = 110.0
    assert rates.rate(old) == 4                              # since the snapshot before the latest: 40 / 10 s
