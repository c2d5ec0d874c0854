"""A JavaScript client (rhea) asks a node's `$management` in the AMQP Management draft's form.

qdmanage, qdstat and rhea-based consoles address the agent as `type: org.amqp.management`, `name: self`
and name the entity type in `entityType`; the node answers that form as well as its own `type: node`.
"""

from __future__ import annotations

from tests.support.js import rhea_management_request


def test_query_in_the_amqp_management_form(node_factory):
    n = node_factory("A")
    draft = {"operation": "QUERY", "type": "org.amqp.management", "name": "self",
             "entityType": "org.apache.qpid.dispatch.router"}
    answer = rhea_management_request(n.url, draft, {"attributeNames": ["id"]})
    assert answer["correlation_id"] == "req-1"
    assert answer["properties"]["statusCode"] == 200, answer
    assert answer["body"] == {"attributeNames": ["id"], "results": [["A"]]}

    own = rhea_management_request(n.url, {"operation": "QUERY", "type": "node"}, {"attributeNames": ["id"]})
    assert own["body"] == answer["body"]

    missing = rhea_management_request(n.url, {"operation": "QUERY", "type": "org.amqp.management",
                                              "name": "self"})
    assert missing["properties"]["statusCode"] == 400
    assert "entityType" in missing["properties"]["statusDescription"]

    types = rhea_management_request(n.url, {"operation": "GET-TYPES", "type": "org.amqp.management",
                                            "name": "self"})
    assert types["properties"]["statusCode"] == 200 and "node" in types["body"]
    assert n.alive()
