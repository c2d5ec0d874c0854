"""The link-state database: our own link state and what we know of every other node.

* Own LS: peers (bidirectional neighbours -> link cost) and ``ls_seq``, bumped by :meth:`commit_own`.
* Remote nodes are created when heard of (RA, LSU, HELLO, LSR, MAU, MAR) or named in a peer list.
  An LSU is accepted only if its ``ls_seq`` is above the one held. An RA or LSU refreshes ``last_seen``;
  a link state older than ``ls_max_age`` is cleared. A node without link state, not a neighbour and named
  by no one is deleted after ``node_grace``.
* Instances: a higher ``instance`` than held means the node restarted (its LS is cleared); a lower one is a
  stale message in flight or, if still seen ``node_grace`` after the change, a second node with that id.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from router.linkstate.config import LinkStateConfig, within
from router.linkstate.messages import LinkState


class Verdict(enum.Enum):
    """What a message's ``instance`` says about its sender."""

    NEW = "new"  # first instance we hear of
    SAME = "same"
    RESTART = "restart"  # higher than held: the node restarted
    STALE = "stale"  # lower than held, shortly after a restart: an old message, drop it
    DUPLICATE = "duplicate"  # lower than held, long after: two nodes share this id


@dataclass(slots=True)
class RemoteNode:
    """What we know of another node."""

    id: str
    created: float
    instance: int | None = None
    instance_changed_at: float = -math.inf
    ls_seq: int = 0
    peers: dict[str, int] | None = None  # None: link state unknown or cleared
    last_seen: float = -math.inf  # last RA or accepted LSU
    anchored_at: float = -math.inf  # last time it had peers, was named or was a neighbour
    lsr_at: float = -math.inf  # last LSR we sent it
    lsr_seq: int = 0  # the ls_seq that LSR wanted


class LinkStateDb:
    """Own link state plus remote nodes; remembers which link states changed since last asked."""

    def __init__(self, node_id: str, config: LinkStateConfig) -> None:
        self.node_id = node_id
        self._config = config
        self.ls_seq = 0
        self._own: dict[str, int] = {}
        self._own_dirty = False
        self.nodes: dict[str, RemoteNode] = {}
        self._named: dict[str, int] = {}  # node -> how many link states (own included) list it
        self._changed: set[str] = {node_id}

    # -- own link state ------------------------------------------------------------------------------------
    @property
    def own_peers(self) -> dict[str, int]:
        return self._own

    @property
    def own_dirty(self) -> bool:
        return self._own_dirty

    def own_ls(self) -> LinkState:
        return LinkState(self.node_id, self.ls_seq, dict(self._own))

    def set_own_peer(self, node: str, cost: int) -> None:
        if self._own.get(node) != cost:
            self._rename(self._own, {**self._own, node: cost})
            self._own[node] = cost
            self._own_dirty = True

    def del_own_peer(self, node: str) -> None:
        if node in self._own:
            self._rename(self._own, {p: c for p, c in self._own.items() if p != node})
            del self._own[node]
            self._own_dirty = True

    def commit_own(self) -> bool:
        """Publish pending own-LS changes: bump ``ls_seq``; True if there were any."""
        if not self._own_dirty:
            return False
        self._own_dirty = False
        self.ls_seq += 1
        self._changed.add(self.node_id)
        return True

    # -- remote nodes --------------------------------------------------------------------------------------
    def get(self, node: str) -> RemoteNode | None:
        return self.nodes.get(node)

    def learn(self, node: str, now: float) -> tuple[RemoteNode, bool]:
        """The record of ``node``, created if new: ``(record, created)``."""
        known = self.nodes.get(node)
        if known is not None:
            return known, False
        created = self.nodes[node] = RemoteNode(node, now, last_seen=now, anchored_at=now)
        return created, True

    def peers_of(self, node: str) -> dict[str, int] | None:
        """The link state held for ``node`` (own included); None if unknown."""
        if node == self.node_id:
            return self._own
        known = self.nodes.get(node)
        return None if known is None else known.peers

    def is_named(self, node: str) -> bool:
        return self._named.get(node, 0) > 0

    def observe_instance(self, node: RemoteNode, instance: int, now: float) -> Verdict:
        if node.instance is None:
            node.instance = instance
            return Verdict.NEW
        if instance == node.instance:
            return Verdict.SAME
        if instance > node.instance:
            node.instance = instance
            node.instance_changed_at = now
            return Verdict.RESTART
        if not within(now, node.instance_changed_at, self._config.node_grace):
            return Verdict.DUPLICATE
        return Verdict.STALE

    def restart(self, node: RemoteNode) -> None:
        """``node`` restarted: forget its link state."""
        self._set_peers(node, None)
        node.ls_seq = 0
        node.lsr_at, node.lsr_seq = -math.inf, 0

    def refresh(self, node: RemoteNode, now: float) -> None:
        """An RA from ``node``: its link state is still current."""
        node.last_seen = now

    def update_ls(self, ls: LinkState, now: float) -> list[str] | None:
        """Store ``ls`` if newer than held: the ids it named that were unknown so far; None if not newer."""
        node = self.nodes[ls.id]
        if ls.ls_seq <= node.ls_seq:
            return None
        self._set_peers(node, dict(ls.peers))
        node.ls_seq = ls.ls_seq
        node.last_seen = node.anchored_at = now
        created = []
        for peer in ls.peers:
            if peer != self.node_id and peer not in self.nodes:
                self.learn(peer, now)
                created.append(peer)
        return created

    def expire(self, now: float, is_neighbor: Callable[[str], bool]) -> tuple[list[str], list[str]]:
        """Clear aged link states and delete forgotten nodes: ``(aged ids, deleted ids)``."""
        aged: list[str] = []
        deleted: list[str] = []
        for node in list(self.nodes.values()):
            if node.peers is not None and not within(now, node.last_seen, self._config.ls_max_age):
                self._set_peers(node, None)
                node.ls_seq = 0
                aged.append(node.id)
            if node.peers or self.is_named(node.id) or is_neighbor(node.id):
                node.anchored_at = now
            elif not within(now, node.anchored_at, self._config.node_grace):
                self._set_peers(node, None)
                del self.nodes[node.id]
                self._changed.add(node.id)
                deleted.append(node.id)
        return aged, deleted

    def take_changes(self) -> set[str]:
        """Ids whose link state changed since the last call (own id included)."""
        changed, self._changed = self._changed, set()
        return changed

    @property
    def has_changes(self) -> bool:
        return bool(self._changed)

    # -- internals -----------------------------------------------------------------------------------------
    def _set_peers(self, node: RemoteNode, peers: dict[str, int] | None) -> None:
        if node.peers == peers:
            return
        self._rename(node.peers or {}, peers or {})
        node.peers = peers
        self._changed.add(node.id)

    def _rename(self, old: dict[str, int], new: dict[str, int]) -> None:
        for peer in old:
            if peer not in new:
                left = self._named[peer] - 1
                if left:
                    self._named[peer] = left
                else:
                    del self._named[peer]
        for peer in new:
            if peer not in old:
                self._named[peer] = self._named.get(peer, 0) + 1
