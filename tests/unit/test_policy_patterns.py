"""Address patterns of `sources` / `targets` (router.policy.patterns), table-driven."""

from __future__ import annotations

import re

import pytest

from router.policy.patterns import PatternError, PatternSet, check

MATCHES = [
    # pattern, address, user, matches
    ("a/b", "a/b", None, True),                               # exact
    ("a/b", "amqp:/a/b", None, True),                         # addresses are matched in their normal form
    ("a/b", "/a/b", None, True),
    ("a/b", "a/b/c", None, False),
    ("a/b", "a/bc", None, False),
    ("a.b", "a/b", None, False),                              # separators match themselves
    ("openstack.org/om/#", "openstack.org/om", None, True),   # prefix: the prefix itself ...
    ("openstack.org/om/#", "openstack.org/om/rpc/anycast/x.y", None, True),   # ... and everything under it
    ("openstack.org/om/#", "openstack.org/omx", None, False),  # not a longer token
    ("openstack.org/om/#", "openstack.org/om.x", None, False),  # nor another separator
    ("openstack.org/om/#", "openstack.org", None, False),
    ("#", "anything/at.all", None, True),
    ("#/tail", "tail", None, True),
    ("#/tail", "x/y.z/tail", None, True),
    ("#/tail", "xtail", None, False),
    ("a/#/b", "a/b", None, True),
    ("a/#/b", "a/x/y/b", None, True),
    ("a/#/b", "a/xb", None, False),
    ("metrics/*/cpu", "metrics/n1/cpu", None, True),          # one token
    ("metrics/*/cpu", "metrics/n1/n2/cpu", None, False),
    ("metrics/*/cpu", "metrics/n1.n2/cpu", None, False),      # '.' separates tokens too
    ("metrics/*/cpu", "metrics//cpu", None, False),
    ("q.*", "q.x", None, True),
    ("q.*", "q", None, False),
    ("user/${user}/#", "user/alice/inbox", "alice", True),
    ("user/${user}/#", "user/alice", "alice", True),
    ("user/${user}/#", "user/bob/inbox", "alice", False),
    ("user/${user}/#", "user/alice.b/inbox", "alice", False),  # user alice does not own user alice.b's
    ("user/${user}/#", "user/alice.b/inbox", "alice.b", True),
    ("user/${user}/#", "user/a/b/x", "a/b", False),            # a name with '/' matches no ${user} pattern
    ("user/${user}/#", "user/a/b/x", "a", True),
    ("user/${user}", "user/CN=client1,O=example", "CN=client1,O=example", True),   # EXTERNAL subjects
    ("user/${user}", "user/a.c", "a+c", False),               # the name is literal, not a regex
    ("user/${user}/#", "user/x", None, False),
    ("p-${user}/x", "p-al/x", "al", True),
]


@pytest.mark.parametrize(("pattern", "address", "user", "expected"), MATCHES)
def test_match(pattern: str, address: str, user: str | None, expected: bool) -> None:
    assert PatternSet([pattern]).matches(address, user) is expected


def test_a_set_matches_if_any_pattern_does_and_none_means_any_address() -> None:
    s = PatternSet(["a/#", "b/*"])
    assert s.matches("a/x") and s.matches("b/y") and not s.matches("c") and not s.matches("b/y/z")
    assert PatternSet(None).bind("u") is None and PatternSet(["x", "#"]).bind("u") is None
    assert PatternSet([]).matches("anything") is False


BAD = [
    ("", "must not be empty"),
    ("amqp:/", "must not be empty"),
    ("a b", "whitespace"),
    ("a//b", "empty token"),
    ("a/", "empty token"),
    ("a.", "empty token"),
    ("a*", "wildcard '*' must be a whole token"),
    ("a/#b", "wildcard '#' must be a whole token"),
    ("_topo/0/A/#", "router's own address space"),
    ("_local/x", "router's own address space"),
    ("$management", "router's own address space"),
    ("a/${host}", "unknown variable"),
    ("user.${user}.#", "${user} must be followed by '/'"),
    ("${user}x", "${user} must be followed by '/'"),
    ("${user}${user}", "${user} must be followed by '/'"),
    (3, "expected a string"),
]


@pytest.mark.parametrize(("pattern", "problem"), BAD)
def test_bad_patterns_say_what_is_wrong(pattern: object, problem: str) -> None:
    with pytest.raises(PatternError, match=re.escape(problem)):
        check(pattern)


@pytest.mark.parametrize(("pattern", "normal"),
                         [("amqp:/a/#", "a/#"), ("/a/b", "a/b"), ("${user}/#", "${user}/#")])
def test_patterns_are_kept_in_normal_form(pattern: str, normal: str) -> None:
    assert check(pattern) == normal
