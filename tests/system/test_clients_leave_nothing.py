"""Callers that come and go leave nothing behind in the nodes' memos by routing key (issue 33, point 6).

Each RPC caller has its own reply address, and a reply to it is a new routing key for the server's node
(its anonymous-relay `to` keys) and for the caller's node (the sections from its peer, the codec's
views and encodings). The nodes kept up to 4,096 of each, about 1.5 KB per caller that left, so a
node serving callers that come and go grew for hours (the soak: RSS 5-11% up after its first cycle).
With ``node.forget_after`` the memos hold what was used in the last two periods only. The sizes are
read from the node's SIGUSR1 state line (``memos``).
"""

from __future__ import annotations

import time

from router.rpc import RpcClient, RpcServer
from tests.support.edges import state_line
from tests.support.meshes import build, wait_address

SVC = "openstack.org/om/rpc/anycast/leave-nothing"
FORGET_AFTER = 1.0
ROUNDS = 40


def _memos(node) -> dict[str, int]:
    return state_line(node)["memos"]


def _grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}


def test_callers_that_left_are_forgotten(node_factory):
    nodes = build(node_factory, ["A", "B"], [("B", "A", 1)],
                  sections={n: {"node": {"forget_after": FORGET_AFTER}} for n in "AB"})
    a, b = nodes["A"], nodes["B"]
    server = RpcServer(a.url, SVC, lambda body, props: body, name="server-A")
    try:
        wait_address([a, b], SVC, ["A"])
        with RpcClient(b.url, timeout=10) as warm:      # what a caller leaves, once, before the baseline
            assert warm.call(SVC, "warm") == "warm"
        time.sleep(2.5 * FORGET_AFTER)
        base = {"A": _memos(a), "B": _memos(b)}
        for i in range(ROUNDS):                         # callers that come and go, each its own reply address
            with RpcClient(b.url, timeout=10, name=f"caller-{i}") as c:
                assert c.call(SVC, f"q{i}") == f"q{i}"
                assert c.call(SVC, f"r{i}") == f"r{i}"
        grown = {"A": _grown(base["A"], _memos(a)), "B": _grown(base["B"], _memos(b))}
        # the callers were remembered (so the test sees what it is about) ...
        assert grown["A"].get("to_keys", 0) >= ROUNDS / 2, grown
        assert grown["B"].get("peer_sections", 0) >= ROUNDS / 2, grown
        # ... and forgotten once unused for two periods: back to the baseline
        deadline = time.monotonic() + 10 * FORGET_AFTER
        while True:
            left = {"A": _grown(base["A"], _memos(a)), "B": _grown(base["B"], _memos(b))}
            if not left["A"] and not left["B"]:
                break
            assert time.monotonic() < deadline, f"memos above the baseline {base}: {left}"
            time.sleep(0.2)
        # a caller that stays is served throughout, its entries kept while used
        with RpcClient(b.url, timeout=10, name="stays") as c:
            for i in range(int(4 * FORGET_AFTER / 0.1)):
                assert c.call(SVC, f"s{i}") == f"s{i}"
                time.sleep(0.1)
    finally:
        server.stop()
