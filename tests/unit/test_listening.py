"""Accept queues (router.node.listening): a backlog beyond the kernel's cap is several SO_REUSEPORT
sockets on one port, and a port another listener holds is still refused."""

from __future__ import annotations

import socket

import pytest

from router.node.listening import MAX_QUEUES, bind_queues, queues_for, somaxconn


def test_queues_for_a_backlog():
    assert queues_for(4096, 4096) == 1
    assert queues_for(4097, 4096) == 2
    assert queues_for(16384, 4096) == 4
    assert queues_for(10**9, 128) == MAX_QUEUES
    assert queues_for(16384, None) == 1                  # cap unknown: one socket, the kernel decides
    assert queues_for(16384, 4096, reuseport=False) == 1


def test_somaxconn_reads_the_file(tmp_path):
    (tmp_path / "cap").write_text("4096\n")
    assert somaxconn(str(tmp_path / "cap")) == 4096
    assert somaxconn(str(tmp_path / "missing")) is None


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT on this platform")
def test_several_queues_share_one_port_and_accept():
    socks = bind_queues("127.0.0.1", 0, 16, 3)
    try:
        ports = {s.getsockname()[1] for s in socks}
        assert len(socks) == 3 and len(ports) == 1
        port = ports.pop()
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
        accepted = 0
        for s in socks:
            while True:
                try:
                    s.accept()[0].close()
                    accepted += 1
                except BlockingIOError:
                    break
        assert accepted == 30
        for c in clients:
            c.close()
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("queues", [1, 3])
def test_a_port_in_use_is_refused_with_nothing_left_open(queues):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        with pytest.raises(OSError):
            bind_queues("127.0.0.1", taken.getsockname()[1], 16, queues)
    finally:
        taken.close()
