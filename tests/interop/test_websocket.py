"""AMQP over WebSocket (issue 20, point 3): `listeners[].websocket: true`, with rhea (npm) as the client.

RPC crosses a two-node mesh with both the server and the caller on WebSocket connections (ws:// and
wss://); a request for another path gets 404; the node's plain listeners are unaffected.
"""

from __future__ import annotations

import json
import socket

from tests.support.clients import Client
from tests.support.js import run_js
from tests.support.meshes import wait_address, wait_converged
from tests.support.nodes import MESH_RULES
from tests.support.pki import make_pki
from tests.support.ports import free_port
from tests.support.waiting import wait_for

ADDRESS = "openstack.org/om/rpc/anycast/ws/echo"


def _ws_node(node_factory, node_id: str, ws_port: int, *, tls: dict | None = None, listen: bool = False,
             connect: int | None = None, path: str = "/amqp"):
    listeners = [{"host": "127.0.0.1", "port": 0, "role": "normal"},
                 {"host": "127.0.0.1", "port": ws_port, "role": "normal", "websocket": True,
                  "websocket_path": path, **({"tls": tls} if tls else {})}]
    if listen:
        listeners.append({"host": "127.0.0.1", "port": 0, "role": "inter-router"})
    extra = {"listeners": listeners,
             "router": {"hello_interval": 0.2, "hello_max_age": 0.6, "ra_interval_flux": 1.0}}
    if connect is not None:
        extra["connectors"] = [{"host": "127.0.0.1", "port": connect}]
    return node_factory(node_id, rules=MESH_RULES, extra=extra)


def _rpc(server_url: str, caller_url: str, calls: int, ca: str | None = None) -> list[dict]:
    args = [server_url, caller_url, ADDRESS, str(calls)] + ([ca] if ca else [])
    proc = run_js("rpc_over_websocket.js", *args, timeout=60)
    assert proc.returncode == 0, f"rhea over WebSocket failed ({proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rpc_through_the_mesh_over_websocket(node_factory):
    from tests.support.ports import inter_router_port

    ws_a, ws_b = free_port(), free_port()
    a = _ws_node(node_factory, "A", ws_a, listen=True)
    b = _ws_node(node_factory, "B", ws_b, connect=inter_router_port(a))
    wait_converged([a, b])
    plain = Client(b.url)                 # a plain AMQP client beside them
    replies = _rpc(f"ws://127.0.0.1:{ws_a}/amqp", f"ws://127.0.0.1:{ws_b}/amqp", 10)
    assert sorted(r["correlation_id"] for r in replies) == sorted(f"call-{i}" for i in range(10))
    assert sorted(r["body"] for r in replies) == sorted(f"echo: hello {i}" for i in range(10))
    rx, tx = plain.receiver("balanced/plain", credit=1), plain.sender("balanced/plain")
    tx.wait_credit()
    t = tx.send("plain")
    wait_for(lambda: t.settled and rx.bodies == ["plain"], what="plain AMQP beside WebSocket")
    wait_address([a, b], ADDRESS, [])     # the rhea server is gone: its address too
    assert a.alive() and b.alive()


def test_wss_and_a_wrong_path(node_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    n = _ws_node(node_factory, "A", port, tls={"cert": pki.server.cert, "key": pki.server.key})
    url = f"wss://localhost:{port}/amqp"
    replies = _rpc(url, url, 3, ca=pki.ca)
    assert sorted(r["body"] for r in replies) == [f"echo: hello {i}" for i in range(3)]

    plain_port = free_port()
    m = _ws_node(node_factory, "B", plain_port)
    with socket.create_connection(("127.0.0.1", plain_port), timeout=5) as s:
        s.sendall(b"GET /elsewhere HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  b"Sec-WebSocket-Version: 13\r\n"
                  b"Sec-WebSocket-Protocol: amqp\r\n\r\n")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 404"), answer
    assert b"no WebSocket endpoint at '/elsewhere'" in answer
    with socket.create_connection(("127.0.0.1", plain_port), timeout=5) as s:
        s.sendall(b"AMQP\x00\x01\x00\x00")         # plain AMQP on a WebSocket listener: closed, no crash
        s.settimeout(5)
        while s.recv(4096):
            pass
    assert n.alive() and m.alive()
