"""Address rules: longest prefix match on tokens split by '/' and '.', default distribution.

The distribution an address got is observed from outside: two consumers, one unsettled message.
multicast gives each consumer a copy; closest/balanced give one of them.  The producer's delivery is
settled only after every copy is, so counting copies after settlement is exact.
"""

from __future__ import annotations

import pytest

from tests.support.clients import ACCEPTED, Client
from tests.support.traffic import send_paced


def copies(node, address: str) -> int:
    """How many consumers got a copy of one message sent to ``address`` (2 consumers attached)."""
    c = Client(node.url)
    r1 = c.receiver(address, credit=5)
    r2 = c.receiver(address, credit=5)
    s = c.sender(address)
    s.wait_credit()
    tr = s.send("probe").wait()
    assert tr.state == ACCEPTED, f"{address}: {tr}"
    n = len(r1.received) + len(r2.received)
    c.close()
    return n


PREFIX_RULES = (("a.b", "multicast"),)


@pytest.mark.parametrize(
    "address, expected",
    [
        ("a.b", 2),             # the prefix itself
        ("a.b/c", 2),           # '/' separates tokens
        ("a.b.c", 2),           # '.' separates tokens
        ("a.b/c.d/e", 2),
        ("amqp:/a.b.c", 2),     # leading amqp:/ stripped
        ("/a.b/c", 2),          # leading / stripped
        ("a.bc", 1),            # not a token boundary
        ("a.b2/c", 1),
        ("a", 1),               # shorter than the prefix
        ("x.a.b", 1),           # prefix matches from the start only
        ("a/b", 2),             # same tokens 'a','b': the separators are equivalent
        ("a/b.c", 2),
    ],
)
def test_prefix_matches_whole_tokens(node_factory, address, expected):
    n = node_factory(rules=PREFIX_RULES)
    assert copies(n, address) == expected, f"address {address!r} with rule a.b -> multicast"


LONGEST_RULES = (("a", "multicast"), ("a.b", "balanced"), ("a.b.c", "multicast"))


@pytest.mark.parametrize(
    "address, expected",
    [
        ("a.x", 2),             # only 'a' matches
        ("a.b", 1),             # 'a.b' is longer than 'a'
        ("a.b/x", 1),
        ("a.bc", 2),            # 'a.b' does not match 'a.bc': falls back to 'a'
        ("a.b.c", 2),           # 'a.b.c' is the longest
        ("a.b.c.d", 2),
        ("a.b.cd", 1),
    ],
)
def test_longest_prefix_wins(node_factory, address, expected):
    n = node_factory(rules=LONGEST_RULES)
    assert copies(n, address) == expected, f"address {address!r} with rules {LONGEST_RULES}"


def test_default_node_rules(node):
    assert copies(node, "multicast/x") == 2
    assert copies(node, "multicast.y") == 2
    assert copies(node, "closest/x") == 1
    assert copies(node, "balanced/x") == 1
    assert copies(node, "unmatched/x") == 1


def test_configured_default_distribution_applies_to_unmatched(node_factory):
    n = node_factory(rules=(("solo", "closest"),), default_distribution="multicast")
    assert copies(n, "anything/else") == 2
    assert copies(n, "solo/x") == 1


def test_default_distribution_is_balanced(node):
    """An address no rule matches is balanced: a consumer holding its deliveries unsettled gets
    (almost) nothing while another consumer settles at once (closest would alternate 5/5)."""
    c = Client(node.url)
    slow = c.receiver("no-rule/balanced-check", credit=20, auto_accept=False)
    fast = c.receiver("no-rule/balanced-check", credit=20)
    s = c.sender("no-rule/balanced-check")
    send_paced(s, [slow, fast], 10)
    assert len(slow.received) + len(fast.received) == 10
    assert len(fast.received) >= 8, (len(slow.received), len(fast.received))


def test_closest_rule_alternates_where_default_balances(node):
    """Counter-check for the test above: the same pattern on a 'closest' address alternates."""
    c = Client(node.url)
    slow = c.receiver("closest/rr-check", credit=20, auto_accept=False)
    fast = c.receiver("closest/rr-check", credit=20)
    s = c.sender("closest/rr-check")
    send_paced(s, [slow, fast], 10)
    assert (len(slow.received), len(fast.received)) == (5, 5)
