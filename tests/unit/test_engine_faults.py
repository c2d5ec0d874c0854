"""A bug while handling one connection's event closes that connection only (in-process engine)."""

import logging
import socket

from cproton_ffi.lib import PN_LINK_REMOTE_OPEN
from proton import Connection as PnConnection
from proton import Transport

from router.adapter.engine import Engine
from router.adapter.pump import pump
from router.addressing import AddressRules
from router.forwarding.core import RouterCore


def _client_bytes() -> tuple[Transport, PnConnection]:
    """A Proton client that opens a connection, a session and a receiver link."""
    t = Transport()
    c = PnConnection()
    t.bind(c)
    c.open()
    ssn = c.session()
    ssn.open()
    r = ssn.receiver("r")
    r.source.address = "q"
    r.open()
    return t, c


def _exchange(engine, conn, sock_peer, t) -> None:
    """Move bytes both ways a few times."""
    for _ in range(5):
        out = t.peek(t.pending()) if t.pending() > 0 else b""
        if out:
            sock_peer.sendall(out)
            t.pop(len(out))
        conn.read()
        pump(engine, lambda c, on: None)
        try:
            data = sock_peer.recv(65536)
        except BlockingIOError:
            data = b""
        if data:
            t.push(data)


def test_exception_in_a_handler_closes_only_that_connection(caplog):
    engine = Engine(RouterCore("A", AddressRules([])), "A", 16)

    def boom(ev):
        raise RuntimeError("injected fault")

    engine._rare[PN_LINK_REMOTE_OPEN] = boom
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    conn = engine.add_connection(ours, "peer")
    t, client = _client_bytes()
    with caplog.at_level(logging.ERROR, logger="router.adapter.engine"):
        _exchange(engine, conn, theirs, t)
    assert "internal error handling PN_LINK_REMOTE_OPEN" in caplog.text
    assert "injected fault" in caplog.text
    assert client.remote_condition is not None
    assert client.remote_condition.name == "amqp:internal-error"
    # the engine keeps working: a second, healthy connection opens normally
    del engine._rare[PN_LINK_REMOTE_OPEN]
    ours2, theirs2 = socket.socketpair()
    ours2.setblocking(False)
    theirs2.setblocking(False)
    conn2 = engine.add_connection(ours2, "peer2")
    t2, client2 = _client_bytes()
    _exchange(engine, conn2, theirs2, t2)
    assert client2.remote_condition is None
    assert client2.state & PnConnection.REMOTE_ACTIVE


def test_exception_handling_a_consumers_outcome_closes_only_that_connection(caplog):
    """A consumer's outcome comes to `Deliveries.on_settled` straight from the event loop
    (hotpath.SETTLED): a bug there is reported as a PN_DELIVERY event, closes the connection, and the event
    is not handled again."""
    from proton import Delivery, Message

    engine = Engine(RouterCore("A", AddressRules([])), "A", 16)
    calls = []

    def boom(od, outcome, c=None):
        calls.append(outcome)
        raise RuntimeError("injected outcome fault")

    engine.deliveries.on_settled = boom
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    conn = engine.add_connection(ours, "peer")
    t, client = _client_bytes()                     # a receiver on "q"
    receiver = client.link_head(0)
    receiver.flow(10)
    snd = client.session_head(0).sender("s")
    snd.target.address = "q"
    snd.open()
    _exchange(engine, conn, theirs, t)
    assert snd.credit > 0
    dlv = snd.delivery(b"1")
    snd.send(Message(body="hello").encode())
    snd.advance()
    _exchange(engine, conn, theirs, t)
    got = receiver.current
    assert got is not None and got.readable
    with caplog.at_level(logging.ERROR, logger="router.adapter.engine"):
        got.update(Delivery.ACCEPTED)
        got.settle()
        _exchange(engine, conn, theirs, t)
        _exchange(engine, conn, theirs, t)
    assert calls == [Delivery.ACCEPTED]             # once: the event was popped after the failure
    assert "internal error handling PN_DELIVERY" in caplog.text
    assert "injected outcome fault" in caplog.text
    assert client.remote_condition is not None
    assert client.remote_condition.name == "amqp:internal-error"
    assert dlv.remote_state != Delivery.ACCEPTED    # the failed outcome was not passed on
