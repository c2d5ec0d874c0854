"""Address normalisation, prefix rules and dynamic addresses."""

import random
import re

import pytest

from router.addressing import AddressRules, address_key, dynamic_address, normalize, tokens


def test_normalize_strips_scheme_and_slashes():
    assert normalize("amqp:/a/b") == "a/b"
    assert normalize("amqp://a/b") == "a/b"
    assert normalize("/a.b") == "a.b"
    assert normalize("a/b") == "a/b"


def test_tokens_split_on_slash_and_dot():
    assert tokens("openstack.org/om/rpc") == ["openstack", "org", "om", "rpc"]


@pytest.mark.parametrize(
    "address, expected",
    [
        ("a.b", "multicast"),
        ("a.b/c", "multicast"),
        ("a.b.c", "multicast"),
        ("a/b", "multicast"),          # `/` and `.` are both token separators
        ("a.bc", "balanced"),          # not a token boundary
        ("a", "balanced"),
        ("a.b.x.y", "closest"),        # the longest matching prefix wins
        ("a.b.x", "closest"),
        ("zzz", "balanced"),
        ("amqp:/a.b.x/1", "closest"),
    ],
)
def test_longest_prefix_match_by_token(address, expected):
    rules = AddressRules([("a.b", "multicast"), ("a/b/x", "closest")], default="balanced")
    assert rules.distribution(address) == expected


def test_default_distribution_is_balanced():
    assert AddressRules([]).distribution("anything") == "balanced"


def test_oslo_rules():
    rules = AddressRules([
        ("openstack.org/om/rpc/multicast", "multicast"),
        ("openstack.org/om/rpc/unicast", "closest"),
        ("openstack.org/om/rpc/anycast", "balanced"),
        ("openstack.org/om/notify", "balanced"),
    ], default="closest")
    assert rules.distribution("openstack.org/om/rpc/multicast/openstack/topic") == "multicast"
    assert rules.distribution("openstack.org/om/rpc/unicast/openstack/topic/server1") == "closest"
    assert rules.distribution("openstack.org/om/rpc/anycast/openstack/topic") == "balanced"
    assert rules.distribution("openstack.org/om/notify/openstack/notifications.info") == "balanced"


def test_unknown_distribution_rejected():
    with pytest.raises(ValueError):
        AddressRules([("a", "roundrobin")])


def test_dynamic_address_form_and_randomness():
    rng = random.Random(7)
    a = dynamic_address("RA", rng)
    b = dynamic_address("RA", rng)
    assert re.fullmatch(r"amqp:/_topo/0/RA/temp\.[A-Za-z0-9+_]{15}", a)
    assert a != b


def test_address_key_local_forms_meet():
    assert address_key("amqp:/_topo/0/A/temp.x", "A") == "_topo/0/A/temp.x"
    assert address_key("_local/temp.x", "A") == "_topo/0/A/temp.x"
    assert address_key("amqp:/q1", "A") == "q1"
