"""Which control messages a link-state engine takes: scope, flood duplicates, impostors, rejections.

A mixin of router.linkstate.engine.LinkStateEngine: `_admit` decides before a handler runs; a peer that
claims another node's id (or ours) is noted as an impostor for the adapter to close.
"""

from __future__ import annotations

import logging

from router.linkstate.envelope import LinkId, Outgoing, Scope, classify
from router.linkstate.lsdb import Verdict
from router.linkstate.messages import ControlMessage, ControlMessageError, UnsupportedVersionError, short

log = logging.getLogger("router.linkstate")


class Admission:
    """Which control messages a link-state engine takes: scope, flood duplicates, impostors, rejections."""

    # == internals ========================================================================================
    def _classify(self, to: str | None) -> tuple[Scope, str | None]:
        result = classify(to)
        if len(self._scopes) < 1024:    # `to` comes from peers: a bounded cache of the usual ones
            self._scopes[to] = result
        return result

    def _admit(self, msg: ControlMessage, now: float, out: list[Outgoing], request_ls: bool) -> bool:
        """Learn the sender; check its instance (restart, stale message, duplicate id)."""
        node = self._lsdb.nodes.get(msg.id)
        if node is not None and node.instance == msg.instance:
            return True  # the usual case
        node, created = self._lsdb.learn(msg.id, now)
        verdict = Verdict.SAME if node.instance == msg.instance else \
            self._lsdb.observe_instance(node, msg.instance, now)
        if verdict is Verdict.SAME and not created:
            return True
        if verdict is Verdict.STALE:
            self.counters["stale_instance"] += 1
            return False
        if verdict is Verdict.DUPLICATE:
            self.counters["duplicate_id"] += 1
            self._warn.once(("duplicate", msg.id), logging.CRITICAL,
                            "duplicate node id %s: instances %s and %s are both active", msg.id,
                            node.instance, msg.instance)
            return False
        if verdict is Verdict.RESTART:
            log.info("node %s restarted (instance %s)", msg.id, msg.instance)
            self._lsdb.restart(node)
            self._remote.flush(msg.id)
            self._want_mar.discard(msg.id)
            self._request_ls(node, 1, now, out)
        elif created and request_ls:
            self._request_ls(node, 1, now, out)
        return True

    def _impostor(self, msg: ControlMessage, link_id: LinkId) -> bool:
        """The peer on `link_id` speaks for itself as node `msg.id`, with an instance other than the one of
        node `msg.id` that is alive elsewhere (reachable through another neighbour, or a neighbour on
        another link): an impostor (or a second process with the same id). Never a neighbour, never
        routed to: its link is ignored from now on and closed by the adapter; logged once per id. A node
        that really restarted lost its old links first, so it is not alive elsewhere any more (at most
        one hello_max_age after, when it was reached through another node)."""
        node = self._lsdb.nodes.get(msg.id)
        if node is None or node.instance is None or node.instance == msg.instance:
            return False
        hop = self._routes.next_hop.get(msg.id)
        if hop is None or (hop == msg.id and self._neighbors.link_of(msg.id) == link_id):
            return False
        self._impostor_links[link_id] = msg.id
        self._impostors_to_close.append(link_id)
        self.counters["impostor"] += 1
        self._warn.once(("impostor", msg.id), logging.CRITICAL,
                        "refusing a neighbour claiming to be node %s (instance %s): node %s is alive with "
                        "instance %s; closing that inter-router connection", msg.id, msg.instance, msg.id,
                        node.instance)
        return True

    def take_impostors(self) -> list[LinkId]:
        """Links found to lead to an impostor since the last call: the adapter closes them."""
        out, self._impostors_to_close = self._impostors_to_close, []
        return out

    def _own_id_seen(self, msg: ControlMessage) -> None:
        if msg.instance == self.instance:
            self.counters["own_echo"] += 1
            return
        self.counters["duplicate_id"] += 1
        self._warn.once(("duplicate", self.node_id, msg.instance), logging.CRITICAL,
                        "duplicate node id %s: another node (instance %s) uses our id (instance %s)",
                        self.node_id, msg.instance, self.instance)

    def _reject(self, err: ControlMessageError, link_id: LinkId) -> None:
        if isinstance(err, UnsupportedVersionError):
            self.counters["newer_version"] += 1
            self._warn.once(("version", err.sender), logging.WARNING,
                            "dropping control messages from %s: %s", _shown(err.sender), _cut(err.reason))
            return
        self.counters["malformed"] += 1
        who = err.sender if err.sender is not None else ("link", link_id)
        self._warn.once(("malformed", who), logging.WARNING,
                        "dropping malformed control message from %s: %s",
                        _shown(err.sender) if err.sender is not None else f"link {link_id!r}",
                        _cut(err.reason))


def _shown(sender: object) -> str:
    """A peer-sent node id for a log line (ids of valid messages are short; a bad one may not be)."""
    return sender if isinstance(sender, str) and len(sender) <= 80 else short(sender)


def _cut(reason: str, limit: int = 300) -> str:
    return reason if len(reason) <= limit else f"{reason[:limit]}... ({len(reason)} characters)"
