"""Large messages are just messages: every size, body kind, settle mode, client and path (issue 29).

A chain A <- B <- C of real nodes, shared by the module. Each run sends a mix from one client on A:
bodies of 0 B, 1 B, 1 MB and 16 MB and a sweep of encoded sizes across the frame boundary (so that one
message fills exactly one 16 KiB transfer frame and the next is one byte over, for either client), in
each body kind (a data section; an amqp-value binary, string or map; an amqp-sequence), interleaved with
small messages on the same link. Paths: one node (A to A), one hop (A to B), two hops (A to C) and
multicast to a receiver on each node. Every message must arrive once and byte for byte, every unsettled
one ACCEPTED, and afterwards no node holds a delivery in flight or a stream.

The first test is the reproduction of ../shared/repro/rhea-large-message-stall.js: rhea's 1 MB messages
followed by small ones wedged the path between two nodes for good (the transfers behind a paused stream
were never read).
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.meshes import build
from tests.support.mix import KINDS, MB, SMALL, assert_delivered, run_mix, wait_nothing_in_flight
from tests.support.nodes import NodeSet
from tests.support.waiting import close_all

FRAME = 16384                       # the nodes' max-frame-size (router/defaults.py MAX_FRAME_SIZE)
PATHS = {                           # receivers' nodes, for a sender on A
    "node": ["A"],
    "hop": ["B"],
    "two-hops": ["C"],
    "multicast": ["A", "B", "C"],
}
_names = itertools.count()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A <- B <- C (B dials A, C dials B), nodes stopped and checked at the end of the module."""
    nodes = NodeSet(tmp_path_factory.mktemp("large"))
    made = build(nodes.start, ["A", "B", "C"], [("B", "A", 1), ("C", "B", 1)])
    yield made
    close_all()
    failure = nodes.stop_all()
    if failure:
        pytest.fail(failure, pytrace=False)


def urls(chain: dict, names: list[str]) -> list[str]:
    return [chain[n].url for n in names]


def address(path: str) -> str:
    prefix = "multicast" if path == "multicast" else "balanced"
    return f"{prefix}/large-{path}-{next(_names)}"


def stall_repro_messages() -> list[dict]:
    """The reproduction's 1,000 messages: #250, #500, #750 of 1 MB (binary, data, string), the rest small
    and of every kind."""
    big = {250: "binary", 500: "data", 750: "string"}
    kinds = ("small", "binary", "map", "sequence", "data")
    return [{"kind": big[i], "size": MB} if i in big else {"kind": kinds[i % 5], "size": 8}
            for i in range(1000)]


@pytest.mark.parametrize("path", ["hop", "two-hops"])
def test_rhea_large_messages_among_small_ones_never_wedge_the_path(chain, path):
    """Four runs over the same pair of nodes: each delivers all 1,000 (on main: 5 of 8 runs stalled
    after a 1 MB message, and every later run on that pair received nothing)."""
    nodes = list(chain.values())
    for _ in range(4):
        spec = {"send": chain["A"].url, "recv": urls(chain, PATHS[path]), "address": address(path),
                "presettled": False, "credit": 200, "messages": stall_repro_messages()}
        report = run_mix("rhea", spec, nodes, PATHS[path], timeout=60)
        assert_delivered(report, presettled=False)
    wait_nothing_in_flight(nodes)


def matrix_messages() -> list[dict]:
    """Each body kind at 0 B, 1 B, 1 MB and 16 MB, and encoded across the frame boundary (FRAME - 72 ..
    FRAME + 4 bytes: rhea fills a frame with up to FRAME - 50 - tag bytes, Proton with FRAME - its
    header), small messages in between."""
    out: list[dict] = []
    for kind in KINDS:
        for size in (0, 1, MB, 16 * MB):
            out += [{"kind": kind, "size": size}, SMALL]
        out += [{"kind": kind, "encoded": n} for n in range(FRAME - 72, FRAME + 5)]
        out.append(SMALL)
    return out


@pytest.mark.parametrize("presettled", [False, True], ids=["unsettled", "presettled"])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("client", ["proton", "rhea"])
def test_every_size_and_body_kind_arrives_intact(chain, client, path, presettled):
    nodes = list(chain.values())
    spec = {"send": chain["A"].url, "recv": urls(chain, PATHS[path]), "address": address(path),
            "presettled": presettled, "credit": 50, "messages": matrix_messages()}
    report = run_mix(client, spec, nodes, PATHS[path])
    assert_delivered(report, presettled)
    wait_nothing_in_flight(nodes)
