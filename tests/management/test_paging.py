"""Management at size: QUERY pages (`offset` / `count`), `meshrouter stat` pages through, and an answer too
big for a message is an error status, never silence.

The node gets 5,000 receivers over two raw connections in one burst (tests/support/bulk.py): a link
QUERY of all of them would hold about 100,000 AMQP values, more than python-qpid-proton decodes (it
silently kept the first 3,448 rows before paging).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support.bulk import attach_receivers
from tests.support.clients import Client
from tests.support.management import Requester
from tests.support.meshes import build
from tests.support.stat_mesh import stat_args
from tests.support.waiting import wait_until

LINKS = 5000


@pytest.fixture
def big_node(node_factory):
    """A node with LINKS receivers on unique addresses `balanced/page/<i>`, over two connections."""
    n = node_factory("A", idle_timeout=0)        # the raw connections send no heartbeats
    half = LINKS // 2
    attach_receivers(n.url, [f"balanced/page/{i}" for i in range(half)])
    attach_receivers(n.url, [f"balanced/page/{i}" for i in range(half, LINKS)])
    return n


def test_stat_links_prints_every_row(big_node):
    proc = _stat("-l", "-b", big_node.url)
    shown = re.findall(r"balanced/page/(\d+)\b", proc.stdout)
    assert sorted(shown, key=int) == [str(i) for i in range(LINKS)]
    (rows,) = json.loads(_stat("-a", "--json", "-b", big_node.url).stdout).values()
    assert {r["identity"] for r in rows} >= {f"balanced/page/{i}" for i in range(LINKS)}


def _stat(*args: str) -> subprocess.CompletedProcess:
    """``meshrouter stat ARGS`` (its output is far bigger than a pipe's buffer: read as it comes)."""
    proc = subprocess.run(stat_args(*args), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_unpaged_query_of_a_huge_table_is_an_error_status(big_node):
    m = Requester(Client(big_node.url))
    status, description, body = m.request({"operation": "QUERY", "type": "link"})
    assert status == 413 and body is None, (status, description)
    assert "'offset' and 'count'" in description
    rows_a_page = int(re.search(r"about (\d+) rows a page", description).group(1))
    assert 1000 < rows_a_page < LINKS


def test_query_pages_cover_the_table_once(big_node):
    m = Requester(Client(big_node.url))
    seen: list[str] = []
    offset = 0
    while True:
        status, description, body = m.request({"operation": "QUERY", "type": "address", "offset": offset,
                                               "count": 1500}, {"attributeNames": ["identity"]})
        assert status == 200, (status, description)
        assert len(body["results"]) <= 1500
        seen += [row[0] for row in body["results"]]
        if len(body["results"]) < 1500:
            break
        offset += 1500
    assert len(seen) == len(set(seen))
    assert set(seen) >= {f"balanced/page/{i}" for i in range(LINKS)}


@pytest.mark.parametrize("props", [{"offset": -1}, {"count": "ten"}, {"offset": True}])
def test_bad_paging_properties_are_400(node, props):
    m = Requester(Client(node.url))
    status, description, _ = m.request({"operation": "QUERY", "type": "link", **props})
    assert status == 400 and ("offset" in description or "count" in description), (status, description)


def test_stat_nodes_with_70000_remote_addresses(node_factory):
    """A router-node row lists every address of its node: with 70,000 on B, A's whole row cannot fit in one
    answer (413, said so), and `stat -n` asks only for the columns it shows, so it still works."""
    nodes = build(node_factory, ["A", "B"], [("B", "A", 1)], idle_timeout=0)
    attach_receivers(nodes["B"].url, [f"balanced/far/{i}" for i in range(70000)], timeout=120)
    m = Requester(Client(nodes["A"].url))

    def a_knows_them() -> bool:
        status, _, body = m.request({"operation": "QUERY", "type": "router-node"},
                                    {"attributeNames": ["identity", "addrCount"]})
        return status == 200 and body["results"] == [["B", 70000]]

    wait_until(a_knows_them, 60, "A knowing B's 70,000 addresses")
    status, description, _ = m.request({"operation": "QUERY", "type": "router-node"})
    assert status == 413 and "'offset' and 'count'" in description, (status, description)
    out = _stat("-n", "-b", nodes["A"].url).stdout
    assert re.search(r"^B\s+-\s+1\s+yes\s+yes", out, re.M), out
