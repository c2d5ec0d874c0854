"""``policy:``: who may connect, receive from and send to which address, and manage the node.

The section's keys are declared here (docs/SECURITY.md explains them); router.policy compiles
them into what the node checks at Open and attach. The top-level ``groups`` and ``default_group`` are the
default vhost; ``vhosts`` holds more, chosen by the hostname of a client's Open (or forced per listener by
``listeners[].policy_vhost``). Checks across keys (`check_policy`): ``default_group`` names a group of its
vhost, no user is in two groups whose remote hosts overlap, a group limit is not made unreachable by the
limits of every listener that serves its vhost, ``policy_vhost`` names a vhost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from router.config.checks import NAME_RE, boolean, choice, first_duplicate, int_in, list_of, string
from router.config.keys import Check, Invalid, declare, join, section, wrong_type
from router.policy.hosts import HostError, HostSet, parse_network
from router.policy.levels import LEVELS
from router.policy.patterns import PatternError, check

DENY = "deny"
DEFAULT_VHOST = "default"
MANAGEMENT_LEVELS = tuple(LEVELS)


def _user(value: object, path: str) -> str:
    if not string(value, path):
        raise Invalid(path, "must not be empty")
    return value


def _users(value: object, path: str) -> tuple[str, ...]:
    found = list_of(Check(_user, "string"), "user names")(value, path)
    first_duplicate(found, lambda i: f"{path}[{i}]", "user")
    return tuple(found)


def _host(value: object, path: str) -> str:
    try:
        parse_network(value)
    except HostError as exc:
        raise Invalid(path, str(exc)) from None
    return value.strip()


def _hosts(value: object, path: str) -> tuple[str, ...]:
    return tuple(list_of(Check(_host, "string"), "remote hosts")(value, path))


def _pattern(value: object, path: str) -> str:
    try:
        return check(value)
    except PatternError as exc:
        raise Invalid(path, f"bad pattern {value!r}: {exc}") from None


def _patterns(value: object, path: str) -> tuple[str, ...]:
    found = list_of(Check(_pattern, "string"), "address patterns")(value, path)
    first_duplicate(found, lambda i: f"{path}[{i}]", "pattern")
    return tuple(found)


_limit = int_in(1, 2**31 - 1)


@dataclass(frozen=True)
class PolicyGroup:
    """One group of users: who belongs to it, and what its connections may do."""

    users: tuple[str, ...] = declare(
        Check(_users, "list of user names"), "members: user names, `*` (any authenticated user), an EXTERNAL "
        "certificate subject (`CN=client1,O=example`), `anonymous` (ANONYMOUS or no SASL)", ())
    remote_hosts: tuple[str, ...] | None = declare(
        Check(_hosts, "list of addresses, CIDR ranges, `localhost`"),
        "members connect only from these hosts; from elsewhere they are not members", None, show="any host")
    sources: tuple[str, ...] | None = declare(
        Check(_patterns, "list of patterns"), "addresses its receivers may consume (patterns: `a/b` exact, "
        "`a/#` prefix, `*` one token, `${user}`)", None, show="`[#]` (any)")
    targets: tuple[str, ...] | None = declare(
        Check(_patterns, "list of patterns"), "addresses its senders (and anonymous-relay messages) may go "
        "to; reply addresses are always allowed", None, show="`[#]` (any)")
    allow_dynamic_source: bool = declare(boolean, "may attach receivers with a dynamic source (reply "
                                                  "addresses)", True)
    allow_anonymous_sender: bool = declare(boolean, "may attach senders with no target (anonymous relay)",
                                           True)
    max_connections_per_user: int | None = declare(_limit, "connections of one user open at once in this "
                                                          "group, on this node", None)
    max_connections_per_host: int | None = declare(_limit, "connections from one remote host open at once in "
                                                          "this group, on this node", None)
    max_senders: int | None = declare(_limit, "sending links per connection", None)
    max_receivers: int | None = declare(_limit, "receiving links per connection", None)
    max_sessions: int | None = declare(int_in(1, 65536), "sessions per connection", None)
    max_message_size: int | None = declare(int_in(1, 2**63 - 1), "bytes; bigger transfers are REJECTED "
                                           "(the smaller of this and the listener's applies)", None)
    management: str | None = declare(
        choice(MANAGEMENT_LEVELS, "management level"), "`$management` access: none (refused), redacted (no "
        "files, users, peer or reply addresses), read, write", None,
        show="`read` if authenticated or from localhost, else `redacted`")


def _group_name(name: object, path: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise Invalid(path, f"invalid group name {name!r}: use only letters, digits, '_', '.' and '-'")
    if name == DENY:
        raise Invalid(path, f"{DENY!r} is not a group name: default_group: deny refuses everyone else")
    return name


def _groups(value: object, path: str) -> Mapping[str, PolicyGroup]:
    if not isinstance(value, Mapping):
        raise wrong_type(value, "a mapping of group name to its settings", path)
    read_group = section(PolicyGroup)
    out = {}
    for name, settings in value.items():
        key_path = join(path, name)
        _group_name(name, key_path)
        out[name] = read_group({} if settings is None else settings, key_path)
    return MappingProxyType(out)


def _default_group(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise wrong_type(value, "a group name or deny", path)
    return value


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


_GROUPS = Check(_groups, "map of group name → group", keys=PolicyGroup, named=True)
_DEFAULT_GROUP = Check(_default_group, "group name / `deny`")


@dataclass(frozen=True)
class VhostPolicy:
    """The groups of one vhost (the top-level ``policy:`` keys are the default vhost)."""

    groups: Mapping[str, PolicyGroup] = declare(_GROUPS, "groups of users", factory=_empty, hash=False)
    default_group: str = declare(_DEFAULT_GROUP, "the group of users no group lists, or `deny`", DENY)


def _vhosts(value: object, path: str) -> Mapping[str, VhostPolicy]:
    if not isinstance(value, Mapping):
        raise wrong_type(value, "a mapping of hostname to its groups", path)
    read_vhost = section(VhostPolicy)
    out = {}
    for name, settings in value.items():
        key_path = join(path, name)
        if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
            raise Invalid(key_path, f"invalid vhost name {name!r}: a hostname without whitespace")
        if name.lower() == DEFAULT_VHOST:
            raise Invalid(key_path, f"{DEFAULT_VHOST!r} is the top-level policy: put its groups there")
        out[name.lower()] = read_vhost({} if settings is None else settings, key_path)
    return MappingProxyType(out)


@dataclass(frozen=True)
class PolicyConfig:
    """``policy:``. Absent: no group limits anything (the reserved-address rules still hold)."""

    groups: Mapping[str, PolicyGroup] = declare(_GROUPS, "groups of users of the default vhost (connections "
                                                         "whose Open names no vhost below)",
                                                factory=_empty, hash=False)
    default_group: str = declare(_DEFAULT_GROUP, "the group of users no group lists, or `deny`", DENY)
    vhosts: Mapping[str, VhostPolicy] = declare(
        Check(_vhosts, "map of hostname → vhost", keys=VhostPolicy, named=True),
        "more policies, chosen by the hostname of a client's Open (as qdrouterd's vhosts)",
        factory=_empty, hash=False)

    def all_vhosts(self) -> dict[str, VhostPolicy]:
        """vhost name -> its policy, the default vhost first."""
        return {DEFAULT_VHOST: VhostPolicy(self.groups, self.default_group), **self.vhosts}


def _vhost_path(vhost: str) -> str:
    return "policy" if vhost == DEFAULT_VHOST else f"policy.vhosts.{vhost}"


def check_policy(policy: PolicyConfig | None, listeners: Sequence[Any]) -> None:
    """The checks across keys of the ``policy:`` section and the listeners; raises Invalid."""
    forced = [(i, lc.policy_vhost) for i, lc in enumerate(listeners) if lc.policy_vhost is not None]
    for i, lc in enumerate(listeners):
        if lc.policy_vhost is not None and lc.role != "normal":
            raise Invalid(f"listeners[{i}].policy_vhost",
                          "only client (normal) listeners have a policy vhost")
    if policy is None:
        if forced:
            raise Invalid(f"listeners[{forced[0][0]}].policy_vhost", "there is no policy: section")
        return
    vhosts = policy.all_vhosts()
    for i, name in forced:
        if name.lower() not in vhosts:
            raise Invalid(f"listeners[{i}].policy_vhost",
                          f"unknown vhost {name!r} (vhosts: {', '.join(vhosts)})")
    for vhost, vp in vhosts.items():
        base = _vhost_path(vhost)
        if vp.default_group != DENY and vp.default_group not in vp.groups:
            known = ", ".join(vp.groups) or "none"
            raise Invalid(f"{base}.default_group",
                          f"unknown group {vp.default_group!r} (groups: {known}; or {DENY})")
        _check_membership(vp, base)
        serving = [(i, lc) for i, lc in enumerate(listeners) if lc.role == "normal"
                   and (lc.policy_vhost is None or lc.policy_vhost.lower() == vhost)]
        for name, g in vp.groups.items():
            _check_limits(g, f"{base}.groups.{name}", serving)


def _check_membership(vp: VhostPolicy, base: str) -> None:
    """No user (or `*`) in two groups of one vhost whose remote hosts overlap: membership must be clear."""
    seen: dict[str, list[tuple[str, HostSet]]] = {}
    for name, g in vp.groups.items():
        hosts = HostSet(g.remote_hosts)
        for i, user in enumerate(g.users):
            for other, other_hosts in seen.get(user, ()):
                net = hosts.overlaps(other_hosts)
                if net is not None:
                    where = "any host" if net.prefixlen == 0 else str(net)
                    raise Invalid(f"{base}.groups.{name}.users[{i}]",
                                  f"user {user!r} is also in group {other!r} and their remote hosts overlap "
                                  f"({where}): a user belongs to one group")
            seen.setdefault(user, []).append((name, hosts))


def _check_limits(g: PolicyGroup, path: str, serving: list[tuple[int, Any]]) -> None:
    """A group limit is conflicting when every listener serving its vhost has a lower one of its own."""
    for key, listener_key in (("max_sessions", "max_sessions"), ("max_message_size", "max_message_size"),
                              ("max_senders", "max_links"), ("max_receivers", "max_links")):
        mine = getattr(g, key)
        if mine is None or not serving:
            continue
        theirs = [(i, getattr(lc, listener_key)) for i, lc in serving]
        if all(limit is not None and limit < mine for _, limit in theirs):
            i, limit = max(theirs, key=lambda t: t[1])
            raise Invalid(f"{path}.{key}",
                          f"conflicts with listeners[{i}].{listener_key} ({limit}): {mine} can never be "
                          f"reached on any listener serving this vhost (lower it, or raise the "
                          f"listener's)")


def policy_section(value: object, path: str) -> PolicyConfig:
    """The ``policy:`` mapping as a PolicyConfig (keys checked in declaration order)."""
    return section(PolicyConfig)({} if value is None else value, path)


POLICY = Check(policy_section, "map", keys=PolicyConfig)
