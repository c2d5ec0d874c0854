"""A ``$management`` requester on the tests' own python-qpid-proton client, for tests of the protocol itself.

:class:`Requester` sends requests (well-formed, or raw bytes) on a :class:`tests.support.clients.Client`
and waits for the answers while pumping every client, like the rest of the test. Tests that only need
to know a node's state use :mod:`tests.support.state` instead.
"""

from __future__ import annotations

import itertools
from typing import Any

from tests.support.clients import Client, make_message
from tests.support.waiting import wait_for


class Requester:
    """Sends `$management` requests on `client` and waits for the answers on a dynamic receiver."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.replies = client.receiver(dynamic=True, credit=100)
        self.reply_to = self.replies.address
        self.anon = client.sender(None)
        self._ids = itertools.count(1)
        self.sent = 0

    def request(self, properties: dict | None, body: Any = None, node: str | None = None,
                raw: bytes | None = None, timeout: float = 10.0) -> tuple[int, str, Any]:
        """(statusCode, statusDescription, body) of one request to `node`'s agent (None: this node's)."""
        cid = f"req-{next(self._ids)}"
        to = "$management" if node is None else f"_topo/0/{node}/$management"
        if raw is not None:
            tracker = self.anon.send(raw)
        else:
            tracker = self.anon.send(make_message(body, address=to, reply_to=self.reply_to,
                                                  correlation_id=cid, properties=properties))
        self.sent += 1
        if raw is not None:
            return tracker.wait(timeout).outcome, "", None

        def answered():
            for r in self.replies.received:
                if r.message is not None and r.message.correlation_id == cid:
                    return r
            return None

        r = wait_for(answered, timeout, f"management answer to {properties} at {to}")
        self.replies.received.remove(r)
        p = r.message.properties
        return p["statusCode"], p["statusDescription"], r.message.body

    def query(self, entity_type: str, node: str | None = None) -> list[dict[str, Any]]:
        """Every entity of a type as dicts (asserts a 200)."""
        status, desc, body = self.request({"operation": "QUERY", "type": entity_type}, None, node)
        assert status == 200, (status, desc)
        return [dict(zip(body["attributeNames"], row, strict=True)) for row in body["results"]]

    def by_id(self, entity_type: str, node: str | None = None, key: str = "identity") -> dict[str, dict]:
        return {row[key]: row for row in self.query(entity_type, node)}

    def node(self, node: str | None = None) -> dict[str, Any]:
        (row,) = self.query("node", node)
        return row
