"""EdgeSim: interiors' real link-state engines (tests.support.linkstate_sim) plus real edge-mode objects
(router.edge: each interior's EdgeHub, each edge's EdgeProxy and UplinkChoice), on a simulated clock.

Edge control messages go straight from object to object (as the adapter would carry them on an edge
connection's control link) and are counted with the keys they carry; the interiors' link-state traffic is
SimNetwork's. "Elsewhere" for an edge is what an interior's forwarding core would answer: another edge
attached to that interior has consumers for the address, or another interior advertises it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from router.edge.hub import EdgeHub
from router.edge.messages import EdgeMessage
from router.edge.proxy import EdgeProxy
from router.edge.uplinks import UplinkChoice
from tests.support.linkstate_sim import SimNetwork


class EdgeSim:
    """`interiors` fully meshed; edges attached with uplinks `[I(k mod n), I(k+1 mod n)]`."""

    def __init__(self, interiors: int = 3, step: float = 0.1) -> None:
        self.net = SimNetwork(step)
        self.interiors = [f"I{i}" for i in range(interiors)]
        for name in self.interiors:
            self.net.add_node(name)
        for i, a in enumerate(self.interiors):
            for b in self.interiors[i + 1:]:
                self.net.connect(a, b)
        self.hubs = {name: EdgeHub(name) for name in self.interiors}
        self.proxies: dict[str, EdgeProxy] = {}
        self.choices: dict[str, UplinkChoice] = {}
        self.alive = set(self.interiors)
        self.traffic: Counter[str] = Counter()      # edge_msgs, edge_keys, reach_msgs, reach_keys
        self._epochs: dict[str, int] = {}           # each engine's routes epoch the hub last followed

    # ---- building ---------------------------------------------------------------------------------------
    def add_edge(self, edge_id: str, index: int, consumers: Iterable[str] = (),
                 producers: Iterable[str] = ()) -> None:
        n = len(self.interiors)
        proxy = self.proxies[edge_id] = EdgeProxy()
        choice = self.choices[edge_id] = UplinkChoice()
        for key in consumers:
            proxy.local_address(key, True)
        proxy.set_producers(set(producers))
        for rank, i in enumerate((index % n, (index + 1) % n)):
            interior = self.interiors[i]
            if interior in self.alive:
                self.hubs[interior].edge_up((edge_id, interior), edge_id)
                u = choice.up((edge_id, interior), rank + 1, rank, interior, self.net.now)
                if u is not None:
                    self._send_up(edge_id, proxy.activate(u.link)[0])

    def _send_up(self, edge_id: str, m: EdgeMessage | None) -> None:
        if m is None:
            return
        link = self.proxies[edge_id].active
        self.traffic["edge_msgs"] += 1
        self.traffic["edge_keys"] += len(m.add) + len(m.remove) + len(m.watch) + len(m.unwatch)
        self.hubs[link[1]].on_addr(link, m)

    # ---- events -----------------------------------------------------------------------------------------
    def add_address(self, edge_id: str, key: str) -> None:
        proxy = self.proxies[edge_id]
        proxy.local_address(key, True)
        self._send_up(edge_id, proxy.take_message())

    def kill_interior(self, name: str) -> None:
        """Interior `name` dies: its link-state connections close, its edges fail over at once."""
        self.alive.discard(name)
        for pair in [p for p in self.net.edges if name in p]:
            for end in self.net._close(pair):
                if end.node != name:
                    self.net.emit(end.node, end.engine.link_down(end.link, self.net.now))
        del self.net.engines[name]
        for edge_id, choice in self.choices.items():
            link = (edge_id, name)
            if link in choice.open:
                u = choice.down(link, self.net.now)
                if u is not None:
                    self._send_up(edge_id, self.proxies[edge_id].activate(u.link)[0])

    # ---- the interiors' side, once per step --------------------------------------------------------------
    def settle(self, seconds: float = 2.0) -> None:
        """Run steps for `seconds`: hubs' advertisements into the engines, table changes into REACHes."""
        for _ in range(round(seconds / self.net.step_size)):
            self._interiors()
            self.net.step()
            self._interiors()

    def _interiors(self) -> None:
        for name in sorted(self.alive):
            hub, engine = self.hubs[name], self.net.engines[name]
            for key, present in hub.take_mobile_changes():
                (engine.add_local_address if present else engine.remove_local_address)(key)
            hub.take_watch_changes()
            for key in hub.take_holder_changes():
                hub.changed(key)
            changed = engine.take_address_changes()
            epoch = engine.routes_epoch
            if changed is None or self._epochs.get(name) != epoch:     # paths changed: the core re-reads all
                self._epochs[name] = epoch
                changed = list(hub.watchers)
            for key in changed:
                hub.changed(key)

            def elsewhere(key: str, edge_id: str, hub: EdgeHub = hub, engine=engine) -> bool:
                edges = hub.holders.get(key)
                if edges and (len(edges) > 1 or edge_id not in edges):
                    return True
                return any(n in engine.reachable for n in engine.holders_of(key))
            for link, m in hub.evaluate(elsewhere):
                self.traffic["reach_msgs"] += 1
                self.traffic["reach_keys"] += len(m.add) + len(m.remove)
                self.proxies[link[0]].on_reach(link, m)

    # ---- measures ---------------------------------------------------------------------------------------
    def tables(self) -> dict[str, dict[str, int]]:
        """Per interior: edges attached, addresses proxied, watched, advertised, known from the mesh."""
        out = {}
        for name in sorted(self.alive):
            hub, engine = self.hubs[name], self.net.engines[name]
            out[name] = {"edges": len(hub.edges), "proxied": len(hub.holders), "watched": len(hub.watchers),
                         "advertised": len(engine.local_addresses), "known": len(engine.known_addresses)}
        return out

    def control(self) -> Counter[str]:
        """Edge control traffic and link-state messages delivered so far."""
        return Counter({**self.traffic, "linkstate_msgs": sum(self.net.delivered.values())})
