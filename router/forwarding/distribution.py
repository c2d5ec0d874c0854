"""Choosing destinations: closest, balanced and multicast, on one node and across the mesh.

Pure functions over an `Address` and what they are told; no state of their own beyond each address's
round-robin cursor. `backlog(handle)` is the adapter's count of deliveries handed to a consumer's link but
not yet on the wire (a closed session window keeps them there); it is asked only about a consumer that
already has more than `limit` unsettled deliveries.

Rules (docs/MESH.md's "How the node and the mesh forward" table says the same for users):

* closest, one node: round-robin over consumers with credit whose session is not backed up;
* balanced, one node: fewest unsettled deliveries wins; consumers without credit only when none has any;
* closest, mesh: a local consumer with credit first; else the cheapest remote node, round-robin among
  equal costs; never back to the peer the delivery came from;
* balanced, mesh: score = outstanding deliveries, plus the path cost for a remote node that has any; the
  start rotates, so strictly sequential calls reach every destination in turn;
* multicast: one copy per local consumer, and one per next-hop peer toward nodes whose shortest-path tree
  from the delivery's origin passes through here, never to a peer in its trace or the one it came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from router.forwarding.records import Address, Consumer, RemoteDest

Backlog = Callable[[object], int]
NO_CREDIT = 1 << 40        # score penalty of a destination that cannot take a delivery now


def pick(a: Address, backlog: Backlog, limit: int) -> Consumer | None:
    """One local consumer for an anycast delivery (closest: round-robin; balanced: fewest unsettled)."""
    consumers = a.consumers
    n = len(consumers)
    if n == 1:
        return consumers[0]
    if n == 0:
        return None
    if a.distribution == "balanced":
        # fewest unsettled wins; consumers without credit only when none has credit. A consumer
        # whose session window is closed keeps its deliveries unsettled, so it loses naturally.
        best = consumers[0]
        best_score = 1 << 62
        start = a.rr
        for k in range(n):
            c = consumers[(start + k) % n]
            score = c.unsettled if c.credit > 0 and not c.busy else c.unsettled + NO_CREDIT
            if score < best_score:
                best, best_score = c, score
                if score == 0:
                    break
        a.rr = (start + 1) % n
        return best
    start = a.rr
    for k in range(n):
        i = (start + k) % n
        c = consumers[i]
        if c.credit > 0 and not c.busy and (c.unsettled < limit or backlog(c.handle) <= limit):
            a.rr = (i + 1) % n
            return c
    a.rr = (start + 1) % n
    return consumers[start % n]


def pick_mesh(a: Address, came_from: str | None, backlog: Backlog, limit: int
              ) -> tuple[Consumer | None, RemoteDest | None]:
    """A destination for an anycast delivery when `a` has remote destinations (or came from a peer).

    Returns (consumer, None) for a local consumer and (next-hop data-out link, destination) for a
    remote one. A delivery that came from peer `came_from` is delivered here if a local consumer has
    credit (the upstream node chose this one) and is never sent back to that peer.
    """
    if a.distribution == "balanced" and came_from is None:
        return _pick_balanced(a)
    consumers = a.consumers
    if consumers:
        c = pick(a, backlog, limit)
        if c is not None and c.credit > 0 and not c.busy:
            return c, None
    best: RemoteDest | None = None
    ties: list[RemoteDest] = []
    for d in a.remote:
        if not d.out.alive or d.out.peer == came_from:
            continue
        if best is None:
            best = d
        elif d.cost != best.cost:
            break
        ties.append(d)
    if len(ties) > 1:
        best = ties[a.rr % len(ties)]
        a.rr += 1
    if best is not None:
        return best.out, best
    if consumers:
        return pick(a, backlog, limit), None
    return None, None


def _pick_balanced(a: Address) -> tuple[Consumer | None, RemoteDest | None]:
    """Fewest outstanding deliveries wins, remote ones weighted by path cost once they have any.

    The start rotates, so equal scores (sequential calls: every score 0) take turns and no destination
    with credit starves; slower or farther ones collect deliveries and get less.
    """
    consumers = a.consumers
    remote = a.remote
    nl = len(consumers)
    n = nl + len(remote)
    start = a.rr % n
    a.rr = start + 1
    best_c: Consumer | None = None
    best_d: RemoteDest | None = None
    best_score = 1 << 62
    for k in range(n):
        i = (start + k) % n
        if i < nl:
            c = consumers[i]
            score = c.unsettled if c.credit > 0 and not c.busy else c.unsettled + NO_CREDIT
            if score < best_score:
                best_c, best_d, best_score = c, None, score
        else:
            d = remote[i - nl]
            out = d.out
            if not out.alive:
                continue
            score = d.unsettled + d.cost if d.unsettled else 0
            if out.busy:
                score += NO_CREDIT
            if score < best_score:
                best_c, best_d, best_score = out, d, score
        if best_score == 0:
            break
    return best_c, best_d


def fanout(a: Address, presettled: bool, backlog: Backlog, capacity: int) -> list[Consumer]:
    """Every local consumer of a multicast address.

    A pre-settled copy for a consumer without credit waits on its link only while fewer than `capacity`
    deliveries wait there already; beyond that it is dropped (at-most-once), so a slow consumer never
    holds back the producer or the other consumers. One for a consumer busy with a streamed message waits
    for the stream's end the same way (held, while fewer than `capacity` are).
    """
    if not presettled:
        return list(a.consumers)
    return [c for c in a.consumers
            if ((c.held is None or len(c.held) < capacity) if c.busy
                else (c.credit > 0 or backlog(c.handle) < capacity))]


def mesh_fanout(a: Address, local: list[Consumer], node_id: str, origin: str | None,
                trace: Iterable[str], came_from: str | None,
                origins: Callable[[], Mapping[str, frozenset[str]]]) -> list[Consumer]:
    """`local` (the local copies) plus one data-out link per next hop that leads to a consumer.

    A link is used only toward nodes whose shortest-path tree from the delivery's `origin` (None: this
    node) passes through here, and never toward a peer in the delivery's trace or the peer it came from,
    so in meshes with redundant paths each consumer gets exactly one copy.
    """
    out = local
    if a.links:
        seen = set(trace)
        if came_from is not None:
            seen.add(came_from)
        valid = None
        for link, behind in a.links:
            if not link.alive or link.peer in seen:
                continue
            if origin is not None and origin != node_id:
                if valid is None:
                    valid = origins()
                if not any(origin in valid.get(n, ()) for n in behind):
                    continue
            out.append(link)
    return out
