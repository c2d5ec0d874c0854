"""Mobile-address sync: our addresses go out as MAUs, other nodes' addresses come in from theirs.

Local side: the adapter adds an address when its first local destination appears and removes it when the
last one goes. Each tick with changes bumps ``mobile_seq`` and yields one differential MAU (flooded before
the RA that advertises the new seq, so peers do not MAR for it); a burst larger than ``MAU_CHUNK`` goes
out as several diffs of consecutive seqs, so that no peer applies thousands of addresses in one step. A
MAR is answered with an absolute MAU.

Remote side, per node: a diff is applied only if its seq is exactly ``held + 1``; an equal or older one is a
duplicate; a newer one is a gap and asks for a MAR. Applying a too-new diff because a MAR is outstanding
would silently lose the diff in between (skupper-router #473), so diffs are never admitted on a gap. An
absolute MAU replaces the set unless its seq is the one held; an older one (a late answer) is ignored.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice

from router.linkstate.config import due
from router.linkstate.messages import MobileAddressUpdate

# Hints: qdrouterd's address treatments, carried in MAU `hints` parallel to `add` / `exist`.
HINT_MULTICAST = 1
HINT_CLOSEST = 2
HINT_BALANCED = 3
_HINTS = {"multicast": HINT_MULTICAST, "closest": HINT_CLOSEST, "balanced": HINT_BALANCED}
# Changes per diff MAU: a receiver decodes and applies one in ~1 ms, between its other work
MAU_CHUNK = 500


def hint_for(distribution: str) -> int:
    """The MAU hint of a distribution name (``closest``, ``balanced``, ``multicast``)."""
    return _HINTS[distribution]


def distribution_for(hint: int | None) -> str | None:
    """The distribution name of a MAU hint, None if unknown."""
    return next((name for name, value in _HINTS.items() if value == hint), None)


class LocalAddresses:
    """This node's mobile addresses and ``mobile_seq``."""

    def __init__(self) -> None:
        self.seq = 0
        self._published: dict[str, int] = {}  # as of `seq`
        self._added: dict[str, int] = {}
        self._deleted: set[str] = set()

    @property
    def addresses(self) -> dict[str, int]:
        """Current addresses (published or not) -> hint."""
        current = {a: h for a, h in self._published.items() if a not in self._deleted}
        current.update(self._added)
        return current

    def add(self, address: str, hint: int) -> None:
        if address in self._deleted:
            self._deleted.discard(address)
        elif address not in self._published:
            self._added[address] = hint

    def remove(self, address: str) -> None:
        if self._added.pop(address, None) is None and address in self._published:
            self._deleted.add(address)

    def take_diff(self, limit: int | None = None) -> tuple[int, dict[str, int], list[str]] | None:
        """Publish pending changes, at most ``limit`` of them (deletions first; the rest stay pending for
        the next call): ``(new seq, added -> hint, deleted)``, or None if nothing changed."""
        if not self._added and not self._deleted:
            return None
        self.seq += 1
        if limit is None or len(self._added) + len(self._deleted) <= limit:
            added, deleted = dict(sorted(self._added.items())), sorted(self._deleted)
            self._added, self._deleted = {}, set()
        else:
            deleted = sorted(islice(self._deleted, limit))
            self._deleted.difference_update(deleted)
            taken = list(islice(self._added, limit - len(deleted)))
            added = {address: self._added.pop(address) for address in sorted(taken)}
        self._published.update(added)
        for address in deleted:
            del self._published[address]
        return self.seq, added, deleted

    def published(self) -> dict[str, int]:
        """Addresses as of ``seq`` -> hint (what an absolute MAU carries)."""
        return dict(sorted(self._published.items()))


class Applied(enum.Enum):
    """Outcome of an inbound MAU."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"  # seq already held
    GAP = "gap"  # diff too new: a MAR is needed
    STALE = "stale"  # absolute older than held


@dataclass(slots=True)
class _Remote:
    seq: int = 0
    advertised: int = 0  # highest mobile_seq heard of (RA or MAU)
    addresses: dict[str, int | None] = field(default_factory=dict)
    mar_at: float = -math.inf  # last MAR sent, while one is outstanding


class RemoteAddresses:
    """Mobile addresses of the other nodes, and an index address -> nodes.

    Applying a diff MAU costs O(addresses it names): the node's set and the index are changed in place (an
    absolute MAU, a resync, costs the size of the node's set). The index holds a tuple of holders per
    address (most addresses have one). Once :meth:`take_changed` was called, the addresses whose holders
    changed are collected until the next call, so that the node's route table can follow in O(changed).
    """

    def __init__(self) -> None:
        self._nodes: dict[str, _Remote] = {}
        self._index: dict[str, tuple[str, ...]] = {}
        self._heard: set[str] = set()  # nodes heard at mobile_seq 0 (others have a _Remote)
        self._changed: set[str] | None = None  # None: nobody follows the changes (yet)
        self.epoch = 0  # bumped whenever the index (or a hint) changes

    # -- views ---------------------------------------------------------------------------------------------
    def seq_of(self, node: str) -> int:
        known = self._nodes.get(node)
        return 0 if known is None else known.seq

    def addresses_of(self, node: str) -> Mapping[str, int | None]:
        known = self._nodes.get(node)
        return {} if known is None else dict(known.addresses)

    def count_of(self, node: str) -> int:
        """How many addresses ``node`` has."""
        known = self._nodes.get(node)
        return 0 if known is None else len(known.addresses)

    def index(self) -> Mapping[str, frozenset[str]]:
        """Address -> ids of the nodes that have it (a read-only view, each value made on access)."""
        return HoldersView(self._index)

    def holders(self, address: str) -> tuple[str, ...]:
        """Ids of the nodes that have ``address`` (empty if none)."""
        return self._index.get(address, ())

    def __len__(self) -> int:
        return len(self._index)

    def changes_pending(self) -> bool:
        """Whether `take_changed` would give anything (None counts: nobody has taken them yet)."""
        return self._changed is None or bool(self._changed)

    def take_changed(self) -> set[str] | None:
        """Addresses whose holders changed since the last call; None on the first call (all of them)."""
        changed, self._changed = self._changed, set()
        return changed

    def hint(self, address: str) -> int | None:
        """The hint of ``address`` as given by the node with the lowest id having it."""
        nodes = self._index.get(address)
        return self._nodes[min(nodes)].addresses[address] if nodes else None

    # -- protocol ------------------------------------------------------------------------------------------
    def advertised(self, node: str, seq: int) -> None:
        """An RA says ``node`` is at mobile ``seq``."""
        if seq == 0 and node not in self._nodes:
            self._heard.add(node)
            return
        state = self._nodes.setdefault(node, _Remote())
        state.advertised = max(state.advertised, seq)

    def heard_of(self, node: str) -> bool:
        """True once ``node``'s mobile_seq was heard (RA, MAU) or asked for."""
        return node in self._heard or node in self._nodes

    def behind(self, node: str) -> bool:
        """True if ``node`` advertised a mobile_seq above the one held."""
        state = self._nodes.get(node)
        return state is not None and state.advertised > state.seq

    def request_outstanding(self, node: str, now: float, retry: float) -> bool:
        """True if a MAR to ``node`` went out less than ``retry`` ago and is not answered yet."""
        state = self._nodes.get(node)
        return state is not None and not due(now, state.mar_at, retry)

    def requested(self, node: str, now: float) -> None:
        self._nodes.setdefault(node, _Remote()).mar_at = now

    def apply(self, mau: MobileAddressUpdate) -> Applied:
        state = self._nodes.setdefault(mau.id, _Remote())
        seq = mau.mobile_seq
        state.advertised = max(state.advertised, seq)
        if mau.is_absolute:
            if seq < state.seq:
                return Applied.STALE
            if seq == state.seq:
                state.mar_at = -math.inf
                return Applied.DUPLICATE
            self._replace(mau.id, state, mau.hinted())
        else:
            if seq <= state.seq:
                return Applied.DUPLICATE
            if seq != state.seq + 1:
                return Applied.GAP
            self._apply_diff(mau.id, state, mau.hinted(), mau.delete or ())
        state.seq = seq
        if state.seq >= state.advertised:
            state.mar_at = -math.inf
        return Applied.APPLIED

    def flush(self, node: str) -> None:
        """Forget ``node``'s addresses and seq (node deleted or restarted)."""
        self._heard.discard(node)
        state = self._nodes.pop(node, None)
        if state is not None:
            self._replace(node, state, {})

    # -- internals -----------------------------------------------------------------------------------------
    def _apply_diff(self, node: str, state: _Remote, added: Mapping[str, int | None],
                    deleted: Iterable[str]) -> None:
        """A diff MAU, in place: O(addresses it names)."""
        addresses, index, followed = state.addresses, self._index, self._changed
        changed = False
        for address, hint in added.items():
            if address in addresses:
                if addresses[address] != hint:
                    addresses[address] = hint
                    changed = True
                continue
            addresses[address] = hint
            holders = index.get(address)       # _hold, inlined: a burst of new addresses runs this
            index[address] = (node,) if holders is None else (*holders, node)
            if followed is not None:
                followed.add(address)
            changed = True
        for address in deleted:
            if address in addresses:
                del addresses[address]
                self._release(address, node)
                changed = True
        if changed:
            self.epoch += 1

    def _replace(self, node: str, state: _Remote, addresses: dict[str, int | None]) -> None:
        old = state.addresses
        if old != addresses:
            self.epoch += 1
        for address in old.keys() - addresses.keys():
            self._release(address, node)
        for address in addresses.keys() - old.keys():
            self._hold(address, node)
        state.addresses = addresses

    def _hold(self, address: str, node: str) -> None:
        holders = self._index.get(address)
        self._index[address] = (node,) if holders is None else (*holders, node)
        if self._changed is not None:
            self._changed.add(address)

    def _release(self, address: str, node: str) -> None:
        holders = self._index[address]
        if len(holders) == 1:
            del self._index[address]
        else:
            self._index[address] = tuple(h for h in holders if h != node)
        if self._changed is not None:
            self._changed.add(address)


class HoldersView(Mapping[str, frozenset[str]]):
    """Read-only address -> frozenset of holders over the index of tuples (no copy of the table)."""

    __slots__ = ("_index",)

    def __init__(self, index: Mapping[str, tuple[str, ...]]) -> None:
        self._index = index

    def __getitem__(self, address: str) -> frozenset[str]:
        return frozenset(self._index[address])

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, address: object) -> bool:
        return address in self._index
