"""Attack: a process speaking the inter-router protocol with the id of a live node (issue 17, point 4).

B knows node A (instance I) through a live connection; a second process calling itself A (instance J,
started later) connects to B's inter-router listener. B refuses it as a neighbour (logged once), never
routes to it and closes its connection; traffic from C to the real A goes on throughout, and after the
impostor is gone.
"""

from __future__ import annotations

import time

from tests.support.clients import ACCEPTED, Client
from tests.support.meshes import MESH_RULES, build, wait_address
from tests.support.nodes import launch, node_config, stop
from tests.support.ports import inter_router_port

ADDRESS = "balanced/impostor"


def test_impostor_with_a_live_nodes_id_is_refused(node_factory, tmp_path):
    nodes = build(node_factory, ["B", "A", "C"], [("A", "B", 1), ("C", "B", 1)])
    a, b, c = nodes["A"], nodes["B"], nodes["C"]
    consumer = Client(a.url).receiver(ADDRESS, credit_window=200)
    wait_address(nodes.values(), ADDRESS, ["A"])
    snd = Client(c.url).sender(ADDRESS)
    snd.wait_credit()

    def send_some(n: int) -> list[float]:
        times = []
        for i in range(n):
            start = time.monotonic()
            tr = snd.send(f"m{i}").wait(timeout=10)
            assert tr.state == ACCEPTED, tr
            times.append(time.monotonic() - start)
        return times

    before = send_some(20)
    cfg = node_config("A", rules=MESH_RULES, extra={
        "listeners": [{"host": "127.0.0.1", "port": 0}],
        "connectors": [{"host": "127.0.0.1", "port": inter_router_port(b)}],
        "router": {"hello_interval": 0.2, "hello_max_age": 0.6, "ra_interval_flux": 1.0}})
    impostor = launch(cfg, tmp_path, 99)
    during = []
    end = time.monotonic() + 4.0                       # > hello_max_age, with the impostor retrying
    while time.monotonic() < end:
        during += send_some(10)
    stop(impostor)
    after = send_some(20)
    got = len(before) + len(during) + len(after)
    consumer.wait_messages(got)
    print(f"impostor: {len(during)} messages C -> A while it was there, slowest {max(during) * 1000:.1f} ms; "
          f"after it left: slowest {max(after) * 1000:.1f} ms")
    assert len(consumer.received) == got               # every message reached the real A
    assert max(during + after) < 1.0, max(during + after)
    log = b.stderr_path.read_text(errors="replace")
    assert log.count("refusing a neighbour claiming to be node A") == 1, log[-3000:]
    assert "node A restarted" not in log
    tries = log.count("to node A (cost 1)") - 1          # the impostor's connections, each closed at once
    assert tries >= 1 and log.count("inter-router connection to A lost") >= tries, log[-3000:]
