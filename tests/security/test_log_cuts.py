"""Peer-supplied strings are cut in the node's log lines (issue 33, point 5).

A peer chooses its container id (a peer node's id), its user name and the description of the error it
closes with; a node that logs them whole writes lines as long as the peer likes (5,000 characters were
seen). Each is cut at ``router.logs.LOG_CUT`` characters, saying how long it was.
"""

from __future__ import annotations

import time

from router.logs import LOG_CUT, cut
from tests.support.clients import Client
from tests.support.meshes import mesh_node
from tests.support.ports import inter_router_port
from tests.support.waiting import pump_for, wait_until

LONG = "n" * 5000


def test_cut_keeps_short_strings_and_says_how_long_a_long_one_was():
    assert cut("A") == "A"
    assert cut("x" * LOG_CUT) == "x" * LOG_CUT
    assert cut(LONG) == "n" * LOG_CUT + "...(5000 chars)"
    assert cut(ValueError(LONG), 10) == "n" * 10 + "...(5000 chars)"


def test_a_peer_with_a_5000_character_id_gets_a_short_log_line(node_factory):
    node = mesh_node(node_factory, "A", listen=True)
    peer = Client(f"amqp://127.0.0.1:{inter_router_port(node)}", container_id=LONG, wait_open=False)
    wait_until(lambda: "inter-router connection" in node.stderr_tail(1000), 10,
               "the peer's connection logged")
    peer.close()
    pump_for(0.5)
    time.sleep(0.5)
    lines = node.stderr_tail(10_000).splitlines()
    assert any("n" * LOG_CUT + "...(5000 chars)" in ln for ln in lines), "\n".join(lines[-5:])
    assert max(len(ln) for ln in lines) < 1000, max(lines, key=len)[:300]
