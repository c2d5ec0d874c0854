"""``meshrouter stat`` against the four-node mesh of conftest.py, after known traffic.

Every column of ``--json`` is checked against what the traffic must have done (see conftest.py); the
expected routes come from networkx on the same edges. The tables are checked for their headers and one
row per entity. Failures (no node there, a node that never answers, an unknown node) exit 1 with one
line on stderr.
"""

from __future__ import annotations

import re
import socket
import subprocess

import networkx as nx
import pytest

from tests.support.ports import free_port
from tests.support.stat_mesh import (
    ACCEPT,
    EDGES,
    HELD,
    IDLE,
    MODIFY,
    NAMES,
    PRESETTLED,
    REJECT,
    RELEASE,
    SENT,
    STUCK_AFTER,
    WORK,
    json_of,
    stat_args,
)

UPTIME_RE = re.compile(r"^\d+:\d\d:\d\d$")
CONNECTION_HEADERS = ["id", "host", "container", "role", "dir", "security", "auth", "user", "uptime"]

# ------------------------------------------------------------------------------- expected from the mesh


def mesh_graph() -> nx.Graph:
    g = nx.Graph()
    g.add_weighted_edges_from(EDGES)
    return g


def expected_node_rows(viewpoint: str) -> dict[str, dict]:
    """The router-node rows node ``viewpoint`` must show, from the shortest paths of the mesh."""
    g = mesh_graph()
    paths = dict(nx.all_pairs_dijkstra_path(g))
    costs = dict(nx.all_pairs_dijkstra_path_length(g))
    rows = {}
    for other in NAMES:
        if other == viewpoint:
            continue
        path = paths[viewpoint][other]
        rows[other] = {
            "reachable": True,
            "neighbour": g.has_edge(viewpoint, other),
            "nextHop": path[1] if len(path) > 2 else None,
            "cost": costs[viewpoint][other],
            "linkState": sorted(f"{peer}:{g.edges[other, peer]['weight']}" for peer in g[other]),
            # origins whose shortest path to ``other`` passes through ``viewpoint``
            "validOrigins": sorted(o for o in NAMES if o not in (viewpoint, other)
                                   and viewpoint in paths[o][other][1:-1]),
        }
    return rows


def by_addr(rows: list[dict], address: str) -> dict:
    found = [r for r in rows if r["identity"] == address]
    assert len(found) == 1, f"{address}: {found}"
    return found[0]


def links(rows: list[dict], **match) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def one_link(rows: list[dict], **match) -> dict:
    found = links(rows, **match)
    assert len(found) == 1, f"links {match}: {found}"
    return found[0]


OUTCOMES = {"acceptedCount": ACCEPT, "rejectedCount": REJECT, "releasedCount": RELEASE,
            "modifiedCount": MODIFY}
NO_OUTCOMES = dict.fromkeys(OUTCOMES, 0)
CARRIED = {"deliveryCount": SENT, "presettledCount": PRESETTLED, "unsettledCount": HELD,
           "undeliveredCount": 0, **OUTCOMES}
NOTHING = {"deliveryCount": 0, "presettledCount": 0, "unsettledCount": 0, "undeliveredCount": 0,
           **NO_OUTCOMES}
PATH = ("C", "B", "A")                   # the route of the traffic


def subset(row: dict, expected: dict) -> dict:
    return {k: row.get(k) for k in expected}


# ------------------------------------------------------------------------------------------- -g


@pytest.mark.parametrize("node", NAMES)
def test_overview_counts_the_traffic_at_each_node(observed, node):
    want = {
        "deliveriesIngress": SENT if node == "C" else 0,
        "deliveriesTransit": SENT if node == "B" else 0,
        "deliveriesEgress": SENT if node == "A" else 0,
        "acceptedDeliveries": ACCEPT if node in PATH else 0,
        "rejectedDeliveries": REJECT if node in PATH else 0,
        "releasedDeliveries": RELEASE if node in PATH else 0,
        "modifiedDeliveries": MODIFY if node in PATH else 0,
        "presettledDeliveries": PRESETTLED if node in PATH else 0,
        "droppedPresettledDeliveries": 0,
        "unroutableDeliveries": 0,
        "hopLimitDrops": 0,
        "unsettledDeliveries": HELD if node in PATH else 0,
        "deliveriesDelayed1Sec": 1 if node in PATH else 0,     # the modified one
        "deliveriesDelayed10Sec": 0,
        "deliveriesStuck": 0,
        # the producers on C; the consumer on A (and WORK, known everywhere) came before the baseline
        "connectionCount": {"C": 1}.get(node, 0),
        "linkCount": {"C": 2}.get(node, 0),
        "addrCount": {"C": 1}.get(node, 0),                   # IDLE on C
        "nodeCount": 0,
    }
    got = {attr: observed.delta(node, attr) for attr in want}
    assert got == want, f"node {node}: change caused by the traffic"
    last = observed.general[-1][node]
    assert last["id"] == node and last["nodeCount"] == len(NAMES) - 1
    assert last["version"] and last["uptimeSeconds"] >= 1


@pytest.mark.parametrize("node", NAMES)
def test_overview_counts_deliveries_stuck_for_more_than_10_s(observed, node):
    after = observed.stuck[node]
    held = HELD if node in PATH else 0
    assert (after["deliveriesStuck"], after["deliveriesDelayed10Sec"]) == (held, 0), \
        f"node {node} {STUCK_AFTER:g} s after the consumer kept {HELD} deliveries"
    assert after["unsettledDeliveries"] >= held


def test_overview_table(observed):
    proc = observed.runs["table-g-B"]
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Overview of node B"
    assert lines[2].split() == ["attribute", "value"]
    body = {ln[:22].strip(): ln[22:].strip() for ln in lines[4:] if ln.strip()}
    assert len(body) == 22
    assert body["node id"] == "B"
    assert UPTIME_RE.match(body["uptime"]), body["uptime"]
    assert body["deliveries transit"] == str(SENT)              # no stat run crossed B so far
    assert [body[k] for k in ("rejected", "released", "modified", "presettled", "unroutable")] == \
        [str(REJECT), str(RELEASE), str(MODIFY), str(PRESETTLED), "0"]


# ------------------------------------------------------------------------------------------- -l


def test_links_of_the_producer_and_the_consumer(observed):
    c = observed.json("l-C")["C"]
    producer = one_link(c, linkType="endpoint", linkDir="in", owningAddr=WORK)
    assert subset(producer, CARRIED) == CARRIED
    assert producer["capacity"] == 250 and producer["peerNode"] is None
    assert 250 - SENT <= producer["creditAvailable"] <= 250 - HELD
    idle = one_link(c, linkType="endpoint", linkDir="in", owningAddr=IDLE)
    assert subset(idle, NOTHING) == NOTHING and idle["creditAvailable"] == 0
    assert idle["connectionId"] == producer["connectionId"]

    a = observed.json("l-A")["A"]
    consumer = one_link(a, linkType="endpoint", linkDir="out", owningAddr=WORK)
    assert subset(consumer, CARRIED) == CARRIED
    assert consumer["capacity"] is None
    assert consumer["creditAvailable"] == 5                # granted SENT + 5


@pytest.mark.parametrize(("node", "peer", "direction", "carried"), [
    ("C", "B", "out", True), ("C", "B", "in", False), ("C", "D", "out", False),
    ("B", "C", "in", True), ("B", "A", "out", True), ("B", "A", "in", False), ("B", "C", "out", False),
    ("A", "B", "in", True), ("A", "B", "out", False), ("A", "D", "in", False),
    ("D", "A", "in", False), ("D", "C", "out", False),
])
def test_inter_router_links_carry_the_traffic_along_its_route(observed, node, peer, direction, carried):
    rows = observed.json(f"l-{node}")[node]
    link = one_link(rows, linkType="inter-router", peerNode=peer, linkDir=direction)
    want = CARRIED if carried else NOTHING
    assert subset(link, want) == want, f"{node}: inter-router {direction} link with {peer}"
    assert link["owningAddr"] is None
    assert (link["capacity"] is None) == (direction == "out")
    control = links(rows, linkType="router-control", peerNode=peer)
    assert sorted(r["linkDir"] for r in control) == ["in", "out"]


def test_zero_credit_seconds_of_a_producer_without_consumer(observed):
    c = observed.json("stuck-l-C")["C"]
    idle = one_link(c, linkType="endpoint", owningAddr=IDLE)
    # The agent samples every second and counts a link from the second sample that sees it (up to ~2 s
    # behind the wall clock), and the table gives whole seconds (up to 1 s more): 9 against 10.8 s once.
    before, after = observed.idle_seconds
    assert before - 3.0 <= idle["zeroCreditSeconds"] <= after + 0.5, (idle, before, after)
    work = one_link(c, linkType="endpoint", owningAddr=WORK)
    assert work["zeroCreditSeconds"] == 0


def test_links_table_one_row_per_link(observed):
    table = observed.runs["table-l-A"]
    assert table.returncode == 0 and table.stderr == "", table.stderr
    rows = observed.json("json-l-A")["A"]
    lines = table.stdout.splitlines()
    assert lines[0] == "Links of node A"
    assert lines[2].split() == ["type", "dir", "conn", "peer", "addr", "cap", "credit", "undel", "unsett",
                                "deliv", "presett", "acc", "rej", "rel", "mod", "zero-credit", "s"]
    body = [ln for ln in lines[4:] if ln.strip()]
    assert len(body) == len(rows)
    consumer = one_link(rows, owningAddr=WORK)
    assert [ln.split() for ln in body if WORK in ln] == [[
        "endpoint", "out", str(consumer["connectionId"]), "-", WORK, "-", "5", "0", str(HELD), str(SENT),
        str(PRESETTLED), str(ACCEPT), str(REJECT), str(RELEASE), str(MODIFY), "0"]]


# ------------------------------------------------------------------------------------------- -a


@pytest.mark.parametrize("node", NAMES)
def test_address_counts(observed, node):
    rows = observed.json(f"a-{node}")[node]
    work = by_addr(rows, WORK)
    want = {
        "distribution": "closest",
        "subscriberCount": 1 if node == "A" else 0,
        "remoteCount": 0 if node == "A" else 1,
        "remoteHostRouters": [] if node == "A" else ["A"],
        "producerCount": 1 if node == "C" else 0,
        "deliveriesIngress": SENT if node == "C" else 0,
        "deliveriesEgress": SENT if node == "A" else 0,
        "deliveriesTransit": SENT if node == "B" else 0,
        "ready": True,
    }
    assert subset(work, want) == want, f"{WORK} at {node}"
    if node == "C":
        idle = by_addr(rows, IDLE)
        assert subset(idle, {"subscriberCount": 0, "remoteCount": 0, "producerCount": 1,
                             "deliveriesIngress": 0}) == {"subscriberCount": 0, "remoteCount": 0,
                                                          "producerCount": 1, "deliveriesIngress": 0}
    else:
        assert IDLE not in {r["identity"] for r in rows}


def test_addresses_table(observed):
    table = observed.runs["table-a-C"]
    assert table.returncode == 0 and table.stderr == "", table.stderr
    rows = observed.json("json-a-C")["C"]
    lines = table.stdout.splitlines()
    assert lines[0] == "Addresses of node C"
    assert lines[2].split() == ["addr", "distrib", "local", "remote", "remote", "nodes", "in", "out", "thru"]
    body = [ln for ln in lines[4:] if ln.strip()]
    assert len(body) == len(rows)
    assert [ln.split() for ln in body if ln.startswith(WORK)] == [
        [WORK, "closest", "0", "1", "A", str(SENT), "0", "0"]]


def test_remote_node_read_through_the_mesh(observed):
    data = json_of(observed.runs["remote-a-A"])
    assert list(data) == ["A"]
    work = by_addr(data["A"], WORK)
    assert (work["subscriberCount"], work["deliveriesEgress"]) == (1, SENT)


# ------------------------------------------------------------------------------------------- -n


@pytest.mark.parametrize("node", NAMES)
def test_nodes_next_hops_and_costs(observed, node):
    rows = observed.json(f"n-{node}")[node]
    got = {r["identity"]: {k: sorted(v) if isinstance(v, list) else v for k, v in r.items()
                           if k in ("reachable", "neighbour", "nextHop", "cost", "linkState", "validOrigins")}
           for r in rows}
    assert got == expected_node_rows(node)


def test_nodes_table(observed):
    table = observed.runs["table-n-D"]
    assert table.returncode == 0 and table.stderr == "", table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "Nodes of node D"
    assert lines[2].split() == ["node", "next", "hop", "cost", "neighbour", "reachable", "link", "state",
                                "valid", "origins"]
    body = [ln.split() for ln in lines[4:] if ln.strip()]
    want = expected_node_rows("D")
    assert [r[:5] for r in body] == [[n, want[n]["nextHop"] or "-", str(want[n]["cost"]),
                                      "yes" if want[n]["neighbour"] else "no", "yes"] for n in sorted(want)]


def test_all_nodes(observed):
    data = json_of(observed.runs["all-n"])
    assert list(data) == ["C", "A", "B", "D"]          # the connected node first
    for node, rows in data.items():
        assert sorted(r["identity"] for r in rows) == sorted(set(NAMES) - {node})
        want = {n: v["cost"] for n, v in expected_node_rows(node).items()}
        assert {r["identity"]: r["cost"] for r in rows} == want
    table = observed.runs["all-a-table"]
    assert table.returncode == 0 and table.stderr == "", table.stderr
    headings = [ln for ln in table.stdout.splitlines() if ln.startswith("Addresses of node ")]
    assert headings == [f"Addresses of node {n}" for n in ("C", "A", "B", "D")]


# ------------------------------------------------------------------------------------------- -c


def test_connections(observed):
    a = observed.json("c-A")["A"]
    b = observed.json("c-B")["B"]
    consumer = [r for r in a if r["container"] == "stat-consumer"]
    assert len(consumer) == 1
    want = {"role": "normal", "dir": "in", "security": "no-security", "peerNode": None, "linkCount": 1}
    assert subset(consumer[0], want) == want
    assert isinstance(consumer[0]["authenticated"], bool)   # SASL ANONYMOUS: up to the security settings
    routers = {r["peerNode"]: (r["container"], r["dir"]) for r in a if r["role"] == "inter-router"}
    assert routers == {"B": ("B", "in"), "D": ("D", "in")}             # B and D dial A
    routers = {r["peerNode"]: (r["container"], r["dir"]) for r in b if r["role"] == "inter-router"}
    assert routers == {"A": ("A", "out"), "C": ("C", "in")}            # B dials A, C dials B
    for r in a + b:
        assert isinstance(r["uptimeSeconds"], int | float) and r["uptimeSeconds"] >= 0


def test_connections_table(observed):
    table = observed.runs["table-c-B"]
    assert table.returncode == 0 and table.stderr == "", table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "Connections of node B"
    assert lines[2].split() == CONNECTION_HEADERS
    body = [ln.split() for ln in lines[4:] if ln.strip()]
    assert len(body) == len(observed.json("json-c-B")["B"])     # inter-router, agent, the stat client
    assert sorted(r[2] for r in body if r[3] == "inter-router") == ["A", "C"]
    assert all(UPTIME_RE.match(r[-1]) for r in body), body


# -------------------------------------------------------------------------------------------- errors


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(stat_args(*args), capture_output=True, text=True, timeout=60)


def test_no_node_at_the_url():
    port = free_port()
    line = one_error_line(run("-b", f"amqp://127.0.0.1:{port}", "-l"))
    assert line == f"meshrouter: error: cannot connect to amqp://127.0.0.1:{port}: " \
                   "Connection refused to all addresses"


def test_a_peer_that_never_answers_times_out():
    with socket.socket() as s:                  # accepts the TCP connection, never speaks AMQP
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"amqp://127.0.0.1:{s.getsockname()[1]}"
        line = one_error_line(run("-b", url, "--timeout", "1"))
    assert line == f"meshrouter: error: no connection to {url} within 1 s"


def test_unknown_node(observed):
    line = one_error_line(run("-b", observed.urls["C"], "-r", "Z", "-n"))
    assert line == ("meshrouter: error: QUERY to _topo/0/Z/$management: the request was released "
                    "(no agent reachable there)")


def test_usage_errors_exit_2():
    proc = run("-g", "-l")
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr
    proc = run("--all-nodes", "-r", "A")
    assert proc.returncode == 2
