"""The HELLO protocol: which nodes we hear, which of them hear us, and the link each neighbour is bound to.

A node is a *neighbour* once a HELLO from it, received on link L, lists our id in ``seen`` (bidirectional).
It stays one while such HELLOs, or any other input on a link it is confirmed on (:meth:`NeighborTable.heard`:
a busy peer's HELLO may wait behind its other output), keep arriving within ``hello_max_age`` - unless its
last HELLO on that link stopped listing us - and is lost at once
when its last link goes down. Two links to the same peer (an old connection not yet closed) are tolerated:
the neighbour stays bound to the first one and moves to the other when that one is lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from router.linkstate.config import LinkStateConfig, due, within
from router.linkstate.envelope import LinkId
from router.linkstate.messages import Hello


class NeighborChange(NamedTuple):
    """``node`` became a neighbour or moved link (``cost`` = cost of its link now), or was lost (None)."""

    node: str
    cost: int | None
    new: bool = False  # True when ``node`` was not a neighbour before


class HelloResult(NamedTuple):
    newly_heard: bool  # first HELLO from this sender (within max age): worth an immediate answer
    changes: list[NeighborChange]


@dataclass(slots=True)
class _Neighbor:
    bound: LinkId
    confirmed: dict[LinkId, float] = field(default_factory=dict)  # link -> last confirming HELLO
    denied: set[LinkId] = field(default_factory=set)  # links whose last HELLO did not list us


class NeighborTable:
    """Links, heard ids and bidirectional neighbours of one node."""

    def __init__(self, node_id: str, instance: int, config: LinkStateConfig) -> None:
        self.node_id = node_id
        self.instance = instance
        self._config = config
        self._links: dict[LinkId, int] = {}  # up links -> cost
        self._heard: dict[str, float] = {}  # ids heard -> last HELLO (our `seen` list)
        self._heard_on: dict[LinkId, str] = {}  # link -> id last heard on it
        self._neighbors: dict[str, _Neighbor] = {}
        self._last_hello = -math.inf
        self._bound: dict[str, LinkId] | None = None  # cache of bound_links()

    # -- views ---------------------------------------------------------------------------------------------
    @property
    def links(self) -> dict[LinkId, int]:
        """Up links and their cost (do not modify)."""
        return self._links

    def bound_links(self) -> dict[str, LinkId]:
        """Neighbour id -> the link it is bound to (do not modify)."""
        if self._bound is None:
            self._bound = {node: n.bound for node, n in self._neighbors.items()}
        return self._bound

    def link_of(self, node: str) -> LinkId | None:
        n = self._neighbors.get(node)
        return None if n is None else n.bound

    def is_neighbor(self, node: str) -> bool:
        return node in self._neighbors

    def peer_on(self, link_id: LinkId) -> str | None:
        """The node last heard on ``link_id``."""
        return self._heard_on.get(link_id)

    # -- links ---------------------------------------------------------------------------------------------
    def link_up(self, link_id: LinkId, cost: int) -> list[NeighborChange]:
        """A link is up, or (known link) its cost changed: the neighbour bound to it has a new cost."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise ValueError(f"link cost must be an integer >= 1, not {cost!r}")
        old = self._links.get(link_id)
        self._links[link_id] = cost
        peer = self._heard_on.get(link_id)
        n = self._neighbors.get(peer) if peer is not None else None
        if old is None or old == cost or n is None or n.bound != link_id:
            return []
        return [NeighborChange(peer, cost)]

    def link_down(self, link_id: LinkId) -> list[NeighborChange]:
        """Forget ``link_id`` at once; the neighbour on it moves to another link or is lost."""
        if self._links.pop(link_id, None) is None:
            return []
        peer = self._heard_on.pop(link_id, None)
        if peer is None:
            return []
        if peer not in self._heard_on.values():
            self._heard.pop(peer, None)  # so a reconnecting peer is answered at once
        n = self._neighbors.get(peer)
        if n is None or link_id not in n.confirmed:
            return []
        del n.confirmed[link_id]
        return self._rebind(peer, n, link_id)

    # -- HELLO ---------------------------------------------------------------------------------------------
    def hello_due(self, now: float) -> bool:
        return due(now, self._last_hello, self._config.hello_interval)

    def hello(self) -> Hello:
        """Our HELLO as of now."""
        return Hello(self.node_id, self.instance, tuple(sorted(self._heard)))

    def hello_sent(self, now: float) -> None:
        """The periodic HELLO went out at ``now``."""
        self._last_hello = now

    def receive(self, hello: Hello, now: float, link_id: LinkId) -> HelloResult:
        """Take a HELLO received on ``link_id`` (an up link)."""
        sender = hello.id
        newly_heard = sender not in self._heard
        self._heard[sender] = now
        previous = self._heard_on.get(link_id)
        self._heard_on[link_id] = sender
        changes: list[NeighborChange] = []
        if previous is not None and previous != sender:
            changes += self._unconfirm(previous, link_id)  # another node now answers on this link
        if self.node_id not in hello.seen:
            n = self._neighbors.get(sender)
            if n is not None:
                n.denied.add(link_id)       # it does not hear us there: other input is no sign of life
        else:
            n = self._neighbors.get(sender)
            if n is None:
                self._bound = None
                self._neighbors[sender] = _Neighbor(link_id, {link_id: now})
                changes.append(NeighborChange(sender, self._links[link_id], new=True))
            else:
                n.confirmed[link_id] = now
                n.denied.discard(link_id)
        return HelloResult(newly_heard, changes)

    def heard(self, link_id: LinkId, now: float) -> None:
        """Something (any frame) arrived on ``link_id``: the neighbour bound to it is alive, as if it had
        sent a HELLO (a busy peer whose HELLO waits behind other output is not declared lost)."""
        peer = self._heard_on.get(link_id)
        if peer is None:
            return
        n = self._neighbors.get(peer)
        if n is not None and link_id in n.confirmed and link_id not in n.denied:
            n.confirmed[link_id] = now
            self._heard[peer] = now

    def expire(self, now: float) -> list[NeighborChange]:
        """Drop ids not heard, and neighbour links not confirmed, within hello max age."""
        max_age = self._config.hello_max_age
        for node in [node for node, t in self._heard.items() if not within(now, t, max_age)]:
            del self._heard[node]
        changes: list[NeighborChange] = []
        for node, n in list(self._neighbors.items()):
            stale = [link for link, t in n.confirmed.items() if not within(now, t, max_age)]
            for link in stale:
                del n.confirmed[link]
            if n.bound in stale:
                changes += self._rebind(node, n, n.bound)
        return changes

    # -- internals -----------------------------------------------------------------------------------------
    def _unconfirm(self, node: str, link_id: LinkId) -> list[NeighborChange]:
        n = self._neighbors.get(node)
        if n is None or n.confirmed.pop(link_id, None) is None:
            return []
        return self._rebind(node, n, link_id)

    def _rebind(self, node: str, n: _Neighbor, lost: LinkId) -> list[NeighborChange]:
        """``n`` lost link ``lost``: bind it to its freshest other link, or drop it."""
        if n.bound != lost:
            return []
        self._bound = None
        if not n.confirmed:
            del self._neighbors[node]
            return [NeighborChange(node, None)]
        n.bound = max(n.confirmed, key=lambda link: n.confirmed[link])
        return [NeighborChange(node, self._links[n.bound])]
