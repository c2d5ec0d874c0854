"""router.management.requests: every bad request gets a clear 4xx, good ones the right rows."""

from __future__ import annotations

from router.management.entities import ATTRIBUTES, canonical_type
from router.management.requests import MAX_VALUES, answer, count_values


class Rows:
    """Canned entities (the request layer never looks at a node)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def rows(self, entity_type: str) -> list[dict]:
        if self.fail:
            raise RuntimeError("boom")
        if entity_type == "node":
            return [dict.fromkeys(ATTRIBUTES["node"], 0) | {"id": "A"}]
        return [dict.fromkeys(ATTRIBUTES[entity_type], i) | {"identity": f"x{i}"} for i in range(3)]


def test_query_all_attributes_in_documented_order():
    status, desc, body = answer({"operation": "QUERY", "type": "link"}, None, Rows())
    assert (status, desc) == (200, "OK")
    assert body["attributeNames"] == list(ATTRIBUTES["link"])
    assert [r[0] for r in body["results"]] == ["x0", "x1", "x2"]


def test_query_selected_attributes():
    status, _, body = answer({"operation": "QUERY", "type": "address"},
                             {"attributeNames": ["identity", "deliveriesIngress"]}, Rows())
    assert status == 200
    assert body == {"attributeNames": ["identity", "deliveriesIngress"],
                    "results": [["x0", 0], ["x1", 1], ["x2", 2]]}


def test_prefixed_type_names_are_accepted_and_qdrouterd_names_are_not_ours():
    assert canonical_type("meshrouter.router-node") == "router-node"
    assert canonical_type("link") == "link"
    assert canonical_type("linky") is None
    # qdrouterd's names get qdrouterd's entities (router.management.qdr), not these
    assert canonical_type("org.apache.qpid.dispatch.router.link") is None
    assert canonical_type("router.node") is None
    status, _, body = answer({"operation": "query", "type": "meshrouter.node"}, None, Rows())
    assert status == 200 and body["results"][0][0] == "A"


def test_read_by_identity_and_node_by_id():
    status, _, body = answer({"operation": "READ", "type": "link", "identity": "x1"}, None, Rows())
    assert status == 200 and body["identity"] == "x1"
    status, _, body = answer({"operation": "READ", "type": "node", "name": "A"}, None, Rows())
    assert status == 200 and body["id"] == "A"


def test_get_types_lists_every_type_and_attribute():
    status, _, body = answer({"operation": "GET-TYPES"}, None, Rows())
    assert status == 200
    assert body == {k: list(v) for k, v in ATTRIBUTES.items()}


def test_bad_requests_get_clear_errors():
    cases = [
        (None, None, 400, "no application properties"),
        ({}, None, 400, "unknown operation None"),
        ({"operation": "DELETE", "type": "link"}, None, 400, "unknown operation 'DELETE'"),
        ({"operation": 7}, None, 400, "unknown operation 7"),
        ({"operation": "QUERY"}, None, 400, "needs a 'type'"),
        ({"operation": "QUERY", "type": "bogus"}, None, 404, "unknown entity type 'bogus'"),
        ({"operation": "QUERY", "type": "link"}, "not a map", 400, "must be a map"),
        ({"operation": "QUERY", "type": "link"}, {"attributeNames": "identity"}, 400, "list of strings"),
        ({"operation": "QUERY", "type": "link"}, {"attributeNames": ["identity", 3]}, 400, "list of strings"),
        ({"operation": "QUERY", "type": "link"}, {"attributeNames": ["identity", "colour"]}, 400,
         "unknown attribute(s) of link: colour"),
        ({"operation": "READ", "type": "link"}, None, 400, "needs an 'identity'"),
        ({"operation": "READ", "type": "link", "identity": "nope"}, None, 404,
         "no link with identity 'nope'"),
    ]
    for props, body, status, text in cases:
        got_status, desc, got_body = answer(props, body, Rows())
        assert (got_status, got_body) == (status, None), (props, body, desc)
        assert text in desc, (props, desc)


def test_a_failure_reading_the_node_is_a_500_not_an_exception(caplog):
    status, desc, body = answer({"operation": "QUERY", "type": "link"}, None, Rows(fail=True))
    assert status == 500 and body is None and "internal error" in desc
    assert "boom" in caplog.text


class Many:
    """A table of `n` link rows (the request layer pages it through `page` when a source has one)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.built = 0

    def rows(self, entity_type: str) -> list[dict]:
        return self.page(entity_type, 0, None)

    def page(self, entity_type: str, offset: int, count: int | None) -> list[dict]:
        stop = self.n if count is None else min(self.n, offset + count)
        self.built += max(0, stop - offset)
        return [dict.fromkeys(ATTRIBUTES["link"], i) | {"identity": f"x{i}"} for i in range(offset, stop)]


def test_query_offset_and_count_select_a_page():
    source = Many(10)
    status, _, body = answer({"operation": "QUERY", "type": "link", "offset": 4, "count": 3},
                             {"attributeNames": ["identity"]}, source)
    assert status == 200 and body["results"] == [["x4"], ["x5"], ["x6"]]
    assert source.built == 3
    status, _, body = answer({"operation": "QUERY", "type": "link", "offset": 8, "count": 5}, None, source)
    assert status == 200 and [r[0] for r in body["results"]] == ["x8", "x9"]
    status, _, body = answer({"operation": "QUERY", "type": "link", "offset": 20}, None, source)
    assert status == 200 and body["results"] == []


def test_paging_of_a_source_without_pages():
    status, _, body = answer({"operation": "QUERY", "type": "link", "offset": 1, "count": 1},
                             {"attributeNames": ["identity"]}, Rows())
    assert status == 200 and body["results"] == [["x1"]]


def test_an_answer_too_big_for_a_message_is_413_not_a_truncated_table():
    status, desc, body = answer({"operation": "QUERY", "type": "link"}, None, Many(5000))
    assert status == 413 and body is None
    assert "'offset' and 'count'" in desc and "5000 link rows" in desc
    fit = int(desc.rsplit("about ", 1)[1].split()[0])
    status, _, body = answer({"operation": "QUERY", "type": "link", "count": fit}, None, Many(5000))
    assert status == 200 and len(body["results"]) == fit
    assert count_values(body) <= MAX_VALUES


def test_count_values_counts_every_node():
    assert count_values(None) == 1
    assert count_values([1, 2, [3, 4]]) == 1 + 2 + 3
    assert count_values({"a": [1], "b": 2}) == 1 + (1 + 2) + (1 + 1)
