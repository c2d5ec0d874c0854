"""An edge's side of edge mode: what its active uplink is told, and what the interior said back.

The edge proxies its addresses as a whole, never per client link: an address is announced once when its
first local consumer attaches (`local_address`) and withdrawn when the last leaves; the addresses of its
local producers (and consumers) are watched, so the interior says which of them have destinations other
than this edge (`on_reach`). Those become the edge's remote addresses, held by one node (the interior):
a producer gets credit only when the address has a consumer somewhere (end to end, as on an interior);
anything else an anonymous sender sends, and every node-scoped address, goes up.
"""

from __future__ import annotations

from router.edge.messages import EDGE_ADDR, EdgeMessage, diff


class EdgeProxy:
    """The address sets of one edge and the messages that keep its active uplink in step."""

    def __init__(self) -> None:
        self.consumers: set[str] = set()    # mobile addresses with local consumers
        self.producers: set[str] = set()    # mobile addresses of local targeted producers
        self.reachable: set[str] = set()    # watched addresses the interior has other destinations for
        self.active: object = None          # the active uplink's link handle
        self._told_consumers: set[str] = set()   # what the active uplink holds
        self._told_watch: set[str] = set()
        self.sent = 0                       # messages produced (tests, management)

    @property
    def watched(self) -> set[str]:
        return self.consumers | self.producers

    def local_address(self, key: str, present: bool) -> None:
        """Mobile address `key` got its first local consumer (present) or lost its last one."""
        if present:
            self.consumers.add(key)
        else:
            self.consumers.discard(key)

    def set_producers(self, keys: set[str]) -> None:
        """The mobile addresses local targeted producers send to, now."""
        self.producers = set(keys)

    def activate(self, link: object) -> tuple[EdgeMessage, set[str]]:
        """`link` is the active uplink from now on (None: no uplink). Returns the full message for it and
        the addresses that were reachable through the old one (now unreachable until told again)."""
        self.active = link
        lost, self.reachable = self.reachable, set()
        self._told_consumers = set(self.consumers)
        self._told_watch = self.watched
        self.sent += 1
        return (EdgeMessage(EDGE_ADDR, sorted(self.consumers), [], sorted(self._told_watch), [], full=True),
                lost)

    def take_message(self) -> EdgeMessage | None:
        """The changes the active uplink has not heard yet, as one message (None: nothing new)."""
        if self.active is None:
            return None
        add, remove = diff(self._told_consumers, self.consumers)
        watched = self.watched
        watch, unwatch = diff(self._told_watch, watched)
        if not (add or remove or watch or unwatch):
            return None
        self._told_consumers = set(self.consumers)
        self._told_watch = watched
        self.sent += 1
        return EdgeMessage(EDGE_ADDR, add, remove, watch, unwatch)

    def on_reach(self, link: object, m: EdgeMessage) -> set[str]:
        """The interior's EDGE_REACH on `link`. Returns the addresses whose reachability changed (none
        when `link` is not the active uplink: a standby's word does not count)."""
        if link is not self.active:
            return set()
        before = set(self.reachable) if m.full else None
        if m.full:
            self.reachable = set(m.add)
        else:
            self.reachable.difference_update(m.remove)
            self.reachable.update(m.add)
        if before is not None:
            return before ^ self.reachable
        return set(m.add) | set(m.remove)
