"""Edge mode at scale in the sans-IO simulation (tests.support.edge_sim): 3 interiors with real link-state
engines, edges with real EdgeProxy / UplinkChoice objects, each interior's real EdgeHub. What one change
costs must not grow with the number of edges: one address added on one edge is one edge message and a
link-state flood among the interiors, told only to the edges that watch it; a failover costs what the
moved edges proxy. benchmarks/edge_sim_bench.py runs the issue's 5,000 edges x 10 addresses."""

from __future__ import annotations

import pytest

from tests.support.edge_sim import EdgeSim

PER_EDGE = 10


def _sim(edges: int) -> EdgeSim:
    sim = EdgeSim(3)
    for k in range(edges):
        # 9 addresses of its own and one everyone shares; a producer for its neighbour's first address
        sim.add_edge(f"E{k}", k, consumers=[f"svc/E{k}/{i}" for i in range(PER_EDGE - 1)] + ["fanout/all"],
                     producers=[f"svc/E{(k + 1) % edges}/0"])
    sim.settle(3.0)
    return sim


def _delta(sim: EdgeSim, before) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sim.control().items()}


@pytest.mark.parametrize("edges", [300, 1200])
def test_one_new_address_costs_the_same_whatever_the_number_of_edges(no_gc, edges):
    sim = _sim(edges)
    tables = sim.tables()
    assert sum(t["edges"] for t in tables.values()) == 2 * edges          # active + standby uplinks
    assert sum(t["proxied"] for t in tables.values()) == edges * (PER_EDGE - 1) + 3
    for t in tables.values():               # every interior knows every other edge's addresses once
        # 9 own addresses and `_edge/<id>` per edge; fanout/all both advertised and known
        assert t["advertised"] + t["known"] == edges * PER_EDGE + 2
    before = sim.control()
    sim.add_address("E5", "svc/E5/new")
    sim.settle(1.0)
    d = _delta(sim, before)
    assert d["edge_msgs"] == 1 and d["edge_keys"] == 2          # add + watch, on E5's uplink only
    assert d["reach_msgs"] == 0                                  # nobody else watches it
    assert d["linkstate_msgs"] <= 12                             # MAU + RA among 3 interiors
    # a producer on E9 for it: E9 is told (one message, one key), nobody else
    before = sim.control()
    sim.proxies["E9"].set_producers({"svc/E10/0", "svc/E5/new"})
    sim._send_up("E9", sim.proxies["E9"].take_message())
    sim.settle(1.0)
    d = _delta(sim, before)
    assert (d["edge_msgs"], d["reach_msgs"], d["reach_keys"]) == (1, 1, 1)
    assert "svc/E5/new" in sim.proxies["E9"].reachable


def test_every_edge_knows_what_it_watches_and_nothing_more(no_gc):
    sim = _sim(300)
    for k, proxy in sim.proxies.items():
        n = int(k[1:])
        assert proxy.reachable == {"fanout/all", f"svc/E{(n + 1) % 300}/0"}, k
    assert sim.control()["reach_keys"] == 2 * 300


def test_failover_costs_what_the_moved_edges_proxy(no_gc):
    edges = 600
    sim = _sim(edges)
    moved = [k for k, c in sim.choices.items() if c.active.interior == "I0"]
    before = sim.control()
    sim.kill_interior("I0")
    sim.settle(3.0)
    d = _delta(sim, before)
    assert all(sim.choices[k].active.interior != "I0" for k in moved)
    assert d["edge_msgs"] == len(moved)
    assert d["edge_keys"] == len(moved) * (2 * PER_EDGE + 1)  # full set: 10 proxied, 11 watched
    # each moved edge hears its full REACH (and, at most, a correction when the paths change)
    assert len(moved) <= d["reach_msgs"] <= 2 * len(moved)
    for k in moved:
        n = int(k[1:])
        assert sim.proxies[k].reachable == {"fanout/all", f"svc/E{(n + 1) % edges}/0"}, k
    assert sum(t["proxied"] for t in sim.tables().values()) == edges * (PER_EDGE - 1) + 2
