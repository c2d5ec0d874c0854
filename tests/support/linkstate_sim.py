"""SimNetwork: real LinkStateEngines wired by in-memory links on a simulated clock.

Each connection is a pair of link ids, one per end. Messages an engine returns are queued in FIFO order
and delivered within the same step until the network is quiet (link latency << step), so a step is:
advance the clock, tick every engine, deliver. Hooks can drop, duplicate or delay messages on their way
(a delayed message arrives one step late, after messages sent after it: reordering).

``transit`` says who forwards a control message addressed to another node at a transit node:
``"engine"`` hands it to ``engine.handle`` (which forwards it); ``"adapter"`` does what a Proton adapter
would do to avoid decoding transit bodies: ask ``engine.route_control`` for the link and forward it.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from router.linkstate import LinkId, LinkStateConfig, LinkStateEngine, Outgoing
from router.linkstate.envelope import Scope, classify

Hook = Callable[[str, str, dict[str, Any]], bool]  # (from node, to node, message) -> act on it?


@dataclass(slots=True, eq=False)
class _End:
    """One direction of a connection: what arrives here is handled by ``node`` as coming on ``link``."""

    node: str
    link: LinkId
    engine: LinkStateEngine
    open: bool = True


class SimNetwork:
    """Engines, connections between them and a clock advanced in steps."""

    def __init__(self, step: float = 0.1, config: LinkStateConfig | None = None,
                 transit: str = "engine") -> None:
        if transit not in ("engine", "adapter"):
            raise ValueError(f"transit must be 'engine' or 'adapter', not {transit!r}")
        self.transit = transit
        self._targets: dict[str | None, str | None] = {}  # address -> node it is for (None: all/local)
        self.step_size = step
        self.config = config or LinkStateConfig()
        self.now = 0.0
        self.engines: dict[str, LinkStateEngine] = {}
        self.edges: dict[frozenset[str], tuple[_End, _End, int]] = {}  # node pair -> (end a, end b, cost)
        self._out: dict[str, dict[LinkId, _End]] = {}  # node -> its link -> the far end
        self._queue: deque[tuple[_End, dict[str, Any]]] = deque()
        self._ids = itertools.count(1)
        self.drop: Hook | None = None
        self.duplicate: Hook | None = None
        self.delay: Hook | None = None
        self._delayed: list[tuple[_End, dict[str, Any]]] = []   # held until the next step
        self.delivered: Counter[str] = Counter()  # opcode -> deliveries
        self.dropped: Counter[str] = Counter()  # opcode -> dropped by the hook
        self.observers: list[Callable[[str, str, dict[str, Any]], None]] = []  # (from, to, message)

    # -- building --------------------------------------------------------------------------------------------
    def add_node(self, name: str, instance: int = 1, node_id: str | None = None) -> LinkStateEngine:
        """Start an engine known to the harness as ``name``; its node id is ``node_id`` (default: name)."""
        engine = self.engines[name] = LinkStateEngine(node_id or name, instance, self.config)
        self._out[name] = {}
        return engine

    def connect(self, a: str, b: str, cost: int = 1) -> None:
        """Open a connection a-b; both ends are told at once (link_up)."""
        n = next(self._ids)
        at_a = _End(a, f"{a}>{b}#{n}", self.engines[a])
        at_b = _End(b, f"{b}>{a}#{n}", self.engines[b])
        self._out[a][at_a.link] = at_b
        self._out[b][at_b.link] = at_a
        self.edges[frozenset((a, b))] = (at_a, at_b, cost)
        self.emit(a, at_a.engine.link_up(at_a.link, cost, self.now))
        self.emit(b, at_b.engine.link_up(at_b.link, cost, self.now))

    def set_cost(self, a: str, b: str, cost: int) -> None:
        """Change the cost of the connection a-b (both ends are told, as the adapter would)."""
        at_a, at_b, _ = self.edges[frozenset((a, b))]
        self.edges[frozenset((a, b))] = (at_a, at_b, cost)
        for end in (at_a, at_b):
            self.emit(end.node, end.engine.link_up(end.link, cost, self.now))

    def disconnect(self, a: str, b: str) -> None:
        """Close the connection a-b: in-flight messages are lost, both ends are told at once (link_down)."""
        ends = self._close(frozenset((a, b)))
        for end in ends:
            self.emit(end.node, end.engine.link_down(end.link, self.now))

    def restart(self, node_id: str, instance: int) -> LinkStateEngine:
        """Kill ``node_id`` (its connections close) and start it again with ``instance``, reconnected."""
        pairs = [(pair, cost) for pair, (_, _, cost) in self.edges.items() if node_id in pair]
        for pair, _ in pairs:
            for end in self._close(pair):
                if end.node != node_id:
                    self.emit(end.node, end.engine.link_down(end.link, self.now))
        engine = self.add_node(node_id, instance)
        for pair, cost in pairs:
            (other,) = pair - {node_id}
            self.connect(node_id, other, cost)
        return engine

    def _close(self, pair: frozenset[str]) -> tuple[_End, _End]:
        at_a, at_b, _ = self.edges.pop(pair)
        for end in (at_a, at_b):
            end.open = False
            del self._out[end.node][end.link]
        return at_a, at_b

    # -- running ---------------------------------------------------------------------------------------------
    def emit(self, src: str, outs: Iterable[Outgoing]) -> None:
        """Queue what ``src`` wants sent (hooks may drop or duplicate each copy)."""
        far_ends = self._out[src]
        if self.drop is None and self.duplicate is None and self.delay is None:
            append = self._queue.append
            for message, links in outs:
                for link in links:
                    append((far_ends[link], message))
            return
        for message, links in outs:
            for link in links:
                self._send(src, far_ends[link], message)

    def _send(self, src: str, end: _End, message: dict[str, Any]) -> None:
        if self.drop is not None and self.drop(src, end.node, message):
            self.dropped[message["opcode"]] += 1
            return
        if self.delay is not None and self.delay(src, end.node, message):
            self._delayed.append((end, message))
            return
        self._queue.append((end, message))
        if self.duplicate is not None and self.duplicate(src, end.node, message):
            self._queue.append((end, message))

    def deliver(self) -> None:
        """Deliver until no message is in flight."""
        queue, now, delivered, observers = self._queue, self.now, self.delivered, self.observers
        targets = self._targets if self.transit == "adapter" else None
        hooked = self.drop is not None or self.duplicate is not None or self.delay is not None
        while queue:
            end, message = queue.popleft()
            if not end.open:
                continue  # the connection closed while the message was in flight
            delivered[message["opcode"]] += 1
            for observe in observers:
                observe(message["trace"][-1], end.node, message)
            if targets is not None:  # forward transit messages like an adapter: no body decoding
                to = message["to"]
                target = targets[to] if to in targets else self._target(to)
                if target is not None and target != end.engine.node_id:
                    trace = message["trace"]
                    link = end.engine.route_control(target, trace)
                    if link is not None:
                        forwarded = {"to": to, "opcode": message["opcode"], "body": message["body"],
                                     "trace": [*trace, end.engine.node_id]}
                        if hooked:
                            self._send(end.node, self._out[end.node][link], forwarded)
                        else:
                            queue.append((self._out[end.node][link], forwarded))
                    continue
            out = end.engine.handle(message, now, end.link)
            if out:
                self.emit(end.node, out)

    def _target(self, address: str | None) -> str | None:
        scope, node = classify(address)
        target = self._targets[address] = node if scope is Scope.NODE else None
        return target

    def step(self) -> None:
        self.now = round(self.now + self.step_size, 9)
        for node_id, engine in self.engines.items():
            self.emit(node_id, engine.tick(self.now))
        self._queue.extend(self._delayed)      # after what this step's ticks sent
        self._delayed = []
        self.deliver()

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / self.step_size)):
            self.step()

    def run_until(self, done: Callable[[], bool], timeout: float) -> float:
        """Step until ``done()``; return the simulated time it took. AssertionError after ``timeout``."""
        start = self.now
        while not done():
            if self.now - start >= timeout:
                raise AssertionError(f"not done within {timeout} simulated seconds")
            self.step()
        return round(self.now - start, 9)

    # -- the truth -------------------------------------------------------------------------------------------
    def graph(self) -> nx.Graph:
        """The open connections as an undirected graph with ``cost``."""
        g = nx.Graph()
        g.add_nodes_from(self.engines)
        for at_a, at_b, cost in self.edges.values():
            g.add_edge(at_a.node, at_b.node, cost=cost)
        return g


def random_mesh(n: int, extra: int, seed: int, max_cost: int = 5) -> nx.Graph:
    """A connected random graph on ids ``n0..n{n-1}``: a random tree plus ``extra`` edges, costs 1..max."""
    rng = random.Random(seed)
    g = nx.Graph()
    ids = [f"n{i}" for i in range(n)]
    rng.shuffle(ids)
    g.add_nodes_from(ids)
    for i in range(1, n):
        g.add_edge(ids[i], ids[rng.randrange(i)], cost=rng.randint(1, max_cost))
    while g.number_of_edges() < n - 1 + extra:
        a, b = rng.sample(ids, 2)
        if not g.has_edge(a, b):
            g.add_edge(a, b, cost=rng.randint(1, max_cost))
    return g


def build(graph: nx.Graph, config: LinkStateConfig | None = None, step: float = 0.1,
          transit: str = "engine") -> SimNetwork:
    """A SimNetwork with one engine per node of ``graph`` and one connection per edge."""
    net = SimNetwork(step, config, transit)
    for node in graph:
        net.add_node(node)
    for a, b, cost in graph.edges(data="cost"):
        net.connect(a, b, cost)
    return net
