"""The decoders fed by the guided fuzzer, each with its contract (``tests/support/covfuzz.py``).

* ``ControlTarget``: control messages (HELLO, RA, LSR, LSU, MAU, MAR) as the node reads them from an
  inter-router link: ``router.node.mesh.decode_control`` may raise only ``ControlMessageError``; what it
  decodes goes to a ``LinkStateEngine`` (``handle`` and ``tick`` never raise), whose tables keyed by
  peer input must stay bounded.
* ``ManagementTarget``: ``$management`` requests as the agent reads them: ``decode_message`` may raise
  only ``MalformedError``; ``requests.answer`` never raises and answers 200, 400 or 404 (500 means a bug
  reading the node), over canned entity rows.
"""

from __future__ import annotations

import random
from pathlib import Path

from router.amqp.codec import MalformedError
from router.amqp.message import decode_message
from router.linkstate import ControlMessageError, LinkStateConfig, LinkStateEngine
from router.management.entities import ATTRIBUTES
from router.management.requests import answer
from router.node.mesh import decode_control
from tests.support import frame_gen as gen

ROUTER = Path(__file__).resolve().parents[2] / "router"


class ControlTarget:
    """decode_control, then the link-state engine (two links, a tick every 50 messages)."""

    allowed = (ControlMessageError,)
    cover = (ROUTER / "node" / "mesh.py", ROUTER / "amqp", ROUTER / "linkstate")

    def __init__(self) -> None:
        self.engine = LinkStateEngine("A", 7, LinkStateConfig(hello_interval=0.2, hello_max_age=0.6))
        self.now = 100.0
        self.count = 0
        for link in ("link-1", "link-2"):
            self.engine.link_up(link, 1, self.now)

    def __call__(self, data: bytes) -> None:
        message = decode_control(data)
        self.count += 1
        self.now += 0.001
        self.engine.handle(message, self.now, "link-1" if self.count % 2 else "link-2")
        if self.count % 50 == 0:
            self.engine.tick(self.now)

    def settle(self) -> dict[str, int]:
        """Let time pass (the fuzz nodes expire); the sizes of the tables keyed by peer input."""
        for _ in range(80):
            self.now += 1.0
            self.engine.tick(self.now)
        e = self.engine
        return {"scopes": len(e._scopes), "warn": len(e._warn._suppressed), "flood": len(e._flood_parent)}

    @staticmethod
    def seeds(rng: random.Random, n: int = 200) -> list[bytes]:
        return [gen.control_message(rng, rng.choice(("B", "C")), ["A", "B", "C"], "A") for _ in range(n)]


class Rows:
    """Canned entity rows: the request layer never looks at a node."""

    def rows(self, entity_type: str) -> list[dict]:
        return [dict.fromkeys(ATTRIBUTES[entity_type], i) | {"identity": f"x{i}"} for i in range(3)]


class ManagementTarget:
    """decode_message, then answer() over canned rows."""

    allowed = (MalformedError,)
    cover = (ROUTER / "amqp" / "message.py", ROUTER / "amqp" / "codec.py",
             ROUTER / "management" / "requests.py", ROUTER / "management" / "entities.py")

    def __init__(self) -> None:
        self.rows = Rows()
        self.statuses: dict[int, int] = {}

    def __call__(self, data: bytes) -> None:
        request = decode_message(data)
        status, description, _body = answer(request.application_properties, request.body, self.rows)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status not in (200, 400, 404) or not isinstance(description, str) or not description:
            raise AssertionError(f"answer {status} {description!r}")

    @staticmethod
    def seeds(rng: random.Random, n: int = 200) -> list[bytes]:
        from proton import Message

        out = []
        for i in range(n):
            props = rng.choice(({"operation": "QUERY", "type": rng.choice(list(ATTRIBUTES))},
                                {"operation": "READ", "type": "node", "identity": "x1"},
                                {"operation": "GET-TYPES"}, {"operation": gen.rstr(rng, 6)}, {}))
            body = rng.choice((None, {"attributeNames": rng.sample(list(ATTRIBUTES["link"]), 3)},
                               {"attributeNames": []}, gen.value(rng, 2)))
            m = Message(address="$management", id=f"s{i}", reply_to="r", properties=props)
            try:
                m.body = body
                out.append(bytes(m.encode()))
            except Exception:
                m.body = None
                out.append(bytes(m.encode()))
        return out
