"""Address patterns of `sources` and `targets`: exact, prefix and wildcard, with ``${user}``.

A pattern is matched against the whole address in its normal form (no ``amqp:/``, no leading ``/``).
Tokens are separated by ``/`` or ``.``; text other than the wildcards matches itself, separators
included (``a.b`` does not match ``a/b``):

* ``openstack.org/om/rpc/anycast/x`` exact;
* ``openstack.org/om/#``: ``#`` is zero or more tokens, so this is the prefix ``openstack.org/om`` and
  everything under it (``openstack.org/om``, ``openstack.org/om/rpc/...``), not ``openstack.org/omx``;
* ``metrics/*/cpu``: ``*`` is exactly one token;
* ``user/${user}/#``: ``${user}`` is the connection's user name, so each user owns its own subtree.

Rules a pattern must follow (``check`` says which one it breaks): not empty, no whitespace, no empty
token (``a//b``, a leading or trailing separator), ``*`` and ``#`` only as whole tokens, ``${user}``
the only variable and followed by ``/`` or the end (with ``user.${user}.#`` user ``a`` would own user
``a.b``'s addresses), and nothing in the router's own space (``_topo``, ``_local``, ``$...``: rule 2
covers it). A user whose name contains ``/`` matches no ``${user}`` pattern (user ``a/b`` would
otherwise reach into user ``a``'s ``user/a/#``).

Patterns are compiled to one regular expression per group and user (`PatternSet.bind`, cached).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

from router.addressing import normalize

USER = "${user}"
ANYTHING = "#"
_SEPARATED = re.compile(r"([/.])")
_RESERVED = ("_topo", "_local")

Matcher = Callable[[str], bool]


class PatternError(ValueError):
    """A pattern that breaks a rule; the message says which."""


def check(text: object) -> str:
    """The pattern in normal form (``amqp:/`` and a leading ``/`` dropped); raises PatternError."""
    if not isinstance(text, str):
        raise PatternError(f"expected a string, got {type(text).__name__}")
    pattern = text.removeprefix("amqp:/").lstrip("/")
    if not pattern:
        raise PatternError("must not be empty")
    if any(c.isspace() for c in pattern):
        raise PatternError("must not contain whitespace")
    parts = _SEPARATED.split(pattern)
    tokens = parts[0::2]
    if "" in tokens:
        raise PatternError("empty token (a leading or trailing separator, or two in a row)")
    if tokens[0] in _RESERVED or (pattern.startswith("$") and not pattern.startswith(USER)):
        raise PatternError("in the router's own address space (_topo, _local, $...): clients never "
                           "receive from it, and what they may send there is not set by patterns")
    for i, tok in enumerate(tokens):
        for wildcard in ("*", "#"):
            if wildcard in tok and tok != wildcard:
                raise PatternError(f"wildcard {wildcard!r} must be a whole token (got {tok!r})")
        if "${" in tok.replace(USER, ""):
            raise PatternError(f"unknown variable in {tok!r}: only ${{user}} is substituted")
        if USER in tok:
            after = tok.split(USER, 1)[1]
            nxt = parts[2 * i + 1] if 2 * i + 1 < len(parts) else ""
            if after or tok.count(USER) > 1 or nxt not in ("", "/"):
                raise PatternError("${user} must be followed by '/' or end the pattern")
    return pattern


def _regex(pattern: str, user: str | None) -> str | None:
    """The regular expression of a checked pattern for `user` (None: it cannot match that user)."""
    if USER in pattern and (user is None or not user or "/" in user):
        return None
    parts = _SEPARATED.split(pattern)
    out: list[str] = []
    n = len(parts)
    for i in range(0, n, 2):
        tok = parts[i]
        sep = parts[i - 1] if i else ""
        if i == 2 and parts[0] == ANYTHING:
            sep = ""                        # "#/rest": the separator went with the leading "#"
        if tok == ANYTHING:
            if i == 0:
                if n == 1:
                    return ".+"
                # nothing, or any tokens and the separator before the rest
                out.append(f"(?:.+{re.escape(parts[1])})?")
                continue
            out.append(f"(?:{re.escape(sep)}.+)?")
        elif tok == "*":
            out.append(re.escape(sep) + "[^/.]+")
        else:
            literal = re.escape(sep + tok)
            if USER in tok:
                literal = re.escape(sep) + re.escape(tok).replace(re.escape(USER), re.escape(user or ""))
            out.append(literal)
    return "".join(out)


class PatternSet:
    """The `sources` or `targets` of a group: None means any address, an empty list none."""

    def __init__(self, patterns: Iterable[str] | None) -> None:
        self.patterns: tuple[str, ...] | None = None if patterns is None else tuple(
            check(p) for p in patterns)

    @property
    def unrestricted(self) -> bool:
        return self.patterns is None or ANYTHING in self.patterns

    def bind(self, user: str | None) -> Matcher | None:
        """A matcher of normalised addresses for `user`; None when every address matches."""
        if self.unrestricted:
            return None
        return _compiled(self.patterns, user)

    def matches(self, address: str, user: str | None = None) -> bool:
        """Does `address` (any form) match for `user`? (tests and tools; the node binds once)"""
        m = self.bind(user)
        return True if m is None else bool(m(normalize(address)))


@functools.lru_cache(maxsize=1024)
def _compiled(patterns: tuple[str, ...], user: str | None) -> Matcher:
    alternatives = [r for r in (_regex(p, user) for p in patterns) if r is not None]
    if not alternatives:
        return _nothing
    return re.compile("|".join(f"(?:{r})" for r in alternatives)).fullmatch  # type: ignore[return-value]


def _nothing(address: str) -> bool:
    return False
