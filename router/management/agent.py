"""The management agent: answers `$management` requests from anywhere in the mesh.

The agent is an in-process AMQP 1.0 client of its own node (router.adapter.inprocess, as the broker
gateway is), so requests and responses cross the forwarding engine like any other traffic: a request
sent to `_topo/0/<node>/$management` is routed to that node by id, and the response goes to the
request's `reply_to` through the anonymous relay. `$management` is node-local (never advertised), so
each node answers for itself. Requests are decoded and answers encoded by the node's own codec
(router.amqp.message); the answers come from router.management.requests.

Access levels: the agent consumes one address per level (router.policy.reserved): `$management`
(``redacted``), `$management/read` and `$management/write`. A client's request to any node's
`$management` is routed by its ingress node to the address of the level that node granted the client
(router.policy), so the receiver a request arrives on is its level, and `EntityView`
(router.management.access) shows the entities as that level allows.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from router.adapter.inprocess import ACCEPTED, REJECTED, NodeConnection
from router.adapter.routerlinks import RouterLink
from router.amqp.codec import MalformedError
from router.amqp.message import decode_message, encode_message
from router.management.access import EntityView
from router.management.entities import NodeEntities
from router.management.qdr import answer as qdr
from router.management.qdr.rates import LinkRates, settled
from router.management.qdr.source import Source
from router.management.requests import INTERNAL, TOO_LARGE, answer
from router.management.writes import WRITE_OPERATIONS, ConfigWriter
from router.policy.levels import READ, REDACTED, WRITE
from router.policy.reserved import agent_addresses

log = logging.getLogger(__name__)

ADDRESS = "$management"
SAMPLE_INTERVAL = 1.0      # seconds between zero-credit samples of every link
SAMPLE_SLICE = 2000        # links a sample visits per loop turn (about 1 ms)
CREDIT = 64                # requests the agent takes at a time
MAX_QUEUED_REPLIES = 1024  # answers waiting for credit beyond this are dropped (logged)
MAX_REPLY_BYTES = 16 * 1024 * 1024   # a bigger encoded answer is replaced by a 413 (ask for pages)


class ManagementAgent:
    """Serves one node's management entities on `$management`."""

    def __init__(self, server: Any, loop: asyncio.AbstractEventLoop,
                 attach: Callable[[socket.socket, str], object]) -> None:
        self.entities = NodeEntities(server)
        self.writer = ConfigWriter(server)
        self.conn = NodeConnection(loop, attach, "management")
        # one receiver per access level: the address a request arrives on is the level it was granted
        self.receivers = {level: self.conn.receiver(agent_addresses(level), _Requests(self, level))
                          for level in (REDACTED, READ, WRITE)}
        self.requests = self.receivers[REDACTED]        # `$management`
        self.replies = self.conn.sender(None, _Replies(self))
        for link in self.receivers.values():
            link.flow(CREDIT)
        self._waiting: deque[tuple[str, bytes]] = deque()   # (reply_to, encoded answer)
        self.answered = 0
        self.closed = False             # close() called: our links close with it, nothing to warn about
        self.server = server
        self.loop = loop
        self._last_sample = time.monotonic()
        self._seen: set = set()      # the links of the last sample
        self.rates = LinkRates()     # settlement rates of the links (qdrouterd's settleRate)
        self._sampler = loop.call_later(SAMPLE_INTERVAL, self._sample)

    def _sample(self) -> None:
        """Start a sample of every link: the time since the last one goes to the zero-credit time of each
        link without credit, and the settlement rates get a snapshot when one is due. `SAMPLE_SLICE` links
        per loop turn (at 20,000 links one pass held the loop for 21-45 ms)."""
        now = time.monotonic()
        elapsed, self._last_sample = max(now - self._last_sample, 0.0), now
        totals = {} if self.rates.due(now) else None
        self._sweep(list(self.server.engine.links.values()), 0, elapsed, set(), now, totals)

    def _sweep(self, links: list, at: int, elapsed: float, seen: set, now: float,
               totals: dict | None) -> None:
        """Links `at` to `at + SAMPLE_SLICE` of a sample begun at `now`; the next turn takes the rest."""
        before = self._seen
        end = at + SAMPLE_SLICE
        for rec in links[at:end]:
            if rec.__class__ is not RouterLink:
                seen.add(rec)
                if rec.credit <= 0 and rec in before:   # a link new since the last sample: from now on
                    rec.zero_credit += elapsed
                if totals is not None and getattr(rec, "outcomes", None) is not None:
                    totals[rec] = settled(rec)
        if end < len(links):
            self._sampler = self.loop.call_soon(self._sweep, links, end, elapsed, seen, now, totals)
            return
        self._seen = seen
        if totals is not None:
            self.rates.take(now, totals)
        self._sampler = self.loop.call_later(SAMPLE_INTERVAL, self._sample)

    def on_request(self, d: object, data: bytes, level: int = REDACTED) -> None:
        """A request that arrived on the receiver of access `level` (router.policy.levels)."""
        try:
            request = decode_message(data)
        except MalformedError as exc:
            log.warning("management: undecodable request dropped: %s", exc)
            self.conn.settle(d, REJECTED)
            self._more_credit(level)
            return
        self.conn.settle(d, ACCEPTED)
        self._more_credit(level)
        reply_to, properties = request.reply_to, request.application_properties
        correlation_id = request.correlation_id if request.correlation_id is not None else request.message_id
        if not reply_to:
            log.info("management: request without reply_to dropped")
            return
        operation = properties.get("operation") if isinstance(properties, dict) else None
        if qdr.handles(properties):
            view = EntityView(self.entities, level, reply_to)
            status, description, body = qdr.answer(properties, request.body,
                                                   Source(view, self.server, self.rates, level), self.writer)
        elif isinstance(operation, str) and operation.upper() in WRITE_OPERATIONS:
            status, description, body = self._write(properties, request.body, level)
        else:
            status, description, body = answer(properties, request.body,
                                               EntityView(self.entities, level, reply_to))
        if status >= 300:
            props = properties if isinstance(properties, dict) else {}
            entity_type = props.get("entityType") or props.get("type")
            log.info("management: %s %s: %d %s", props.get("operation"), entity_type, status, description)
        try:
            reply = _reply(reply_to, correlation_id, status, description, body)
        except (TypeError, ValueError):          # a value the codec cannot encode: a bug, not the node's end
            log.exception("management: internal error encoding the answer to %s", reply_to)
            reply = _reply(reply_to, correlation_id, INTERNAL,
                           "internal error encoding the answer (logged on the node)", None)
        if len(reply) > MAX_REPLY_BYTES:
            log.info("management: answer to %s of %d bytes replaced by a 413", reply_to, len(reply))
            reply = _reply(reply_to, correlation_id, TOO_LARGE,
                           f"the answer would be {len(reply)} bytes, more than {MAX_REPLY_BYTES}: ask for "
                           f"pages with the 'offset' and 'count' application properties", None)
        self.answered += 1
        self._send((reply_to, reply))

    def _write(self, properties: dict, body: object, level: int) -> tuple[int, str, Any]:
        try:
            return self.writer.answer(properties, body, level)
        except Exception:                       # a bug must not cost the node
            log.exception("management: internal error in %s", properties.get("operation"))
            return INTERNAL, "internal error applying the change (logged on the node)", None

    def _more_credit(self, level: int) -> None:
        link = self.receivers[level]
        if link.credit < CREDIT // 2:
            link.flow(CREDIT - link.credit)

    def _send(self, reply: tuple[str, bytes] | None = None) -> None:
        """Queue ``(reply_to, encoded answer)`` if given; send what credit allows."""
        if reply is not None:
            if len(self._waiting) >= MAX_QUEUED_REPLIES:
                log.warning("management: reply to %s dropped: %d replies wait for credit",
                            reply[0], len(self._waiting))
                return
            self._waiting.append(reply)
        link = self.replies
        while self._waiting and link.credit > 0:
            _, data = self._waiting.popleft()
            self.conn.send(link, data)

    def on_reply_outcome(self, d: object, outcome: int) -> None:
        if outcome != ACCEPTED:
            log.debug("management: a reply was not delivered (outcome 0x%x, %s)", outcome,
                      self.conn.condition(d))
        self.conn.forget(d)

    def close(self) -> None:
        self.closed = True
        self._sampler.cancel()
        self.conn.close()


def _reply(reply_to: str, correlation_id: Any, status: int, description: str, body: Any) -> bytes:
    """An encoded answer: the status as application properties (and a QUERY's `count` of rows, as the AMQP
    management draft has it), ``body`` as its amqp-value."""
    properties: dict[str, Any] = {"statusCode": status, "statusDescription": description}
    if isinstance(body, dict) and isinstance(body.get("results"), list):
        properties["count"] = len(body["results"])
    return encode_message(to=reply_to, correlation_id=correlation_id, body=body,
                          application_properties=properties)


class _Requests:
    """Events of the request link of one access level (router.adapter.inprocess.ReceiverEvents)."""

    def __init__(self, agent: ManagementAgent, level: int) -> None:
        self.agent = agent
        self.level = level

    def on_message(self, dlv: object, data: bytes, settled: bool) -> None:
        self.agent.on_request(dlv, data, self.level)

    def on_flow(self) -> None:
        pass

    def on_link_closed(self) -> None:
        if not self.agent.closed:       # a clean stop closes it on purpose
            log.warning("management: the request link %s was closed (%s)", agent_addresses(self.level),
                        self.agent.receivers[self.level].error)


class _Replies:
    """Events of the reply link (router.adapter.inprocess.SenderEvents)."""

    def __init__(self, agent: ManagementAgent) -> None:
        self.agent = agent

    def on_outcome(self, dlv: object, outcome: int, undeliverable: bool) -> None:
        self.agent.on_reply_outcome(dlv, outcome)

    def on_flow(self) -> None:
        self.agent._send()

    def on_link_closed(self) -> None:
        if not self.agent.closed:       # a clean stop closes it on purpose
            log.warning("management: the reply link was closed (%s)", self.agent.replies.error)
