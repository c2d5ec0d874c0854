"""What one connection may do: decided once, at its Open, and kept on the connection.

An `Access` holds the connection's group (None without a policy), its user and remote host, its management
level, its `sources` and `targets` bound to its user (one compiled expression each, None: any address),
and its link counts (the adapter counts links as they come and go; the core compares them with the
group's limits at attach). `TRUSTED` is the access of the node's own in-process clients (management
agent, broker gateways): no rule applies to them.
"""

from __future__ import annotations

from router.policy.groups import Group
from router.policy.hosts import Address
from router.policy.levels import WRITE
from router.policy.patterns import Matcher


class Access:
    """A connection's grant (see the module docstring)."""

    __slots__ = ("group", "vhost", "user", "host", "ip", "listener", "level", "sources", "targets",
                 "check_relay", "senders", "receivers", "trusted", "counted", "owner")

    def __init__(self, group: Group | None, vhost: str, user: str, host: str, ip: Address | None,
                 listener: str | None, level: int, trusted: bool = False) -> None:
        self.group = group
        self.vhost = vhost
        self.user = user                # "anonymous" for ANONYMOUS or no SASL
        self.host = host                # the remote host (IP address as text)
        self.ip = ip
        self.listener = listener        # "host:port" of the listener that accepted it
        self.level = level              # management level (router.policy.levels)
        self.trusted = trusted
        self.sources: Matcher | None = None
        self.targets: Matcher | None = None
        if group is not None:
            self.sources = group.sources.bind(user)
            self.targets = group.targets.bind(user)
        # anonymous-relay messages are checked one by one only when targets are restricted
        self.check_relay = self.targets is not None
        self.senders = 0
        self.receivers = 0
        self.counted = False            # holds a place in the per-user and per-host counts of `owner`
        self.owner: object = None       # the router.policy.engine.Policy that admitted it

    @property
    def group_name(self) -> str:
        return self.group.name if self.group is not None else NO_GROUP

    def release(self) -> None:
        """The connection is gone: give its place in the connection counts back."""
        if self.counted:
            self.owner.release(self)

    def link_opened(self, consumer: bool) -> None:
        if consumer:
            self.receivers += 1
        else:
            self.senders += 1

    def link_closed(self, consumer: bool) -> None:
        if consumer:
            self.receivers -= 1
        else:
            self.senders -= 1

    def __repr__(self) -> str:
        return f"<Access {self.user}@{self.host} group={self.group_name} vhost={self.vhost}>"


NO_GROUP = "(none)"
TRUSTED = Access(None, "", "(node)", "", None, None, WRITE, trusted=True)
