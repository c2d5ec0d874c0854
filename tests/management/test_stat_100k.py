"""`meshrouter stat` of every view at 100,000 remote addresses (issue 33, point 5): paged, like the others.

B holds 100,000 receivers on unique addresses; A learns them through the mesh. A router-node row lists all
of its node's addresses (`mobileAddresses`), so A's row for B fits in no single answer: `stat --json -n`
reads those addresses in pages (the `mobile-address` rows) and gives the row whole; every other view
(general, connections, links, addresses) answers too.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.bulk import attach_receivers
from tests.support.clients import Client
from tests.support.management import Requester
from tests.support.meshes import build
from tests.support.stat_mesh import stat_args
from tests.support.waiting import wait_until

ADDRESSES = 100_000


def _stat(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(stat_args(*args, "--timeout", "60"), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.timeout(600)        # 100,000 attaches and their MAUs take a while on a loaded machine
def test_every_stat_view_at_100000_remote_addresses(node_factory):
    nodes = build(node_factory, ["A", "B"], [("B", "A", 1)], idle_timeout=0)
    m = Requester(Client(nodes["A"].url))          # before the flood: A is busy applying it for a while
    attach_receivers(nodes["B"].url, [f"balanced/far/{i}" for i in range(ADDRESSES)], timeout=300,
                     frame_timeout=60)

    def a_knows_them() -> bool:
        status, _, body = m.request({"operation": "QUERY", "type": "router-node"},
                                    {"attributeNames": ["identity", "addrCount"]}, timeout=60)
        return status == 200 and body["results"] == [["B", ADDRESSES]]

    wait_until(a_knows_them, 120, f"A knowing B's {ADDRESSES} addresses")
    url = nodes["A"].url
    (rows,) = json.loads(_stat("-n", "--json", "-b", url).stdout).values()
    (b,) = [r for r in rows if r["identity"] == "B"]
    assert b["addrCount"] == ADDRESSES and len(b["mobileAddresses"]) == ADDRESSES
    assert b["mobileAddresses"] == sorted(b["mobileAddresses"])
    assert {a.rsplit("/", 1)[-1] for a in b["mobileAddresses"]} == {str(i) for i in range(ADDRESSES)}
    (addresses,) = json.loads(_stat("-a", "--json", "-b", url).stdout).values()
    assert sum(1 for r in addresses if "far/" in r["identity"]) == ADDRESSES
    for view in ("-g", "-c", "-l", "-n", "-a"):
        assert _stat(view, "-b", url).stdout
