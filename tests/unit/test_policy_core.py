"""Attach and relay decisions of the forwarding core with the policy (router.forwarding.core, router.policy),
sans-IO: the reserved-address rules with no policy, and a group's rules with one."""

from __future__ import annotations

import pytest

from router.addressing import AddressRules
from router.config import parse_config
from router.forwarding.core import UNAUTHORIZED, RouterCore
from router.forwarding.decisions import Refusal
from router.forwarding.records import Consumer, Producer
from router.policy.access import TRUSTED
from router.policy.engine import Peer, Policy
from router.policy.levels import READ, REDACTED, WRITE


def core(policy: Policy | None = None) -> RouterCore:
    return RouterCore("A", AddressRules([]), policy=policy)


RESERVED_SOURCES = [
    ("amqp:/_topo/0/A/temp.abcdefghijklmno", "reply address"),
    ("_topo/0/A/temp.abcdefghijklmno", "reply address"),
    ("/_topo/0/A/temp.abcdefghijklmno", "reply address"),
    ("_local/temp.abcdefghijklmno", "reply address"),
    ("_topo/0/B/temp.abcdefghijklmno", "reply address"),           # another node's, too
    ("$management", "management agent"),
    ("_local/$management", "management agent"),
    ("_topo/0/A/$management", "management agent"),
    ("_topo/0/B/$management", "management agent"),
    ("$management/read", "node service"),
    ("_topo/0/A/$management/write", "node service"),
    ("$anything", "node service"),
    ("_topo/0/all/qdrouter", "router's own address space"),
    ("_local/qdhello", "router's own address space"),
    ("_topo/1/x", "router's own address space"),
]


@pytest.mark.parametrize(("source", "why"), RESERVED_SOURCES)
def test_clients_never_consume_reserved_addresses(source: str, why: str) -> None:
    c = core()
    r = c.attach_consumer("h", "conn", source)
    assert isinstance(r, Refusal) and r.condition == UNAUTHORIZED and why in r.description, r
    assert isinstance(c.attach_consumer("h2", "conn", source, access=TRUSTED), Consumer)   # the node's own


def test_the_dynamic_source_is_the_only_way_to_a_reply_address() -> None:
    c = core()
    dyn = c.attach_consumer("d", "conn", None, dynamic=True)
    assert isinstance(dyn, Consumer) and dyn.address.key.startswith("_topo/0/A/temp.")
    theft = c.attach_consumer("t", "conn", dyn.name)
    assert isinstance(theft, Refusal) and theft.condition == UNAUTHORIZED
    assert dyn.address.consumers == [dyn]
    assert isinstance(c.attach_consumer("o", "conn", "ordinary/address"), Consumer)


TARGETS = [
    # target, level, address key of the producer (None: refused)
    ("$management", REDACTED, "_topo/0/A/$management"),
    ("$management", READ, "_topo/0/A/$management/read"),
    ("_local/$management", WRITE, "_topo/0/A/$management/write"),
    ("amqp:/_topo/0/B/$management", READ, "_topo/0/B/$management/read"),
    ("$management/write", WRITE, None),                   # the level addresses cannot be named
    ("_topo/0/B/$management/read", READ, None),
    ("$other", WRITE, None),
    ("_topo/0/B/temp.abcdefghijklmno", REDACTED, "_topo/0/B/temp.abcdefghijklmno"),   # replies: open
    ("svc/x", REDACTED, "svc/x"),
]


@pytest.mark.parametrize(("target", "level", "key"), TARGETS)
def test_senders_to_management_get_the_agent_of_their_level(target: str, level: int, key: str | None) -> None:
    c = core()
    c.set_routes({"B": (1, object())}, {}, 1, dict)
    access = Policy().open(Peer(None, None, "127.0.0.1:1"))
    access.level = level
    p = c.attach_producer("h", "conn", target, access=access)
    if key is None:
        assert isinstance(p, Refusal) and p.condition == UNAUTHORIZED, p
    else:
        assert isinstance(p, Producer) and p.address.key == key and p.name == target


def test_management_none_refuses_agents_by_attach_and_by_relay() -> None:
    c = core()
    access = Policy().open(Peer(None, None, "127.0.0.1:1"))
    access.level = 0
    r = c.attach_producer("h", "conn", "$management", access=access)
    assert isinstance(r, Refusal) and "no management access (management: none)" in r.description
    assert c.policy.relay(access, "_topo/0/B/$management")[0] is None
    assert c.policy.relay(access, "svc/x") == ("svc/x", None)


def group_core(**group) -> tuple[RouterCore, object]:
    config = parse_config({"node": {"id": "A"}, "listeners": [{"host": "127.0.0.1", "port": 0}],
                           "policy": {"groups": {"g": {"users": ["alice"], **group}}}}, "p.yaml")
    c = core(Policy(config.policy))
    access = c.policy.open(Peer("alice", "PLAIN", "10.0.0.1:5"))
    return c, access


def test_sources_targets_and_user_substitution() -> None:
    c, access = group_core(sources=["user/${user}/#"], targets=["svc/#"])
    assert isinstance(c.attach_consumer("a", "conn", "user/alice/in", access=access), Consumer)
    r = c.attach_consumer("b", "conn", "user/bob/in", access=access)
    assert r == Refusal(UNAUTHORIZED, "policy: group 'g' may not receive from 'user/bob/in' (sources)")
    assert isinstance(c.attach_producer("c", "conn", "amqp:/svc/x", access=access), Producer)
    r = c.attach_producer("d", "conn", "other", access=access)
    assert r == Refusal(UNAUTHORIZED, "policy: group 'g' may not send to 'other' (targets)")
    assert access.check_relay
    assert c.policy.relay(access, "svc/y") == ("svc/y", None)
    assert c.policy.relay(access, "other")[1] == "policy: group 'g' may not send to 'other' (targets)"
    assert c.policy.relay(access, "_topo/0/B/temp.abc") == ("_topo/0/B/temp.abc", None)    # replies
    assert access.level == READ and c.policy.relay(access, "_topo/0/A/$management")[0].endswith("/read")
    s = c.policy.denials.stats[("-", "default", "g")]
    assert (s.denied_links, s.denied_messages) == (2, 1)


def test_dynamic_anonymous_and_link_counts() -> None:
    c, access = group_core(allow_dynamic_source=False, allow_anonymous_sender=False, max_receivers=1,
                           max_senders=1)
    dynamic = c.attach_consumer("a", "conn", None, True, access=access)
    assert "allow_dynamic_source: false" in dynamic.description
    assert "allow_anonymous_sender: false" in c.attach_producer("b", "conn", "", access=access).description
    assert isinstance(c.attach_consumer("c", "conn", "q", access=access), Consumer)
    access.link_opened(True)
    assert "(max_receivers)" in c.attach_consumer("d", "conn", "q", access=access).description
    access.link_closed(True)
    assert isinstance(c.attach_consumer("e", "conn", "q", access=access), Consumer)
    assert isinstance(c.attach_producer("f", "conn", "q", access=access), Producer)
    access.link_opened(False)
    assert "(max_senders)" in c.attach_producer("g", "conn", "q", access=access).description


def test_without_a_policy_a_client_may_use_any_ordinary_address() -> None:
    c = core()
    access = c.policy.open(Peer(None, None, "192.0.2.1:5"))
    assert access.sources is None and access.targets is None and not access.check_relay
    assert isinstance(c.attach_consumer("a", "conn", "x/y", access=access), Consumer)
    assert isinstance(c.attach_producer("b", "conn", "", access=access), Producer)
    assert isinstance(c.attach_consumer("c", "conn", None, True, access=access), Consumer)
