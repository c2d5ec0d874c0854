"""The groups of a vhost, compiled from the config, and the group a connection belongs to.

Membership (`Vhost.member`): the group that lists the connection's user by name (an EXTERNAL user's name is
its certificate subject; ANONYMOUS and no SASL are the user ``anonymous``) and admits its remote host; else,
for an authenticated user, the group that lists ``*`` and admits the host (``*`` is any authenticated user:
anonymous clients are in a group only where ``anonymous`` is listed); else ``default_group`` if it admits
the host (its ``users`` do not matter then); else none: the connection is refused. check-config makes sure
no user is in two groups whose remote hosts overlap, so the first match is the only one.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.config.policy import DENY, PolicyGroup, VhostPolicy
from router.policy.hosts import Address, HostSet
from router.policy.levels import LEVELS
from router.policy.patterns import PatternSet

ANY_USER = "*"
ANONYMOUS = "anonymous"


@dataclass(slots=True)
class Group:
    """One group, ready to be checked against."""

    name: str
    vhost: str
    users: tuple[str, ...]
    hosts: HostSet
    sources: PatternSet
    targets: PatternSet
    allow_dynamic_source: bool = True
    allow_anonymous_sender: bool = True
    max_connections_per_user: int | None = None
    max_connections_per_host: int | None = None
    max_senders: int | None = None
    max_receivers: int | None = None
    max_sessions: int | None = None
    max_message_size: int | None = None
    management: int | None = None       # None: by user and host (levels.default_level)

    @classmethod
    def from_config(cls, name: str, vhost: str, g: PolicyGroup) -> Group:
        return cls(name, vhost, g.users, HostSet(g.remote_hosts), PatternSet(g.sources),
                   PatternSet(g.targets), g.allow_dynamic_source, g.allow_anonymous_sender,
                   g.max_connections_per_user, g.max_connections_per_host, g.max_senders,
                   g.max_receivers, g.max_sessions, g.max_message_size,
                   None if g.management is None else LEVELS[g.management])


class Vhost:
    """The groups of one vhost and who belongs to which."""

    def __init__(self, name: str, vp: VhostPolicy) -> None:
        self.name = name
        self.groups = {n: Group.from_config(n, name, g) for n, g in vp.groups.items()}
        self.by_user: dict[str, list[Group]] = {}
        for g in self.groups.values():
            for user in g.users:
                self.by_user.setdefault(user, []).append(g)
        self.default = None if vp.default_group == DENY else self.groups[vp.default_group]

    def member(self, user: str, ip: Address | None) -> Group | None:
        """The group of `user` connecting from `ip`, or None (refused)."""
        named = self.by_user.get(user, ())
        for candidates in (named, self.by_user.get(ANY_USER, ()) if user != ANONYMOUS else ()):
            for g in candidates:
                if g.hosts.admits(ip):
                    return g
        d = self.default
        if d is not None and d.hosts.admits(ip):
            return d
        return None
