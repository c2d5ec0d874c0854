"""Only client connections are scanned for FLOW echo requests: a peer node (Proton) never sends one, and
the scan of every read from a peer cost a transit hop ~3% of its instructions per message."""

from __future__ import annotations

import asyncio
import socket
import time

from router.config import parse_config
from router.node.server import NodeServer
from tests.support.ports import free_port


def test_inter_router_connections_are_not_scanned_for_echo():
    loop = asyncio.new_event_loop()
    inter, client = free_port(), free_port()
    a = NodeServer(parse_config({"node": {"id": "A"}, "listeners": [
        {"host": "127.0.0.1", "port": client, "role": "normal"},
        {"host": "127.0.0.1", "port": inter, "role": "inter-router"}]}, "<test>"), loop)
    b = NodeServer(parse_config({"node": {"id": "B"}, "listeners": [
        {"host": "127.0.0.1", "port": 0, "role": "normal"}],
        "connectors": [{"host": "127.0.0.1", "port": inter}]}, "<test>"), loop)
    servers = (a, b)
    try:
        for s in servers:
            s.start()

        def conns() -> list:
            return [c for s in servers for c in s.engine.conns.values()]

        deadline = time.monotonic() + 10
        while sum(c.router is not None for c in conns()) < 2:          # both ends know their peer
            assert time.monotonic() < deadline, "the nodes did not connect"
            loop.run_until_complete(asyncio.sleep(0.01))
        peers = [c for c in conns() if c.router is not None]
        assert all(c.role == "inter-router" and c.echo is None for c in peers)
        sock = socket.create_connection(("127.0.0.1", client))
        deadline = time.monotonic() + 10
        while not any(c.router is None for c in a.engine.conns.values()):
            assert time.monotonic() < deadline, "the client connection was not accepted"
            loop.run_until_complete(asyncio.sleep(0.01))
        assert all(c.echo is not None for c in a.engine.conns.values() if c.router is None)
        sock.close()
    finally:
        for s in servers:
            s.stop()
        loop.run_until_complete(asyncio.sleep(0.05))
        loop.close()
