"""Edge mode's glue (docs/EDGE.md): the sans-IO decisions of router.edge, carried over router links.

An edge connection is made like an inter-router one (role `edge` on both ends: a control link pair and a
data link pair, router.adapter.routerlinks), but its control link carries only edge messages
(router.edge.messages), never link-state. `EdgeUplinks` runs on an edge node: it picks the active uplink
(router.edge.uplinks), keeps it told of the edge's addresses (router.edge.proxy) and gives the core its
routes: every address the interior can reach, and everything unknown here, goes to that interior.
`InteriorEdges` runs on an interior: it admits edges (router.edge.hub), merges their addresses with the
node's own for the link-state engine and the core, and tells each edge what it can reach.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping

from router.edge.hub import EdgeHub
from router.edge.messages import EDGE_ADDR, EDGE_REACH, EdgeMessage, EdgeMessageError, decode, encode
from router.edge.proxy import EdgeProxy
from router.edge.uplinks import UplinkChoice
from router.logs import LogOnce

log = logging.getLogger(__name__)

EDGE_RADIUS = 1000          # an edge ignores hop counts: it only delivers down or sends up
PRODUCER_SCAN = 0.05        # seconds between scans of an edge's producers' addresses (more often on change)
TOPO = "_topo/"


class _Everyone(frozenset):
    """Valid origins of an edge attached here: every origin's tree reaches it through this node."""

    def __contains__(self, item: object) -> bool:
        return True


EVERYONE = _Everyone()


class EdgeUplinks:
    """An edge node's uplinks and what its core routes through the active one."""

    def __init__(self, core: object, send: Callable[[object, bytes], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core = core
        self._send = send
        self._clock = clock
        self.choice = UplinkChoice()
        self.proxy = EdgeProxy()
        self._bad = LogOnce(log)
        self._scanned = -1.0
        self._producers = -1
        self.failovers = 0

    @property
    def active(self) -> object:
        u = self.choice.active
        return u.link if u is not None else None

    # ---- router links' events ------------------------------------------------------------------------
    def opened(self, conn: object, peer: object) -> str | None:
        return None

    def link_up(self, conn: object, peer: object) -> None:
        index = getattr(conn.connector, "index", 0)
        log.info("uplink to interior %s open (cost %d)", peer.node_id, peer.cost)
        self._activate(self.choice.up(conn, peer.cost, index, peer.node_id, self._clock()))

    def link_down(self, conn: object, peer: object) -> None:
        was = self.active is conn
        nxt = self.choice.down(conn, self._clock())
        if was:
            log.warning("uplink to interior %s lost; %s", peer.node_id,
                        f"moving to {nxt.interior}" if nxt is not None else "no other uplink is open")
            self.failovers += 1
            if nxt is None:
                self._routes(None)
                self.proxy.activate(None)
        self._activate(nxt)

    def on_control(self, conn: object, data: bytes) -> None:
        try:
            m = decode(data, EDGE_REACH)
        except EdgeMessageError as exc:
            self._bad.once(("bad", id(conn)), logging.WARNING, "dropped an edge control message: %s", exc)
            return
        changed = self.proxy.on_reach(conn, m)
        if changed:
            interior = self.choice.active.interior
            reachable = self.proxy.reachable
            self.core.update_remote_addresses(
                changed, lambda key: (interior,) if key in reachable else ())

    # ---- decisions carried out ----------------------------------------------------------------------
    def _activate(self, u: object) -> None:
        if u is None:
            return
        old = [link for link in self.choice.open if link is not u.link and link is self.proxy.active]
        for link in old:        # re-balanced away from a live uplink: it drops what we proxied there
            self._send(link, encode(EdgeMessage(EDGE_ADDR, full=True, active=False)))
        log.info("edge traffic goes through interior %s", u.interior)
        self.sync_local()
        m, _lost = self.proxy.activate(u.link)
        self._routes(u)
        self._send(u.link, encode(m))

    def _routes(self, u: object) -> None:
        core = self.core
        if u is None:
            core.default_node = None
            core.set_routes({}, {}, EDGE_RADIUS, dict)
            return
        out = u.link.router.data_consumer
        core.default_node = u.interior
        core.set_routes({u.interior: (u.cost, out)} if out is not None else {}, {}, EDGE_RADIUS, dict)

    def sync_local(self) -> None:
        """Take the core's local address changes and, when due, its producers' addresses."""
        core = self.core
        for key, present in core.take_local_address_changes():
            self.proxy.local_address(key, present)
        now = self._clock()
        if len(core.producers) != self._producers or now - self._scanned >= PRODUCER_SCAN:
            self._producers = len(core.producers)
            self._scanned = now
            self.proxy.set_producers({p.address.key for p in core.producers
                                      if p.address is not None and not p.router
                                      and not p.address.key.startswith(TOPO)})

    def sync(self) -> None:
        """Once per pump: tell the active uplink what changed; re-balance to a cheaper uplink."""
        self._activate(self.choice.tick(self._clock()))
        self.sync_local()
        m = self.proxy.take_message()
        if m is not None:
            self._send(self.proxy.active, encode(m))

    def snapshot(self) -> dict:
        u = self.choice.active
        return {"mode": "edge", "uplink": u.interior if u is not None else None,
                "uplinks_open": len(self.choice.open), "failovers": self.failovers,
                "proxied": len(self.proxy.consumers), "watched": len(self.proxy.watched),
                "reachable": len(self.proxy.reachable)}


class _Holders(Mapping):
    """Mobile address -> nodes holding it: the link-state engine's view plus this node's edges."""

    def __init__(self, ls: Mapping[str, frozenset[str]], hub: EdgeHub) -> None:
        self.ls = ls
        self.hub = hub

    def __getitem__(self, key: str) -> frozenset[str]:
        edges = self.hub.holders.get(key)
        mesh = self.ls.get(key)
        if edges is None and mesh is None:
            raise KeyError(key)
        return frozenset(mesh or ()) | frozenset(edges or ())

    def __iter__(self) -> Iterator[str]:
        yield from self.ls
        for key in self.hub.holders:
            if key not in self.ls:
                yield key

    def __len__(self) -> int:
        return len(self.ls) + sum(1 for k in self.hub.holders if k not in self.ls)


class _Origins(Mapping):
    """The link-state engine's valid origins, and every origin for the edges attached here."""

    def __init__(self, valid: Mapping[str, frozenset[str]], edges: set[str]) -> None:
        self.valid = valid
        self.edges = edges

    def __getitem__(self, node: str) -> frozenset[str]:
        if node in self.edges:
            return EVERYONE
        return self.valid[node]

    def __iter__(self) -> Iterator[str]:
        yield from self.valid
        yield from self.edges

    def __len__(self) -> int:
        return len(self.valid) + len(self.edges)


class InteriorEdges:
    """An interior node's edges: admitted, their addresses merged with the node's own, each told what
    it can reach."""

    def __init__(self, core: object, mesh: object, send: Callable[[object, bytes], None],
                 watch: Callable[[str, Callable[[], None]], Callable[[], None]],
                 links: object) -> None:
        self.core = core
        self.mesh = mesh
        self.hub = EdgeHub(core.node_id)
        self._send = send
        self._watch = watch             # the server's watch_address
        self._unwatch: dict[str, Callable[[], None]] = {}
        self._links = links             # router.adapter.routerlinks.RouterLinks (routes_changed)
        self._bad = LogOnce(log)

    # ---- router links' events ------------------------------------------------------------------------
    def opened(self, conn: object, peer: object) -> str | None:
        """Why the edge at the end of `conn` is refused, or None (router.edge.hub `admit`); on a listener
        with `tls.bind_edge_id` the edge's id must be its certificate's CN."""
        ls = self.mesh.ls
        interiors = set(ls.costs) | set(ls.neighbors)
        bound = getattr(conn, "bind_edge_id", False)
        return self.hub.admit(peer.node_id, conn, interiors, bound, conn.certificate_cn if bound else None)

    def link_up(self, conn: object, peer: object) -> None:
        log.info("edge %s attached (connection %s)", peer.node_id, conn.peer)
        self.hub.edge_up(conn, peer.node_id)
        self.core.edge_nodes.add(peer.node_id)
        self._links.routes_changed()

    def link_down(self, conn: object, peer: object) -> None:
        rec = self.hub.edge_down(conn)
        if rec is not None:
            log.info("edge %s detached", rec.edge_id)
            if rec.edge_id not in self.hub.by_id:
                self.core.edge_nodes.discard(rec.edge_id)
        self._links.routes_changed()
        self.mesh.pending = True

    def on_control(self, conn: object, data: bytes) -> None:
        try:
            m = decode(data, EDGE_ADDR)
        except EdgeMessageError as exc:
            self._bad.once(("bad", id(conn)), logging.WARNING,
                           "dropped an edge control message from %s: %s", conn.peer, exc)
            return
        self.hub.on_addr(conn, m)
        self.mesh.pending = True

    # ---- merged into the control plane ---------------------------------------------------------------
    def local_address(self, key: str, present: bool) -> None:
        self.hub.local(key, present)
        self._mobile()

    def _mobile(self) -> None:
        for key, present in self.hub.take_mobile_changes():
            self.mesh.local_address(key, present)

    def holders_of(self, ls: object) -> Callable[[str], tuple[str, ...]]:
        hub = self.hub

        def holders(key: str) -> tuple[str, ...]:
            edges = hub.holders.get(key)
            mesh = ls.holders_of(key)
            return (*mesh, *sorted(edges)) if edges else mesh
        return holders

    def holders(self, ls: object) -> Mapping[str, frozenset[str]]:
        return _Holders(ls.known_addresses, self.hub)

    def add_nodes(self, nodes: dict) -> None:
        """The edges attached here as nodes of the core's view: (cost, data-out link)."""
        for conn, rec in self.hub.edges.items():
            out = conn.router.data_consumer if conn.router is not None else None
            if out is not None and out.alive and conn.alive:
                nodes[rec.edge_id] = (conn.router.cost, out)

    def valid_origins(self, ls: object) -> Mapping[str, frozenset[str]]:
        return _Origins(ls.valid_origins, set(self.hub.by_id))

    def sync(self) -> None:
        """Once per pump: edges' address changes into the core and the link-state engine; what each
        edge can reach, to it."""
        hub = self.hub
        if not hub.pending:
            return
        self._mobile()
        for key, on in hub.take_watch_changes():
            if on:
                self._unwatch[key] = self._watch(key, lambda key=key: hub.changed(key))
            else:
                stop = self._unwatch.pop(key, None)
                if stop is not None:
                    stop()
        changed = hub.take_holder_changes()
        if changed:
            self.core.update_remote_addresses(changed, self.holders_of(self.mesh.ls))
            for key in changed:
                hub.changed(key)
        core = self.core

        def elsewhere(key: str, edge_id: str) -> bool:
            a = core.addresses.get(key)
            return a is not None and (bool(a.consumers) or any(d.node != edge_id for d in a.remote))
        for conn, m in hub.evaluate(elsewhere):
            self._send(conn, encode(m))

    def snapshot(self) -> dict:
        return {"mode": "interior", **self.hub.snapshot(),
                "edge_ids": sorted(r.edge_id for r in self.hub.edges.values())[:100]}
