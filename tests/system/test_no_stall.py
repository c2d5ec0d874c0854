"""No stall at the start of a rate-limited stream (issue 21, point 1), with the C load generator.

A paced stream (``amqpbench send --rate``) through one node and across a three-node chain (the
ingress, transit and egress hops): the largest inter-arrival gap the receiver sees after the first message
stays small. The receiver attaches first, as in the issue. The generator sends only when a FLOW arrives or
its own timer fires (the first one 100 ms after it starts, then every 2 ms); when the node held back the
credit a settled delivery returns until a batch of it was due, nothing woke the sender after its first
message and the receiver waited ~100 ms for the second one, every run (pre-settled too: no outcome
came back either). Sender first is checked too.

Now a client producer with nothing in flight gets a FLOW at once (router.forwarding.credit), as qdrouterd
gives one per settlement: each FLOW wakes the generator, which sends what its rate allows by then, and the
stream clocks itself. That needs the node's round trip to be longer than the stream's interval (50 us at
20,000 msg/s): at 5,000-10,000 msg/s a FLOW can come back before the next message is due, and the generator
then sleeps until its own first timer, through qdrouterd too (BENCHMARKS.md, "Stream start").

The pre-settled stream runs at 100,000 msg/s (10 us apart): with nothing to settle, the node's FLOW comes
back after one pass through it alone, and with the compiled hot path (router/adapter/hotpath.c) that pass
can take less than the 50 us between messages at 20,000 msg/s. A frame trace then shows the FLOW right
after the first transfer and the generator's next transfers only at its 100 ms timer, on 8 of 8 runs on a
fast VM, with the node before the hot path too. At 100,000 msg/s the test still fails when the node holds
that FLOW back (checked by removing the idle top-up), and passes otherwise (largest gaps 0.3-3.1 ms).

The bound is generous (50 ms, against the ~100 ms stall) because the VM is shared and loaded; the real
numbers (a few ms, as with no router between the two clients) are in BENCHMARKS.md, "Stream start".
Skipped, saying why, when the generator is not built and cannot be (tests/support/loadgen.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.loadgen import Run, amqpbench
from tests.support.meshes import build, wait_address
from tests.support.state import node_state
from tests.support.waiting import wait_until

ADDR = "closest/stream"
# the rate; a quarter of a second covers the stall (~100 ms after the first message) and keeps a
# loaded VM's CPU out of the gaps of a three-node chain
COUNT = 5000
RATE = 20000
MAX_GAP_S = 0.050
PRESETTLED_RATE = 100000      # see the module's docstring: faster than the node's own round trip
PRESETTLED_COUNT = 10000


def _producer_attached(node, address: str) -> bool:
    return any(key.endswith(address) and entry["producers"] > 0
               for key, entry in node_state(node).addresses.items())


def _stream(exe, ingress, egress, order: str, before_send=lambda: None, presettled: bool = False,
            rate: int = RATE, count: int = COUNT) -> dict:
    """A paced stream from a sender on `ingress` to a receiver on `egress`; the receiver's result."""
    send_args = ("--addr", ADDR, "--count", str(count), "--rate", str(rate))
    if presettled:
        send_args += ("--presettled", "--linger-ms", "500")
    recv_args = ("--addr", ADDR, "--count", str(count), "--idle-s", "5")
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
    assert sent["sent"] == count if presettled else sent["accepted"] == count, sent
    assert got["received"] == count and got["missing"] == 0 and got["duplicates"] == 0, got
    return got


def _gap(got: dict) -> str:
    return (f"largest gap between two arrivals {got['max_gap_s'] * 1e3:.1f} ms "
            f"({(got['t_max_gap_at'] - got['t_first']) * 1e3:.1f} ms after the first message)")


def _assert_no_stall(stream: Callable[[], dict], where: str) -> None:
    """The stream's largest gap is at most MAX_GAP_S, in the first run or, if that one stalled, in a second
    one. The stall this guards against came back in every run; the generator can also stall on its own
    when a FLOW reaches it before its next message is due (then it sleeps until its 100 ms timer), which
    a loaded machine makes happen now and then, through qdrouterd too (BENCHMARKS.md, "Stream start")."""
    first = stream()
    if first["max_gap_s"] <= MAX_GAP_S:
        return
    second = stream()
    assert second["max_gap_s"] <= MAX_GAP_S, (f"{where}: {_gap(first)}, then {_gap(second)}; "
                                              f"at most {MAX_GAP_S * 1e3:.0f} ms")


@pytest.mark.parametrize("order", ["receiver-first", "sender-first"])
def test_rate_limited_stream_through_one_node_has_no_stall(node_factory, order):
    exe = amqpbench()
    node = node_factory("A")
    _assert_no_stall(lambda: _stream(exe, node, node, order), f"one node, {order}")


def test_rate_limited_presettled_stream_through_one_node_has_no_stall(node_factory):
    exe = amqpbench()
    node = node_factory("A")
    _assert_no_stall(lambda: _stream(exe, node, node, "receiver-first", presettled=True,
                                     rate=PRESETTLED_RATE, count=PRESETTLED_COUNT),
                     "one node, pre-settled")


@pytest.mark.parametrize("order", ["receiver-first", "sender-first"])
def test_rate_limited_stream_across_a_chain_has_no_stall(node_factory, order):
    exe = amqpbench()
    n = build(node_factory, ["A", "B", "C"], [("B", "A", 1), ("C", "B", 1)])
    nodes = list(n.values())

    def routed() -> None:
        wait_address(nodes, ADDR, ["A"])

    _assert_no_stall(lambda: _stream(exe, n["C"], n["A"], order, before_send=routed),
                     f"chain C -> B -> A, {order}")
