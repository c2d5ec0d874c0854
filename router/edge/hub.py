"""An interior's side of edge mode: the edges attached here, the addresses they proxy, what each is told.

An edge is a destination of the interior like a peer node (a data link pair), but it runs no link-state
protocol: the interior holds the edge's addresses (`on_addr`) and advertises them to the mesh as its own
mobile addresses, merged with those of its own clients (`local`): one advertisement per address, however
many edges have it. For each address an edge watches, the edge is told whether a destination other than
itself exists (`evaluate`, after the interior's table changed for the address): that is what lets the
edge give its producers credit end to end. An edge's dynamic addresses (`_topo/0/<edge>/...`) are
reachable from the whole mesh through the mobile address `_edge/<edge>` that its interior advertises.

Costs stay O(edges x changed addresses): an address change of one edge touches the edges watching that
address, never every edge. An edge cannot inject link-state (its control link carries only edge
messages) nor take the id of this node, of an interior node or of another edge attached here (`admit`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from router.edge.messages import EDGE_REACH, EdgeMessage

EDGE_PREFIX = "_edge/"


def edge_key(edge_id: str) -> str:
    """The mobile address an interior advertises for an edge attached to it."""
    return EDGE_PREFIX + edge_id


class EdgeRecord:
    """One edge connection at this interior."""

    __slots__ = ("edge_id", "link", "active", "consumers", "watch", "told")

    def __init__(self, edge_id: str, link: object) -> None:
        self.edge_id = edge_id
        self.link = link
        self.active = False             # the edge routes through us (its first full EDGE_ADDR came)
        self.consumers: set[str] = set()    # addresses it has consumers for
        self.watch: set[str] = set()        # addresses it wants to hear about
        self.told: set[str] = set()         # watched addresses it was told are reachable elsewhere


class EdgeHub:
    """The edges of one interior node."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.edges: dict[object, EdgeRecord] = {}       # link -> record
        self.by_id: dict[str, EdgeRecord] = {}
        self.holders: dict[str, set[str]] = {}          # address -> active edges with consumers for it
        self.watchers: dict[str, set[object]] = {}      # address -> links of edges watching it
        self.local_keys: set[str] = set()               # this node's own local mobile addresses
        self._advertised: dict[str, int] = {}           # address -> reasons to advertise it
        self._mobile: list[tuple[str, bool]] = []       # advertisement changes for the link-state engine
        self._holder_changes: set[str] = set()          # addresses whose edge holders changed
        self._watch_changes: list[tuple[str, bool]] = []   # addresses to start / stop watching
        self._dirty: set[str] = set()                   # addresses to evaluate for their watchers
        self._full: set[object] = set()                 # links owed a full EDGE_REACH
        self.refused = 0                                # edges refused by `admit`

    # ---- edges come and go --------------------------------------------------------------------------
    def admit(self, edge_id: str, link: object, interiors: Collection[str], bound: bool = False,
              certificate_cn: str | None = None) -> str | None:
        """Why an edge claiming `edge_id` on `link` must be refused (None: admitted). `interiors`: the
        interior nodes this node knows of; `bound`: the edge's id must be `certificate_cn`, the subject CN
        of its (verified) client certificate."""
        problem = None
        if not edge_id:
            problem = "an edge needs a container id"
        elif bound and certificate_cn != edge_id:
            problem = (f"edge id {edge_id!r} is not its certificate's common name {certificate_cn!r}"
                       if certificate_cn else f"edge id {edge_id!r}: its certificate has no common name")
        elif edge_id == self.node_id:
            problem = f"edge id {edge_id!r} is this interior's own id"
        elif edge_id in interiors:
            problem = f"edge id {edge_id!r} belongs to an interior node of the mesh"
        elif edge_id in self.by_id and self.by_id[edge_id].link is not link:
            problem = f"an edge with id {edge_id!r} is attached here already"
        if problem is not None:
            self.refused += 1
        return problem

    def edge_up(self, link: object, edge_id: str) -> EdgeRecord:
        rec = self.edges.get(link)
        if rec is None:
            rec = self.edges[link] = self.by_id[edge_id] = EdgeRecord(edge_id, link)
        return rec

    def edge_down(self, link: object) -> EdgeRecord | None:
        """The edge connection `link` is gone: everything it proxied is withdrawn."""
        rec = self.edges.pop(link, None)
        if rec is None:
            return None
        if self.by_id.get(rec.edge_id) is rec:
            del self.by_id[rec.edge_id]
        self._deactivate(rec)
        self._full.discard(link)
        return rec

    def _deactivate(self, rec: EdgeRecord) -> None:
        for key in list(rec.consumers):
            self._remove_holder(rec, key)
        for key in list(rec.watch):
            self._unwatch(rec, key)
        rec.told = set()
        if rec.active:
            rec.active = False
            self._advertise(edge_key(rec.edge_id), -1)

    # ---- what edges say ------------------------------------------------------------------------------
    def on_addr(self, link: object, m: EdgeMessage) -> None:
        """An EDGE_ADDR from the edge on `link`."""
        rec = self.edges.get(link)
        if rec is None:
            return
        if m.full:
            self._deactivate(rec)
            if not m.active:
                return
            rec.active = True
            self._advertise(edge_key(rec.edge_id), +1)
            self._full.add(link)
        elif not rec.active:
            return                      # a diff before any full message: not an edge routing through us
        for key in m.remove:
            self._remove_holder(rec, key)
        for key in m.add:
            if key not in rec.consumers:
                rec.consumers.add(key)
                self.holders.setdefault(key, set()).add(rec.edge_id)
                self._holder_changes.add(key)
                self._advertise(key, +1)
        for key in m.unwatch:
            self._unwatch(rec, key)
        for key in m.watch:
            if key not in rec.watch:
                rec.watch.add(key)
                links = self.watchers.get(key)
                if links is None:
                    links = self.watchers[key] = set()
                    self._watch_changes.append((key, True))
                links.add(link)
                self._dirty.add(key)

    def _remove_holder(self, rec: EdgeRecord, key: str) -> None:
        if key not in rec.consumers:
            return
        rec.consumers.discard(key)
        edges = self.holders.get(key)
        if edges is not None:
            edges.discard(rec.edge_id)
            if not edges:
                del self.holders[key]
        self._holder_changes.add(key)
        self._advertise(key, -1)

    def _unwatch(self, rec: EdgeRecord, key: str) -> None:
        if key not in rec.watch:
            return
        rec.watch.discard(key)
        rec.told.discard(key)
        links = self.watchers.get(key)
        if links is not None:
            links.discard(rec.link)
            if not links:
                del self.watchers[key]
                self._watch_changes.append((key, False))

    # ---- this node's own addresses ----------------------------------------------------------------------
    def local(self, key: str, present: bool) -> None:
        """This node's mobile address `key` got its first local consumer (present) or lost its last."""
        if present and key not in self.local_keys:
            self.local_keys.add(key)
            self._advertise(key, +1)
        elif not present and key in self.local_keys:
            self.local_keys.discard(key)
            self._advertise(key, -1)

    def _advertise(self, key: str, delta: int) -> None:
        n = self._advertised.get(key, 0) + delta
        if n > 0:
            self._advertised[key] = n
            if n == 1 and delta > 0:
                self._mobile.append((key, True))
        else:
            self._advertised.pop(key, None)
            self._mobile.append((key, False))

    # ---- what the node takes -------------------------------------------------------------------------------
    def take_mobile_changes(self) -> list[tuple[str, bool]]:
        """Mobile addresses this node starts (True) or stops advertising, in order."""
        out, self._mobile = self._mobile, []
        return out

    def take_holder_changes(self) -> set[str]:
        """Addresses whose edge holders changed (the core's remote destinations follow them)."""
        out, self._holder_changes = self._holder_changes, set()
        return out

    def take_watch_changes(self) -> list[tuple[str, bool]]:
        """Addresses whose table entry the node starts (True) or stops following for the edges."""
        out, self._watch_changes = self._watch_changes, []
        return out

    @property
    def pending(self) -> bool:
        return bool(self._mobile or self._holder_changes or self._watch_changes or self._dirty or self._full)

    def holders_of(self, key: str) -> tuple[str, ...]:
        """The edges attached here that have consumers for `key`."""
        edges = self.holders.get(key)
        return tuple(sorted(edges)) if edges else ()

    def changed(self, key: str) -> None:
        """The node's table entry for watched address `key` changed: evaluate it for its watchers."""
        if key in self.watchers:
            self._dirty.add(key)

    def evaluate(self, elsewhere: Callable[[str, str], bool]) -> list[tuple[object, EdgeMessage]]:
        """The EDGE_REACH messages owed: `elsewhere(key, edge_id)` says whether `key` has a destination
        other than edge `edge_id` here or beyond."""
        diffs: dict[object, tuple[list[str], list[str]]] = {}
        for key in self._dirty:
            for link in self.watchers.get(key, ()):
                if link in self._full:
                    continue
                rec = self.edges[link]
                now = elsewhere(key, rec.edge_id)
                if now != (key in rec.told):
                    add, remove = diffs.setdefault(link, ([], []))
                    if now:
                        rec.told.add(key)
                        add.append(key)
                    else:
                        rec.told.discard(key)
                        remove.append(key)
        self._dirty.clear()
        out = []
        for link in self._full:
            rec = self.edges.get(link)
            if rec is None:
                continue
            rec.told = {k for k in rec.watch if elsewhere(k, rec.edge_id)}
            out.append((link, EdgeMessage(EDGE_REACH, sorted(rec.told), [], full=True)))
        self._full.clear()
        for link, (add, remove) in diffs.items():
            out.append((link, EdgeMessage(EDGE_REACH, sorted(add), sorted(remove))))
        return out

    def snapshot(self) -> dict:
        return {"edges": len(self.edges), "active_edges": sum(1 for r in self.edges.values() if r.active),
                "proxied_addresses": len(self.holders), "watched": len(self.watchers),
                "refused": self.refused}
