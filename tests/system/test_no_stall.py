"""No stall at the start of a rate-limited stream (issue 21, point 1), with the C load generator.

A 20,000 msg/s stream (``amqpbench send --rate``) through one node and across a three-node chain (the
ingress, transit and egress hops): the largest inter-arrival gap the receiver sees after the first message
stays small. The receiver attaches first, as in the issue. The generator sends only when a FLOW arrives or
its own timer fires (the first one 100 ms after it starts, then every 2 ms); when the node held back the
credit a settled delivery returns until a batch of it was due, nothing woke the sender after its first
message and the receiver waited ~100 ms for the second one, every run. Sender first is checked too.

The bound is generous (50 ms, against the ~100 ms stall) because the VM is shared and loaded; the real
numbers (a few ms, as with no router between the two clients) are in BENCHMARKS.md, "Stream start".
Skipped, saying why, when the generator is not built and cannot be (tests/support/loadgen.py).
"""

from __future__ import annotations

import pytest

from tests.support.loadgen import Run, amqpbench
from tests.support.meshes import build, wait_address
from tests.support.state import node_state
from tests.support.waiting import wait_until

ADDR = "closest/stream"
COUNT = 20000
RATE = 20000
MAX_GAP_S = 0.050


def _producer_attached(node, address: str) -> bool:
    return any(key.endswith(address) and entry["producers"] > 0
               for key, entry in node_state(node).addresses.items())


def _stream(exe, ingress, egress, order: str, before_send=lambda: None) -> dict:
    """A paced stream from a sender on `ingress` to a receiver on `egress`; the receiver's result."""
    send_args = ("--addr", ADDR, "--count", str(COUNT), "--rate", str(RATE))
    recv_args = ("--addr", ADDR, "--count", str(COUNT), "--idle-s", "5")
    if order == "receiver-first":
        recv = Run(exe, "recv", egress.url, *recv_args)
        recv.wait_ready()
        before_send()
        send = Run(exe, "send", ingress.url, *send_args)
    else:
        send = Run(exe, "send", ingress.url, *send_args)
        wait_until(lambda: _producer_attached(ingress, ADDR), 10, f"the sender attached on {ingress.node_id}")
        recv = Run(exe, "recv", egress.url, *recv_args)
    sent = send.result()
    got = recv.result()
    assert sent["accepted"] == COUNT, sent
    assert got["received"] == COUNT and got["missing"] == 0 and got["duplicates"] == 0, got
    return got


def _assert_no_stall(got: dict, where: str) -> None:
    gap = got["max_gap_s"]
    at = got["t_max_gap_at"] - got["t_first"]
    assert gap <= MAX_GAP_S, (f"{where}: largest gap between two arrivals {gap * 1e3:.1f} ms ({at * 1e3:.1f} "
                              f"ms after the first message); at most {MAX_GAP_S * 1e3:.0f} ms")


@pytest.mark.parametrize("order", ["receiver-first", "sender-first"])
def test_rate_limited_stream_through_one_node_has_no_stall(node_factory, order):
    exe = amqpbench()
    node = node_factory("A")
    _assert_no_stall(_stream(exe, node, node, order), f"one node, {order}")


@pytest.mark.parametrize("order", ["receiver-first", "sender-first"])
def test_rate_limited_stream_across_a_chain_has_no_stall(node_factory, order):
    exe = amqpbench()
    n = build(node_factory, ["A", "B", "C"], [("B", "A", 1), ("C", "B", 1)])
    nodes = list(n.values())
    got = _stream(exe, n["C"], n["A"], order, before_send=lambda: wait_address(nodes, ADDR, ["A"]))
    _assert_no_stall(got, f"chain C -> B -> A, {order}")
