"""Address names: normalisation, prefix rules -> distribution, dynamic (reply) addresses.

Pure functions and small classes: no Proton, no clock. Randomness for dynamic names comes from a
caller-supplied ``random.Random`` so tests can be deterministic.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

CLOSEST = "closest"
BALANCED = "balanced"
MULTICAST = "multicast"
DISTRIBUTIONS = (CLOSEST, BALANCED, MULTICAST)

_TOKEN_SPLIT = re.compile(r"[./]")
_DYNAMIC_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+_"
DYNAMIC_SUFFIX_LEN = 15


def normalize(address: str) -> str:
    """Strip the `amqp:/` scheme (and `amqp://`) and leading slashes: `amqp:/a/b` -> `a/b`."""
    if address.startswith("amqp:"):
        address = address[5:]
    return address.lstrip("/")


def tokens(address: str) -> list[str]:
    """Split a normalised address into tokens on `/` and `.`."""
    return _TOKEN_SPLIT.split(address)


class AddressRules:
    """Longest-prefix match of address tokens to a distribution.

    A rule's prefix matches an address when the prefix's tokens are the first tokens of the address:
    `a.b` matches `a.b`, `a.b/c` and `a.b.c`, but not `a.bc`. The rule with most tokens wins.
    """

    def __init__(self, rules: Iterable[tuple[str, str]], default: str = BALANCED) -> None:
        if default not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {default!r}")
        self.default = default
        self._trie: dict = {}
        for prefix, distribution in rules:
            if distribution not in DISTRIBUTIONS:
                raise ValueError(f"unknown distribution {distribution!r}")
            node = self._trie
            for tok in tokens(normalize(prefix)):
                node = node.setdefault(tok, {})
            node[None] = distribution

    def has_rule_for(self, address: str) -> bool:
        """Whether a rule (not the default) matches `address`."""
        node = self._trie
        for tok in tokens(normalize(address)):
            node = node.get(tok)
            if node is None:
                return False
            if None in node:
                return True
        return False

    def distribution(self, address: str) -> str:
        """The distribution of the most specific rule matching `address`, else the default."""
        found = self.default
        node = self._trie
        for tok in tokens(normalize(address)):
            node = node.get(tok)
            if node is None:
                break
            found = node.get(None, found)
        return found


def topo_prefix(node_id: str) -> str:
    """Normalised prefix of addresses scoped to one node: `_topo/0/<node-id>/`."""
    return f"_topo/0/{node_id}/"


def dynamic_address(node_id: str, rng: random.Random) -> str:
    """A new node-scoped reply address `amqp:/_topo/0/<node-id>/temp.<15 random chars>`."""
    suffix = "".join(rng.choice(_DYNAMIC_ALPHABET) for _ in range(DYNAMIC_SUFFIX_LEN))
    return f"amqp:/{topo_prefix(node_id)}temp.{suffix}"


def address_key(address: str, node_id: str) -> str:
    """The routing-table key for `address` as seen by node `node_id`.

    Node-scoped forms name the same local address: `_topo/0/<self>/X` and `_local/X` both key to
    `_topo/0/<self>/X`, so a reply sent to either reaches a dynamic receiver. Addresses starting with `$`
    (the node's own services, e.g. `$management`) are node-local too: `$X` keys to `_topo/0/<self>/$X`, so
    `_topo/0/<node>/$X` reaches node's service from anywhere in the mesh. Every other address keys to its
    normalised form (addresses scoped to other nodes are resolved by the mesh).
    """
    name = normalize(address)
    if name.startswith("_local/"):
        return topo_prefix(node_id) + name[7:]
    if name.startswith("$"):
        return topo_prefix(node_id) + name
    return name
