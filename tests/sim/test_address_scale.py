"""Mobile addresses at scale: a 100-node mesh with 100,000 addresses converges to one table, with diff MAUs
lost and reordered on the way (gaps are closed by MAR and an absolute MAU, never by a too-new diff).

Every node adds its share of the addresses in waves (one diff MAU per node per wave), then removes and
re-adds some; meanwhile a seeded hook drops or delays (reorders) a share of the MAUs and MARs. The truth is
what each node has locally; converged means every node holds exactly every other node's set.
"""

from __future__ import annotations

import random
import time

from tests.support.linkstate_sim import SimNetwork, build, random_mesh

NODES = 100
PER_NODE = 1000                 # 100,000 addresses in all
WAVES = 4


def _truth(net: SimNetwork) -> dict[str, frozenset[str]]:
    return {node: frozenset(e.local_addresses) for node, e in net.engines.items()}


def _mismatches(net: SimNetwork, truth: dict[str, frozenset[str]]) -> int:
    """(node, other node) pairs where the node's view of the other's addresses is not the truth."""
    bad = 0
    for node, engine in net.engines.items():
        for other, have in truth.items():
            if other != node and engine.addresses_of(other).keys() != have:
                bad += 1
    return bad


def _converged(net: SimNetwork, truth: dict[str, frozenset[str]]) -> bool:
    total = sum(len(v) for v in truth.values())
    if any(len(e.known_addresses) != total - len(truth[n]) for n, e in net.engines.items()):
        return False                        # cheap first: the sizes
    return _mismatches(net, truth) == 0


def test_100_nodes_100000_addresses_converge_under_loss_and_reordering(no_gc):
    started = time.monotonic()
    rng = random.Random(18)
    net = build(random_mesh(NODES, NODES, seed=18))
    net.run_until(lambda: all(len(e.reachable) == NODES - 1 for e in net.engines.values()), 5.0)
    lossy = {"on": True}

    def drop(src: str, dst: str, m: dict) -> bool:
        return lossy["on"] and m["opcode"] in ("MAU", "MAR") and rng.random() < 0.05

    def delay(src: str, dst: str, m: dict) -> bool:
        return lossy["on"] and m["opcode"] == "MAU" and rng.random() < 0.1

    net.drop, net.delay = drop, delay
    nodes = sorted(net.engines)
    per_wave = PER_NODE // WAVES
    for wave in range(WAVES):
        for node in nodes:
            engine = net.engines[node]
            for i in range(wave * per_wave, (wave + 1) * per_wave):
                engine.add_local_address(f"svc/{node}/{i}")
        net.step()
    for node in nodes[::3]:                 # churn: a third of the nodes drop 20 addresses and re-add 10
        engine = net.engines[node]
        for i in range(20):
            engine.remove_local_address(f"svc/{node}/{i}")
        net.step()
        for i in range(10):
            engine.add_local_address(f"svc/{node}/{i}")
    net.run(1.0)
    lossy["on"] = False                     # what was lost must still be recovered (MAR, absolute MAU)
    truth = _truth(net)
    assert sum(len(v) for v in truth.values()) == NODES * PER_NODE - (len(nodes[::3]) * 10)
    took = net.run_until(lambda: _converged(net, truth), 30.0)
    assert net.dropped["MAU"] > 100 and sum(e.counters["mau_gap"] for e in net.engines.values()) > 0
    assert sum(e.counters["mau_applied"] for e in net.engines.values()) >= NODES * (NODES - 1) * WAVES
    print(f"\n100 nodes, {NODES * PER_NODE} addresses: converged {took:.1f} simulated s after the loss "
          f"stopped; {net.dropped['MAU']} MAUs dropped; wall time {time.monotonic() - started:.1f} s")
    assert time.monotonic() - started < 60
