"""What a link-state engine sends: floods, HELLOs, RAs, requests and updates toward one node.

A mixin of router.linkstate.engine.LinkStateEngine: each method appends :class:`Outgoing` to `out`.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any

from router.linkstate.config import due
from router.linkstate.envelope import (
    HELLO_ADDRESS,
    ROUTER_ALL,
    LinkId,
    Outgoing,
    mobile_address,
    outgoing,
    router_address,
)
from router.linkstate.lsdb import RemoteNode
from router.linkstate.messages import (
    HELLO,
    LSR,
    LSU,
    MAR,
    MAU,
    RA,
    LinkStateUpdate,
    MobileAddressRequest,
    MobileAddressUpdate,
    RouterAdvertisement,
)


class Sending:
    """What a link-state engine sends: floods, HELLOs, RAs, requests and updates toward one node."""

    def _forward(self, message: Mapping[str, Any], target: str, trace: Sequence[str]) -> list[Outgoing]:
        """Transit: pass a message for ``target`` to our next hop toward it."""
        link = self.route_control(target, trace)
        if link is None:
            return []
        return [Outgoing({"to": message["to"], "opcode": message["opcode"], "body": message["body"],
                          "trace": [*trace, self.node_id]}, (link,))]

    def _flood_links(self, exclude: LinkId | None = None, trace: Sequence[str] = (),
                     covered: Container[str] | None = None) -> tuple[LinkId, ...]:
        """Links to flood on: every bound one but `exclude`'s and those to nodes in `trace` or `covered`.

        `covered`: the neighbours of the message's origin, as its link state says. The origin floods to
        them itself; if its link to one of them just went down, that node misses this update and catches
        up through the sequence gap (MAR) or the next RA, as after a lost message."""
        covered = covered or ()
        return tuple([link for node, link in self._neighbors.bound_links().items()
                      if link != exclude and node not in trace and node not in covered])

    def _flood_out(self, address: str, opcode: str, body: dict[str, Any], out: list[Outgoing]) -> None:
        links = self._flood_links()
        if links:
            out.append(outgoing(address, opcode, body, [self.node_id], links))

    def _hello_on(self, links: tuple[LinkId, ...]) -> Outgoing:
        return outgoing(HELLO_ADDRESS, HELLO, self._neighbors.hello().to_map(), [self.node_id], links)

    def _send_ra(self, now: float, out: list[Outgoing]) -> None:
        self._last_ra = now
        body = RouterAdvertisement(self.node_id, self.instance, self._lsdb.ls_seq, self._local.seq).to_map()
        self._flood_out(ROUTER_ALL, RA, body, out)

    def _to_node(self, node: str, address: str, opcode: str, body: dict[str, Any], out: list[Outgoing],
                 via: LinkId | None = None) -> bool:
        route = self._control_route(node)
        if route is not None:
            link = route[1]
        elif via is not None and self._neighbors.peer_on(via) == node:
            link = via  # the requester is the peer on the link its request came on
        else:
            return False
        message = {"to": address, "opcode": opcode, "body": body, "trace": [self.node_id]}
        out.append(Outgoing(message, (link,)))
        return True

    def _request_ls(self, node: RemoteNode, want: int, now: float, out: list[Outgoing]) -> None:
        """Send ``node`` an LSR (once per ``request_retry``), or wait until it is reachable."""
        if self._want_lsr:
            want = max(want, self._want_lsr.pop(node.id, 0))
        if node.ls_seq >= want:
            return
        if node.lsr_seq >= want and not due(now, node.lsr_at, self.config.request_retry):
            return
        if self._to_node(node.id, router_address(node.id), LSR, self._lsr_body, out):
            node.lsr_at, node.lsr_seq = now, want
            self._awaiting_lsu.add(node.id)
        else:
            self._want_lsr[node.id] = want

    def _request_ma(self, node: str, now: float, out: list[Outgoing]) -> None:
        """Send ``node`` a MAR if we are behind it and none is outstanding, or wait until reachable."""
        self._want_mar.discard(node)
        if not self._remote.behind(node) or \
                self._remote.request_outstanding(node, now, self.config.request_retry):
            return
        if not self._send_mar(node, now, out):
            self._want_mar.add(node)

    def _send_mar(self, node: str, now: float, out: list[Outgoing]) -> bool:
        body = MobileAddressRequest(self.node_id, self.instance, self._remote.seq_of(node)).to_map()
        if not self._to_node(node, mobile_address(node), MAR, body, out):
            return False
        self._remote.requested(node, now)
        self._awaiting_mau.add(node)
        return True

    def _send_lsu(self, node: str, out: list[Outgoing], via: LinkId | None = None) -> None:
        seq = self._lsdb.ls_seq
        if self._lsu_cache is None or self._lsu_cache[0] != seq:
            self._lsu_cache = seq, LinkStateUpdate(self.node_id, self.instance, self._lsdb.own_ls()).to_map()
        if self._to_node(node, router_address(node), LSU, self._lsu_cache[1], out, via):
            self._owe_lsu.discard(node)
        else:
            self._owe_lsu.add(node)

    def _send_absolute(self, node: str, out: list[Outgoing], via: LinkId | None = None) -> None:
        published = self._local.published()
        body = MobileAddressUpdate(self.node_id, self.instance, self._local.seq, exist=tuple(published),
                                   hints=tuple(published.values())).to_map()
        if self._to_node(node, mobile_address(node), MAU, body, out, via):
            self._owe_mau.discard(node)
        else:
            self._owe_mau.add(node)

    def _flush_wants(self, now: float, out: list[Outgoing]) -> None:
        """Send the requests and answers that waited for their node to become reachable."""
        self._wants_due = False
        for node_id in list(self._want_lsr):
            node = self._lsdb.get(node_id)
            if node is None:
                del self._want_lsr[node_id]
            else:
                self._request_ls(node, 0, now, out)
        for node_id in list(self._want_mar):
            self._request_ma(node_id, now, out)
        for node_id in list(self._owe_lsu):
            self._send_lsu(node_id, out)
        for node_id in list(self._owe_mau):
            self._send_absolute(node_id, out)
