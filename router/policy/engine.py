"""The node's policy: what it decides at Open, at Begin, at attach and for an anonymous-relay message.

Who the user is: the SASL user of the connection (PLAIN's user name, EXTERNAL's certificate subject in RFC
2253 form), ``anonymous`` for ANONYMOUS or no SASL; its remote host is the IP address it connected from;
its vhost is the listener's ``policy_vhost`` if set, else the hostname of its Open when a vhost has that
name, else the default (top-level) one. All of it is known when its Open arrives (SASL comes first), so
the group is resolved then, once (`open`), and kept in the connection's `Access`.

Each check answers None (allowed) or why not, in words naming the group and the rule (``max_senders``,
``targets``...); the caller detaches, closes or rejects with `amqp:unauthorized-access` and that
description. Every denial is counted and logged (router.policy.denials).

What holds with no policy configured (rules 1 and 2 of router.policy.reserved) holds on every node, for
every client; the policy's own rules are checked at the ingress node only: a delivery from a peer node
is not checked again (access granted at the ingress node is valid across the network).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from router.config.policy import DEFAULT_VHOST, PolicyConfig
from router.policy import reserved
from router.policy.access import NO_GROUP, Access
from router.policy.denials import Denials
from router.policy.groups import ANONYMOUS, Vhost
from router.policy.hosts import is_loopback, parse_address
from router.policy.levels import NAMES, NONE, default_level


@dataclass(slots=True)
class Peer:
    """What is known of a client connection when its Open arrives."""

    user: str | None                # the transport's SASL user
    mechanism: str | None           # the SASL mechanism it used (None: no SASL)
    host: str                       # "ip:port" it connected from
    listener: str | None = None     # "host:port" of the listener that accepted it
    hostname: str | None = None     # the hostname field of its Open
    vhost: str | None = None        # the listener's policy_vhost, if any


class Policy:
    """Decisions at Open, Begin, attach and anonymous-relay transfer, for one node."""

    def __init__(self, config: PolicyConfig | None = None, clock: Callable[[], float] | None = None) -> None:
        self.config = config
        self.enabled = config is not None
        self.vhosts = {name: Vhost(name, vp) for name, vp in config.all_vhosts().items()} if config else {}
        self.denials = Denials(clock or (lambda: 0.0))
        self._per_user: dict[tuple[str, str, str], int] = {}   # (vhost, group, user) -> connections
        self._per_host: dict[tuple[str, str, str], int] = {}   # (vhost, group, host) -> connections

    def reconfigure(self, config: PolicyConfig | None) -> None:
        """A new policy (a reload) for connections opened from now on; the counts of the open ones stay."""
        self.config = config
        self.enabled = config is not None
        self.vhosts = {name: Vhost(name, vp) for name, vp in config.all_vhosts().items()} if config else {}

    @property
    def clock(self) -> Callable[[], float]:
        return self.denials.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.denials.clock = clock

    # ---- Open -------------------------------------------------------------------------------------------
    def open(self, peer: Peer) -> Access | str:
        """The access of a client connection whose Open arrived, or why it is refused."""
        authenticated = peer.mechanism is not None and peer.mechanism.upper() != "ANONYMOUS"
        user = (peer.user or ANONYMOUS) if authenticated else ANONYMOUS
        ip = parse_address(peer.host)
        host = str(ip) if ip is not None else peer.host
        level = default_level(authenticated, is_loopback(ip))
        if not self.enabled:
            access = Access(None, DEFAULT_VHOST, user, host, ip, peer.listener, level)
            self._admit(access)
            return access
        vhost = self._vhost(peer)
        group = vhost.member(user, ip)
        if group is None:
            problem = (f"policy: user {user!r} from {host} is in no group of vhost {vhost.name!r} and its "
                       "default_group is deny")
            self.denials.deny("connections", peer.listener, vhost.name, NO_GROUP, host, user, problem)
            return problem
        access = Access(group, vhost.name, user, host, ip, peer.listener,
                        level if group.management is None else group.management)
        for limit, counts, key, what in (
                (group.max_connections_per_user, self._per_user, user, f"user {user!r}"),
                (group.max_connections_per_host, self._per_host, host, f"host {host}")):
            if limit is not None and counts.get((vhost.name, group.name, key), 0) >= limit:
                rule = "max_connections_per_user" if counts is self._per_user else "max_connections_per_host"
                problem = (f"policy: group {group.name!r} allows {limit} connection(s) of {what} at once "
                           f"({rule})")
                self.denials.deny("connections", peer.listener, vhost.name, group.name, host, user, problem)
                return problem
        self._admit(access)
        return access

    def _vhost(self, peer: Peer) -> Vhost:
        name = (peer.vhost or "").lower()
        if not name and peer.hostname:
            name = peer.hostname.lower()
        return self.vhosts.get(name) or self.vhosts[DEFAULT_VHOST]

    def _admit(self, access: Access) -> None:
        s = self.denials.of(access.listener, access.vhost, access.group_name)
        s.connections += 1
        s.opened += 1
        g = access.group_name
        for counts, key in ((self._per_user, access.user), (self._per_host, access.host)):
            k = (access.vhost, g, key)
            counts[k] = counts.get(k, 0) + 1
        access.counted = True
        access.owner = self

    def release(self, access: Access) -> None:
        """The connection of `access` is gone: it leaves the connection counts."""
        if not access.counted:
            return
        access.counted = False
        self.denials.of(access.listener, access.vhost, access.group_name).connections -= 1
        g = access.group_name
        for counts, key in ((self._per_user, access.user), (self._per_host, access.host)):
            k = (access.vhost, g, key)
            n = counts.get(k, 0) - 1
            if n > 0:
                counts[k] = n
            else:
                counts.pop(k, None)

    # ---- Begin ------------------------------------------------------------------------------------------
    def session(self, access: Access, sessions: int) -> str | None:
        """May a connection with `sessions` sessions begin one more?"""
        g = access.group
        if g is None or g.max_sessions is None or sessions < g.max_sessions:
            return None
        return self._deny(access, "sessions", f"policy: group {g.name!r} allows {g.max_sessions} session(s) "
                                              "per connection (max_sessions)")

    # ---- attach -----------------------------------------------------------------------------------------
    def receive(self, access: Access | None, key: str | None, dynamic: bool = False) -> str | None:
        """May a client receiver attach to routing key `key` (None: a dynamic source)?"""
        if access is None:
            access = _NO_POLICY
        elif access.trusted:
            return None
        g = access.group
        if dynamic:
            if g is not None and not g.allow_dynamic_source:
                return self._deny_receiver(access, f"policy: group {g.name!r} may not use dynamic sources "
                                                   "(allow_dynamic_source: false)")
        else:
            problem = reserved.consume_problem(key)
            if problem is not None:
                return self._deny_receiver(access, problem)
            if access.sources is not None and not access.sources(key):
                return self._deny_receiver(access, f"policy: group {g.name!r} may not receive from {key!r} "
                                                   "(sources)")
        if g is not None and g.max_receivers is not None and access.receivers >= g.max_receivers:
            return self._deny_receiver(access, f"policy: group {g.name!r} allows {g.max_receivers} "
                                               "receiver(s) per connection (max_receivers)")
        return None

    def send(self, access: Access | None, key: str | None) -> tuple[str | None, str | None]:
        """May a client sender attach to routing key `key` (None: the anonymous relay)? Returns (the key
        to route by, which is `key` except for a management agent, None) or (None, why not)."""
        if access is None:
            access = _NO_POLICY
        elif access.trusted:
            return key, None
        g = access.group
        if key is None:
            if g is not None and not g.allow_anonymous_sender:
                return None, self._deny(access, "links", f"policy: group {g.name!r} may not attach anonymous "
                                                         "senders (allow_anonymous_sender: false)")
            routed = None
        else:
            routed, problem = self._target(access, key)
            if problem is not None:
                return None, self._deny(access, "links", problem)
        if g is not None and g.max_senders is not None and access.senders >= g.max_senders:
            return None, self._deny(access, "links", f"policy: group {g.name!r} allows {g.max_senders} "
                                                     "sender(s) per connection (max_senders)")
        return routed, None

    # ---- anonymous relay --------------------------------------------------------------------------------
    def relay(self, access: Access, key: str) -> tuple[str | None, str | None]:
        """May an anonymous-relay message from `access` go to routing key `key`? (the key to route by,
        None) or (None, why not). Asked only when `access.check_relay` or `key` holds a `$`: a check per
        message, so the common answers come first (an allowed address; a reply address)."""
        if access.trusted:
            return key, None
        if not key.startswith("_topo/"):
            targets = access.targets
            if targets is None or targets(key) is not None:
                return key, None
        elif "$" not in key:
            return key, None            # a reply address, or another _topo/ one (which leads nowhere)
        routed, problem = self._target(access, key)
        if problem is not None:
            return None, self._deny(access, "messages", problem)
        return routed, None

    def _target(self, access: Access, key: str) -> tuple[str | None, str | None]:
        kind = reserved.classify(key)
        g = access.group
        if kind == reserved.ORDINARY:
            edge = reserved.edge_problem(key)
            if edge is not None:
                return None, edge
            if access.targets is not None and not access.targets(key):
                return None, f"policy: group {g.name!r} may not send to {key!r} (targets)"
            return key, None
        if kind == reserved.AGENT:
            if access.level == NONE:
                who = f"group {g.name!r}" if g is not None else f"user {access.user!r}"
                return None, f"policy: {who} has no management access (management: {NAMES[NONE]})"
            return reserved.agent_key(key, access.level), None
        if kind == reserved.SERVICE:
            return None, f"{key} is a node service address: clients may send only to $management"
        return key, None        # reply addresses (and the rest of _topo/, which leads nowhere)

    def _deny_receiver(self, access: Access, problem: str) -> str:
        """Deny a receiver's attach (a link denial, also counted as a receiver's)."""
        self.denials.of(access.listener, access.vhost, access.group_name).denied_receivers += 1
        return self._deny(access, "links", problem)

    def _deny(self, access: Access, kind: str, problem: str) -> str:
        self.denials.deny(kind, access.listener, access.vhost, access.group_name, access.host, access.user,
                          problem)
        return problem


#: The access the core assumes for a client it was told nothing about (a policy-less anonymous client).
_NO_POLICY = Access(None, DEFAULT_VHOST, ANONYMOUS, "", None, None, default_level(False, False))
