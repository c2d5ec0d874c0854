"""``meshrouter stat`` formatting (router/management/tables.py, stat.json_data) on canned entities.

The entities are shaped as docs/MANAGEMENT.md specifies; the real-run tests (test_stat_cli.py) check
the same tables against live nodes.
"""

from __future__ import annotations

import io

import pytest

from router.management import stat
from router.management.tables import (
    ADDRESSES,
    CONNECTIONS,
    GENERAL,
    LINKS,
    NODES,
    VIEWS,
    auth,
    cell,
    duration,
    render,
    short_list,
    simple_table,
    sort_rows,
)

NODE = {
    "id": "A", "version": "0.1.0", "uptimeSeconds": 65, "connectionCount": 3, "linkCount": 7,
    "addrCount": 4, "nodeCount": 3, "deliveriesIngress": 15, "deliveriesEgress": 12, "deliveriesTransit": 9,
    "acceptedDeliveries": 6, "rejectedDeliveries": 2, "releasedDeliveries": 1, "modifiedDeliveries": 1,
    "presettledDeliveries": 3, "droppedPresettledDeliveries": 0, "unroutableDeliveries": 0,
    "hopLimitDrops": 0, "unsettledDeliveries": 2, "deliveriesDelayed1Sec": 0, "deliveriesDelayed10Sec": 0,
    "deliveriesStuck": 2,
}

LINK_ROWS = [
    {"identity": "12", "linkType": "endpoint", "linkDir": "out", "connectionId": 10, "linkName": "rx",
     "owningAddr": "closest/work", "peerNode": None, "capacity": None, "creditAvailable": 8,
     "undeliveredCount": 0, "unsettledCount": 2, "deliveryCount": 15, "presettledCount": 3,
     "acceptedCount": 6, "rejectedCount": 2, "releasedCount": 1, "modifiedCount": 1,
     "zeroCreditSeconds": 0.0},
    {"identity": "3", "linkType": "inter-router", "linkDir": "in", "connectionId": 2, "linkName": "B-data",
     "owningAddr": None, "peerNode": "B", "capacity": 250, "creditAvailable": 250, "undeliveredCount": 0,
     "unsettledCount": 0, "deliveryCount": 0, "presettledCount": 0, "acceptedCount": 0,
     "rejectedCount": 0, "releasedCount": 0, "modifiedCount": 0, "zeroCreditSeconds": 12.5},
]


def lines_of(table: str) -> list[str]:
    return [ln for ln in table.splitlines() if ln.strip()]


# ------------------------------------------------------------------------------------------- cells


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0:00:00"), (65, "0:01:05"), (65.9, "0:01:05"), (3600 * 5 + 7, "5:00:07"),
    (86400 * 2 + 3661, "2d 1:01:01"), (None, "-"), ("x", "-"), (-1, "-"), (True, "-"),
])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_cells():
    assert cell(None) == "-"
    assert cell(True) == "yes" and cell(False) == "no"
    assert cell(3.0) == "3" and cell(2.25) == "2.2" and cell(0.04) == "0"
    assert cell(["B:1", "D:5"]) == "B:1, D:5"
    assert cell([]) == "-"
    assert cell(17) == "17" and cell("1e5") == "1e5"


def test_short_list_cuts_long_lists():
    assert short_list(["A", "B", "C", "D"]) == "A, B, C, D"
    assert short_list(list("ABCDEF")) == "A, B, C, D +2 more"
    assert short_list(list("ABC"), limit=1) == "A +2 more"


def test_auth():
    assert auth({"authenticated": True, "saslMechanism": "PLAIN"}) == "PLAIN"
    assert auth({"authenticated": True, "saslMechanism": None}) == "yes"
    assert auth({"authenticated": False, "saslMechanism": "ANONYMOUS"}) == "no"


# ------------------------------------------------------------------------------------------ tables


def test_views_cover_the_options():
    assert sorted(VIEWS) == ["a", "c", "g", "l", "n"]
    assert [VIEWS[o].entity_type for o in "gclan"] == ["node", "connection", "link", "address", "router-node"]


def test_general_is_a_key_value_table():
    table = render(GENERAL, [NODE])
    rows = lines_of(table)
    assert rows[0].split() == ["attribute", "value"]
    body = {ln.rsplit(None, 1)[0].strip(): ln.rsplit(None, 1)[1] for ln in rows[2:]}
    assert body["node id"] == "A"
    assert body["uptime"] == "0:01:05"
    assert body["deliveries ingress"] == "15"
    assert body["deliveries egress"] == "12"
    assert body["deliveries transit"] == "9"
    assert (body["accepted"], body["rejected"], body["released"], body["modified"]) == ("6", "2", "1", "1")
    assert body["dropped presettled"] == "0"
    assert body["stuck > 10 s"] == "2"
    assert len(rows) == 2 + len(GENERAL.columns)


def test_links_table_one_row_per_link_sorted_by_connection():
    rows = lines_of(render(LINKS, LINK_ROWS))
    assert rows[0].split() == ["type", "dir", "conn", "peer", "addr", "cap", "credit", "undel", "unsett",
                               "deliv", "presett", "acc", "rej", "rel", "mod", "zero-credit", "s"]
    assert set(rows[1]) <= {"-", " "}
    assert len(rows) == 2 + len(LINK_ROWS)
    assert rows[2].split() == ["inter-router", "in", "2", "B", "-", "250", "250", "0", "0", "0", "0", "0",
                               "0", "0", "0", "12.5"]
    assert rows[3].split() == ["endpoint", "out", "10", "-", "closest/work", "-", "8", "0", "2", "15", "3",
                               "6", "2", "1", "1", "0"]


def test_numbers_are_right_aligned_and_text_left_aligned():
    rows = lines_of(render(LINKS, LINK_ROWS))
    header, first, second = rows[0], rows[2], rows[3]
    end = header.index(" deliv ") + len(" deliv")
    assert first[:end].endswith(" 0") and second[:end].endswith("15")
    assert first.startswith("inter-router") and second.startswith("endpoint")


def test_addresses_table_truncates_remote_nodes():
    rows = [{"identity": "balanced/x", "distribution": "balanced", "subscriberCount": 1, "remoteCount": 6,
             "remoteHostRouters": list("BCDEFG"), "producerCount": 0, "deliveriesIngress": 0,
             "deliveriesEgress": 4, "deliveriesTransit": 0, "ready": True}]
    table = lines_of(render(ADDRESSES, rows))
    assert table[0].split() == ["addr", "distrib", "local", "remote", "remote", "nodes", "in", "out", "thru"]
    assert table[2].split() == ["balanced/x", "balanced", "1", "6", "B,", "C,", "D,", "E", "+2", "more", "0",
                                "4", "0"]


def test_connections_table():
    rows = [{"identity": 7, "host": "127.0.0.1:40000", "container": "client-1", "role": "normal", "dir": "in",
             "security": "no-security", "authenticated": False, "user": None, "saslMechanism": "ANONYMOUS",
             "uptimeSeconds": 3725.2, "linkCount": 2, "peerNode": None, "listener": "127.0.0.1:5701"}]
    table = lines_of(render(CONNECTIONS, rows))
    assert table[0].split() == [c.header for c in CONNECTIONS.columns]
    assert table[0].split() == ["id", "host", "container", "role", "dir", "security", "auth", "user",
                                "uptime"]
    assert table[2].split() == ["7", "127.0.0.1:40000", "client-1", "normal", "in", "no-security", "no", "-",
                                "1:02:05"]


def test_nodes_table_and_numeric_sort():
    rows = [{"identity": n, "reachable": True, "neighbour": n == "B", "nextHop": None if n == "B" else "B",
             "cost": c, "linkState": ["A:1"], "validOrigins": [], "instance": 1, "lsSeq": 1, "mobileSeq": 0,
             "addrCount": 0} for n, c in (("C", 2), ("B", 1))]
    table = lines_of(render(NODES, rows))
    assert table[0].split() == ["node", "next", "hop", "cost", "neighbour", "reachable", "link", "state",
                                "valid", "origins"]
    assert [r.split()[:5] for r in table[2:]] == [["B", "-", "1", "yes", "yes"], ["C", "B", "2", "no", "yes"]]
    ids = [r["identity"] for r in sort_rows(LINKS, [{"connectionId": c, "identity": i}
                                                    for c, i in ((10, "1"), (2, "9"), (2, "10"))])]
    assert ids == ["9", "10", "1"]


def test_no_entities():
    assert render(ADDRESSES, []) == "(none)"
    assert render(GENERAL, []) == "(none)"


# -------------------------------------------------------------------------------------- stat output


def test_json_is_keyed_by_node_and_attribute():
    assert stat.json_data(GENERAL, {"A": [NODE]}) == {"A": NODE}
    assert stat.json_data(LINKS, {"A": LINK_ROWS, "B": []}) == {"A": LINK_ROWS, "B": []}


def test_tables_are_headed_by_node_id():
    out = io.StringIO()
    stat.print_tables(LINKS, {"A": LINK_ROWS, "B": []}, out)
    text = out.getvalue()
    assert text.startswith("Links of node A\n\n")
    assert "\n\nLinks of node B\n\n(none)\n" in text


def test_simple_table_draws_what_tabulate_draws():
    """Big tables skip tabulate (too slow at 20,000 rows): the text must be the same."""
    import random

    from tabulate import tabulate

    rng = random.Random(18)
    for _ in range(200):
        ncol = rng.randint(1, 6)
        headers = ["h" * rng.randint(1, 8) for _ in range(ncol)]
        colalign = [rng.choice(["left", "right"]) for _ in range(ncol)]
        body = [[rng.choice(["", "-", "abc", "x" * rng.randint(0, 15), "12", "yes"]) for _ in range(ncol)]
                for _ in range(rng.randint(1, 8))]
        assert simple_table(body, headers, colalign) == tabulate(
            body, headers=headers, tablefmt="simple", colalign=colalign, disable_numparse=True)


def test_a_view_asks_for_every_attribute_it_shows():
    from router.management.entities import ATTRIBUTES

    for view in VIEWS.values():
        if view.attributes is not None:
            assert set(view.attributes) <= set(ATTRIBUTES[view.entity_type])
            assert {c.attr for c in view.columns} | set(view.sort_by) <= set(view.attributes)
