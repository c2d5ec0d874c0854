"""The node's one in-process client (router.adapter.inprocess) against a real NodeServer in this process.

What the broker gateway and the management agent rely on: a receiver whose credit its owner controls, an
anonymous sender, whole messages as bytes (multi-frame ones assembled), outcomes both ways (with the
error condition of a rejection), and link-closed events (a link the node refuses, the connection going).
The node runs on an asyncio loop that the test drives itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from proton import Message

from router.adapter.inprocess import ACCEPTED, MODIFIED, REJECTED, RELEASED, NodeConnection, NodeLink
from router.config import parse_config
from router.node.server import NodeServer


class Node:
    """A NodeServer on a private loop; ``run_until`` turns the loop until a condition holds."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        cfg = parse_config({"node": {"id": "A"},
                            "listeners": [{"host": "127.0.0.1", "port": 0, "role": "normal"}]}, "<test>")
        self.server = NodeServer(cfg, self.loop)
        self.server.start()

    def run_until(self, cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            self.loop.run_until_complete(asyncio.sleep(0.002))

    def run_for(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def connect(self, name: str = "probe") -> NodeConnection:
        conn = NodeConnection(self.loop, self.server.add_local_connection, name, kind="test")
        self.run_until(lambda: conn.node_conn.opened, "the node to open the connection")
        return conn

    def close(self) -> None:
        if not self.server.stopped.done():
            self.server.stop()
        self.run_for(0.01)
        self.loop.close()


class Recorder:
    """A link owner that records what it is told (receiver and sender events both)."""

    def __init__(self) -> None:
        self.messages: list[tuple[object, bytes, bool]] = []
        self.outcomes: list[tuple[object, int, bool]] = []
        self.flows = 0
        self.closed = 0

    def on_message(self, dlv: object, data: bytes, settled: bool) -> None:
        self.messages.append((dlv, data, settled))

    def on_outcome(self, dlv: object, outcome: int, undeliverable: bool) -> None:
        self.outcomes.append((dlv, outcome, undeliverable))

    def on_flow(self) -> None:
        self.flows += 1

    def on_link_closed(self) -> None:
        self.closed += 1


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    yield n
    n.close()


def encode(to: str, body: object) -> bytes:
    return Message(address=to, body=body).encode()


def decode(data: bytes) -> Message:
    m = Message()
    m.decode(data)
    return m


def attach_pair(node: Node, conn: NodeConnection,
                address: str) -> tuple[NodeLink, Recorder, NodeLink, Recorder]:
    """A receiver of ``address`` (no credit yet) and an anonymous sender, both attached."""
    rx_events, tx_events = Recorder(), Recorder()
    rx = conn.receiver(address, rx_events)
    tx = conn.sender(None, tx_events)
    node.run_until(lambda: node.server.consumers_of(address) == 1, "the receiver to attach")
    node.run_until(lambda: tx.credit > 0, "credit for the anonymous sender")
    return rx, rx_events, tx, tx_events


def test_receiver_credit_anonymous_sender_and_outcomes(node):
    conn = node.connect()
    assert conn.node_conn.peer == "test:probe"
    rx, rx_events, tx, tx_events = attach_pair(node, conn, "q")
    assert tx.address is None and rx.address == "q"

    bodies = ["one", "two", "three", "four"]
    sent = [conn.send(tx, encode("q", body)) for body in bodies]
    node.run_for(0.1)
    assert rx_events.messages == []                  # the owner has granted no credit yet
    rx.flow(1)
    node.run_until(lambda: len(rx_events.messages) == 1, "the first message")
    node.run_for(0.1)
    assert len(rx_events.messages) == 1              # one credit, one message
    rx.flow(3)
    node.run_until(lambda: len(rx_events.messages) == 4, "the other three")
    assert [decode(data).body for _, data, _ in rx_events.messages] == bodies
    assert [decode(data).address for _, data, _ in rx_events.messages] == ["q"] * 4
    assert not any(settled for _, _, settled in rx_events.messages)

    received = [dlv for dlv, _, _ in rx_events.messages]
    conn.settle(received[0], ACCEPTED)
    conn.settle(received[1], REJECTED, (b"app:refused", b"not this one"))
    conn.settle(received[2], RELEASED)
    conn.settle(received[3], MODIFIED)
    node.run_until(lambda: len(tx_events.outcomes) == 4, "four outcomes")
    outcomes = {dlv: outcome for dlv, outcome, _ in tx_events.outcomes}
    assert [outcomes[d] for d in sent] == [ACCEPTED, REJECTED, RELEASED, MODIFIED]
    assert not any(undeliverable for _, _, undeliverable in tx_events.outcomes)
    assert conn.condition(sent[1]) == ("app:refused", "not this one")
    assert conn.condition(sent[0]) is None
    for d in sent:
        conn.forget(d)
    assert rx_events.closed == tx_events.closed == 0


def test_a_message_bigger_than_a_frame_arrives_whole(node):
    conn = node.connect()
    rx, rx_events, tx, tx_events = attach_pair(node, conn, "big")
    rx.flow(1)
    body = bytes(range(256)) * 4096                 # 1 MiB: many transfer frames each way
    d = conn.send(tx, encode("big", body))
    node.run_until(lambda: len(rx_events.messages) == 1, "the big message")
    assert decode(rx_events.messages[0][1]).body == body
    assert conn.partial == {}
    conn.settle(rx_events.messages[0][0], ACCEPTED)
    node.run_until(lambda: len(tx_events.outcomes) == 1, "its outcome")
    assert tx_events.outcomes[0][:2] == (d, ACCEPTED)


def test_link_closed_events(node):
    conn = node.connect()
    refused_events = Recorder()
    refused = conn.receiver("", refused_events)      # no source address: the node refuses it
    node.run_until(lambda: refused_events.closed == 1, "the node to close the link")
    assert refused.error == ("amqp:invalid-field", "a receiving link needs a source address")
    assert refused.handle not in conn.links

    mine_events = Recorder()
    mine = conn.receiver("mine", mine_events)
    node.run_until(lambda: node.server.consumers_of("mine") == 1, "the consumer to attach")
    conn.close_link(mine)                            # closed by its owner: no event
    node.run_until(lambda: node.server.consumers_of("mine") == 0, "the consumer to go")
    assert mine_events.closed == 0

    rx, rx_events, tx, tx_events = attach_pair(node, conn, "left-open")
    node.server.stop()                               # the node closes the connection: every link goes
    node.run_until(lambda: conn.closed, "the client to see the connection closed")
    assert rx_events.closed == tx_events.closed == 1
    assert rx.error is None and conn.links == {}
    with pytest.raises(RuntimeError):
        conn.receiver("too-late", Recorder())
