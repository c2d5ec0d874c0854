"""qdstat's and qdmanage's requests, replayed: the exact messages recorded from the real tools (1.19.0) by
scripts/record_qdr_tools.py into tests/management/data/qdr_tool_requests.json, sent as the tools send them
(a connection without SASL, a sender per target address, a dynamic receiver for the answers), and the
answers read as the tools read them.

CI has neither the tools nor their source, so the tests of issue 32 replay these requests. The recording
was made against a four-node mesh with node ids A-D (``-r C``, ``--all-routers``: requests to
``_topo/0/<node>/$management``), with a listener port and a peer port that a replay may replace
(`ToolSession.send`'s ``substitute``).
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton import Message

from tests.support.clients import Client
from tests.support.waiting import wait_for

FIXTURE = Path(__file__).resolve().parents[1] / "management" / "data" / "qdr_tool_requests.json"
PREFIX = "org.apache.qpid.dispatch."


def recording() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def command(*args: str, tool: str = "qdstat", reference: bool = False) -> dict[str, Any]:
    """The recorded command ``tool args...`` (``reference``: the one recorded against qdrouterd)."""
    key = "qdrouterd_commands" if reference else "commands"
    for c in recording()[key]:
        if c["tool"] == tool and c["args"] == list(args):
            return c
    raise KeyError(f"{tool} {' '.join(args)} was not recorded")


@dataclass
class Exchange:
    """One request as sent and its answer."""

    to: str
    properties: dict[str, Any]
    body: Any
    status: int
    description: str
    answer: Any
    answer_properties: dict[str, Any]

    @property
    def operation(self) -> str:
        return self.properties["operation"]

    @property
    def entity_type(self) -> str | None:
        return self.properties.get("entityType") or self.properties.get("type")


def _replace(value: Any, substitute: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in substitute.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {_replace(k, substitute): _replace(v, substitute) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, substitute) for v in value]
    return value


class ToolSession:
    """One tool run's connection: the tools connect without SASL and keep a sender per target."""

    def __init__(self, url: str) -> None:
        self.client = Client(url, sasl=False)
        self.replies = self.client.receiver(dynamic=True, credit=100)
        self.senders: dict[str, Any] = {}
        self._ids = itertools.count(1)

    def send(self, recorded: Mapping[str, Any], substitute: Mapping[str, str] | None = None,
             timeout: float = 10.0) -> Exchange:
        """Send one recorded request (its strings with ``substitute``'s replacements) and wait for its
        answer."""
        m = Message()
        m.decode(base64.b64decode(recorded["message"]))
        if substitute:
            m.properties = _replace(dict(m.properties), substitute)
            m.body = _replace(m.body, substitute)
        cid = f"replay-{next(self._ids)}"
        m.reply_to = self.replies.address
        m.correlation_id = cid
        to = recorded["to"]
        sender = self.senders.get(to)
        if sender is None:
            sender = self.senders[to] = self.client.sender(to)
        sender.wait_credit(timeout=timeout)
        sender.send(m)

        def answered() -> Any:
            for r in self.replies.received:
                if r.message is not None and r.message.correlation_id == cid:
                    return r
            return None

        r = wait_for(answered, timeout, f"the answer to {dict(m.properties)} at {to}")
        self.replies.received.remove(r)
        props = dict(r.message.properties or {})
        return Exchange(to, dict(m.properties), m.body, props.get("statusCode"),
                        props.get("statusDescription"), r.message.body, props)

    def close(self) -> None:
        self.client.close()


def replay(url: str, recorded: Mapping[str, Any],
           substitute: Mapping[str, str] | None = None) -> list[Exchange]:
    """Every request of one recorded command, on a connection of its own (as a tool run)."""
    session = ToolSession(url)
    try:
        return [session.send(r, substitute) for r in recorded["requests"]]
    finally:
        session.close()


def entities(exchange: Exchange) -> list[dict[str, Any]]:
    """A QUERY answer as the tools read it (qpid_dispatch's Node.query): one dict per result row,
    attribute name -> value."""
    body = exchange.answer
    names = body["attributeNames"]
    return [dict(zip(names, row, strict=True)) for row in body["results"]]


def queries(exchanges: list[Exchange], entity_type: str) -> list[Exchange]:
    """The QUERY exchanges of one (long) entity type."""
    return [e for e in exchanges if e.operation == "QUERY" and e.entity_type == PREFIX + entity_type]
