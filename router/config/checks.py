"""The checkers of single values: types, ranges, choices, names, prefixes, lists.

Each is a :class:`~router.config.keys.Check`; the messages they raise are part of the contract
(``check-config`` prints them as they are).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from router.config.keys import Check, Invalid, type_name, wrong_type

RESERVED_FIRST_TOKENS = ("_topo", "_local")
"""Address namespaces the router uses itself: a first token of these, or anything starting with "$"."""

#: Node ids and broker names: letters, digits, '_', '.' and '-'.
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_SEPARATORS = re.compile(r"[/.]")
_WILDCARDS = ("*", "#")
_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise wrong_type(value, "string", path)
    return value


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise wrong_type(value, "boolean", path)
    return value


string = Check(_string, "string")
boolean = Check(_bool, "bool")


def _bound(n: int) -> str:
    """``2³²−1`` for a large 2**k - 1, else the number."""
    if n > 65536 and (n + 1) & n == 0:
        return f"2{str((n + 1).bit_length() - 1).translate(_SUPERSCRIPT)}−1"
    return str(n)


def int_in(low: int, high: int) -> Check:
    """An integer from ``low`` to ``high``."""
    def check(value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_type(value, "integer", path)
        if not low <= value <= high:
            raise Invalid(path, f"out of range: must be between {low} and {high}, got {value}")
        return value

    return Check(check, f"int {low}–{_bound(high)}")


def number_at_least(low: float, unit: str = "number") -> Check:
    """A finite number ``>= low``, stored as a float; ``unit`` names it in the reference."""
    def check(value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong_type(value, "number", path)
        if not math.isfinite(value) or value < low:
            raise Invalid(path, f"out of range: must be a finite number >= {low:g}, got {value}")
        return float(value)

    return Check(check, f"{unit} ≥ {low:g}")


def choice(choices: tuple[str, ...], what: str) -> Check:
    """One of ``choices`` (``what`` names the kind of value in the message)."""
    def check(value: object, path: str) -> str:
        if _string(value, path) not in choices:
            raise Invalid(path, f"unknown {what} {value!r} (valid: {', '.join(choices)})")
        return value

    return Check(check, " / ".join(f"`{c}`" for c in choices))


def list_of(item: Check, what: str, at_least: int = 0) -> Check:
    """A list whose entries ``item`` checks (at ``path[i]``); ``what`` names the entries."""
    def check(value: object, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise wrong_type(value, f"a list of {what}", path)
        if len(value) < at_least:
            raise Invalid(path, f"at least {at_least} {what} required")
        return [item(entry, f"{path}[{i}]") for i, entry in enumerate(value)]

    accepts = f"list of {item.accepts}s" if item.keys else "list"
    if at_least:
        accepts += f", at least {at_least}"
    return Check(check, accepts, keys=item.keys, many=True)


def first_duplicate(values: list[Any], path: Callable[[int], str], what: str) -> None:
    """Raise for the first value seen twice (None values are skipped)."""
    seen: dict[Any, int] = {}
    for i, v in enumerate(values):
        if v is None:
            continue
        if v in seen:
            raise Invalid(path(i), f"duplicate {what} {v!r} (already used by {path(seen[v])})")
        seen[v] = i


MAX_NODE_ID = 255       # as router.linkstate.messages.MAX_NODE_ID: peers refuse longer ids


def _node_id(value: object, path: str) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise Invalid(path, f"wrong type: expected string, got {type_name(value)} {value!r} (quote it)")
    if not NAME_RE.fullmatch(_string(value, path)):
        raise Invalid(path, f"invalid node id {value!r}: use only letters, digits, '_', '.' and '-'")
    if len(value) > MAX_NODE_ID:
        raise Invalid(path, f"node id too long ({len(value)} characters; at most {MAX_NODE_ID})")
    return value


def _host(value: object, path: str) -> str:
    if not _string(value, path).strip():
        raise Invalid(path, "must not be empty")
    if any(c.isspace() for c in value):
        raise Invalid(path, f"invalid host {value!r}: must not contain whitespace")
    return value


def _path(value: object, path: str) -> str:
    if not _string(value, path).strip():
        raise Invalid(path, "must not be empty")
    return value


node_id = Check(_node_id, "string")
host = Check(_host, "string")
file_path = Check(_path, "path")


def log_levels(levels: Check) -> Check:
    """A mapping of logger name to a level that ``levels`` checks."""
    def check(value: object, path: str) -> Mapping[str, str]:
        if not isinstance(value, Mapping):
            raise wrong_type(value, "a mapping of logger name to log level", path)
        out: dict[str, str] = {}
        for logger, level in value.items():
            key_path = f"{path}[{logger}]"
            if not isinstance(logger, str) or not logger.strip():
                raise Invalid(key_path, f"invalid logger name {logger!r}: expected a non-empty string")
            out[logger] = levels(level, key_path)
        return MappingProxyType(out)

    return Check(check, "map of logger → level")


def _prefix(value: object, path: str) -> str:
    """Validate an address prefix and return it normalised (no ``amqp:/``, no leading ``/``)."""
    raw = _string(value, path)
    prefix = raw.removeprefix("amqp:/").removeprefix("/")
    if not prefix:
        raise Invalid(path, f"bad prefix {raw!r}: must not be empty")
    if any(c.isspace() for c in prefix):
        raise Invalid(path, f"bad prefix {raw!r}: must not contain whitespace")
    for wildcard in _WILDCARDS:
        if wildcard in prefix:
            problem = f"bad prefix {raw!r}: wildcard {wildcard!r} not supported (prefixes are literal)"
            raise Invalid(path, problem)
    if prefix[0] in "/." or prefix[-1] in "/.":
        raise Invalid(path, f"bad prefix {raw!r}: must not start or end with a separator ('/' or '.')")
    tokens = _SEPARATORS.split(prefix)
    if "" in tokens:
        raise Invalid(path, f"bad prefix {raw!r}: empty token between separators")
    if tokens[0] in RESERVED_FIRST_TOKENS or prefix.startswith("$"):
        reserved = ", ".join((*RESERVED_FIRST_TOKENS, "$..."))
        raise Invalid(path, f"bad prefix {raw!r}: reserved address space ({reserved})")
    return prefix


prefix = Check(_prefix, "address prefix")


def protocols(versions: tuple[str, ...]) -> Check:
    """A non-empty list of distinct TLS protocol versions out of ``versions``."""
    names = list_of(choice(versions, "TLS protocol"), "TLS protocols", at_least=1)

    def check(value: object, path: str) -> tuple[str, ...]:
        found = names(value, path)
        first_duplicate(found, lambda i: f"{path}[{i}]", "protocol")
        return tuple(found)

    return Check(check, "list of " + " / ".join(f"`{v}`" for v in versions))


def mechanisms(allowed: tuple[str, ...]) -> Check:
    """A non-empty list of distinct SASL mechanism names out of ``allowed`` (any case, stored upper)."""
    def one(value: object, path: str) -> str:
        mech = _string(value, path).upper()
        if mech not in allowed:
            raise Invalid(path, f"unknown SASL mechanism {value!r} (valid: {', '.join(allowed)})")
        return mech

    names = list_of(Check(one, ""), "SASL mechanisms", at_least=1)

    def check(value: object, path: str) -> tuple[str, ...]:
        found = names(value, path)
        first_duplicate(found, lambda i: f"{path}[{i}]", "mechanism")
        return tuple(found)

    return Check(check, "list of " + " / ".join(f"`{m}`" for m in allowed))
