"""What a management request sees at each access level (router.management.access.EntityView)."""

from __future__ import annotations

from router.management.access import EntityView
from router.management.requests import answer
from router.policy.levels import READ, REDACTED, WRITE

OWN = "_topo/0/A/temp.own000000000000"
OTHER = "_topo/0/A/temp.other0000000000"
ROWS = {
    "connection": [{"identity": "1", "host": "10.0.0.5:4000", "user": "alice", "container": "host1-42",
                    "role": "normal", "listener": "0.0.0.0:5672"}],
    "link": [{"identity": "l1", "linkName": "alice-rpc", "owningAddr": OTHER},
             {"identity": "l2", "linkName": "mine", "owningAddr": OWN},
             {"identity": "l3", "linkName": "q", "owningAddr": "svc/q"}],
    "address": [{"identity": OTHER}, {"identity": OWN}, {"identity": "svc/q"},
                {"identity": "_topo/0/A/$management"}],
    "listener": [{"identity": "0.0.0.0:5671", "settings": {
        "tls": {"cert": "/etc/certs/node.pem", "key": "/etc/certs/node.key", "key_password_file": "/etc/pw",
                "ca": "/etc/ca.pem", "require_client_cert": True, "protocols": ["TLSv1.3"]},
        "sasl": {"mechanisms": ["PLAIN"], "users_file": "/etc/users", "sasldb": None,
                 "allow_plain_without_tls": False}, "max_links": 5}}],
    "broker": [{"identity": "rabbit", "url": "amqp://guest@10.0.0.9:5672/%2F", "state": "connected"}],
    "node": [{"id": "A", "reloads": 1, "lastReload": {"ok": False, "errors": ["/etc/mr/a.yaml: x: bad"]}}],
}


class Entities:
    def rows(self, entity_type: str) -> list[dict]:
        return [dict(r) for r in ROWS.get(entity_type, [])]


def test_read_and_write_see_everything() -> None:
    for level in (READ, WRITE):
        view = EntityView(Entities(), level, "amqp:/" + OWN)
        for entity_type, rows in ROWS.items():
            assert view.rows(entity_type) == rows


def test_redacted_hides_files_users_peers_and_other_reply_addresses() -> None:
    view = EntityView(Entities(), REDACTED, "amqp:/" + OWN)
    (conn,) = view.rows("connection")
    assert (conn["host"], conn["user"], conn["container"]) == (None, None, None)
    assert conn["listener"] == "0.0.0.0:5672" and conn["role"] == "normal"
    links = {r["identity"]: r for r in view.rows("link")}
    assert links["l1"]["owningAddr"] is None and links["l2"]["owningAddr"] == OWN
    assert links["l3"]["owningAddr"] == "svc/q" and all(r["linkName"] is None for r in links.values())
    assert [r["identity"] for r in view.rows("address")] == [OWN, "svc/q", "_topo/0/A/$management"]
    (listener,) = view.rows("listener")
    tls, sasl = listener["settings"]["tls"], listener["settings"]["sasl"]
    assert (tls["cert"], tls["key"], tls["key_password_file"], tls["ca"]) == (None, None, None, None)
    assert tls["require_client_cert"] is True and tls["protocols"] == ["TLSv1.3"]
    assert (sasl["users_file"], sasl["mechanisms"]) == (None, ["PLAIN"])
    assert listener["settings"]["max_links"] == 5
    assert view.rows("broker")[0]["url"] is None
    assert view.rows("node") == [{"id": "A", "reloads": 1, "lastReload": None}]     # its lines name files


def test_a_reply_to_that_is_not_a_reply_address_shows_no_reply_address() -> None:
    view = EntityView(Entities(), REDACTED, "svc/q")
    assert [r["identity"] for r in view.rows("address")] == ["svc/q", "_topo/0/A/$management"]


def test_answers_go_through_the_view() -> None:
    status, _, body = answer({"operation": "READ", "type": "connection", "identity": "1"}, None,
                             EntityView(Entities(), REDACTED))
    assert status == 200 and body["user"] is None
    status, _, body = answer({"operation": "QUERY", "type": "address"}, None, EntityView(Entities(), READ))
    assert status == 200 and len(body["results"]) == 4
