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

Bounded turns: an absolute MAU (or a flush) that changes more than ``MAU_CHUNK`` addresses of a node replaces
the node's set at once, but its address -> nodes index follows in steps of at most ``MAU_CHUNK`` addresses
(:meth:`RemoteAddresses.step`, run by the adapter on successive loop turns), so that a resync of 20,000
addresses does not hold the loop for tens of milliseconds. A node with a step pending keeps the addresses
whose index entry may still be out of date (``_dirty``); a later diff, absolute MAU or flush of that node
composes with it: the set is always the newest, each step makes an address's index entry agree with it.
While steps are pending, routing sees a mix of the old and the new set; once they are done, exactly the new.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, islice

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
        """Addresses as of ``seq`` -> hint (what an absolute MAU carries), in the order they were published
        (not sorted: a sort of 20,000 costs the node that answers a MAR 2-3 ms in that turn)."""
        return dict(self._published)


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

    Invariant: for every node N and address a not in ``_dirty[N]``, N is among the holders of a in the
    index if and only if a is in N's set (no set: an empty one). A large replacement puts the addresses it
    changes in ``_dirty[N]``; :meth:`step` restores the invariant for a bounded number of them at a time.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, _Remote] = {}
        self._index: dict[str, tuple[str, ...]] = {}
        self._heard: set[str] = set()  # nodes heard at mobile_seq 0 (others have a _Remote)
        self._changed: set[str] | None = None  # None: nobody follows the changes (yet)
        # node -> addresses whose index entry may not agree with the node's set yet (see the invariant)
        self._dirty: dict[str, set[str]] = {}
        self.steps = 0  # steps that indexed part of a large absolute MAU or of a forgotten node's set
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
        if not nodes:
            return None
        for node in sorted(nodes) if len(nodes) > 1 else nodes:
            state = self._nodes.get(node)      # a holder still in the index while a step is pending
            if state is not None and address in state.addresses:    # may have lost it (or its set)
                return state.addresses[address]
        return None

    def pending(self) -> int:
        """Addresses whose index entry may still lag behind their node's set (0: the index is exact)."""
        return sum(map(len, self._dirty.values())) if self._dirty else 0   # asked every pump: 0 at once

    def step(self, limit: int = MAU_CHUNK) -> bool:
        """Bring the index of at most ``limit`` pending addresses up to date; True if some are left."""
        dirty_nodes = self._dirty
        if not dirty_nodes:
            return False
        self.steps += 1
        changed = False
        for node in list(dirty_nodes):
            dirty = dirty_nodes[node]
            while dirty and limit > 0:
                changed |= self._reconcile(node, dirty.pop())
                limit -= 1
            if not dirty:
                del dirty_nodes[node]
            if limit <= 0:
                break
        if changed:
            self.epoch += 1
        return bool(dirty_nodes)

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
        """Forget ``node``'s addresses and seq (node deleted or restarted); many leave the index in steps."""
        self._heard.discard(node)
        state = self._nodes.pop(node, None)
        if state is not None and state.addresses:
            self.epoch += 1
            self._pend(node, state.addresses.keys())

    # -- internals -----------------------------------------------------------------------------------------
    def _apply_diff(self, node: str, state: _Remote, added: Mapping[str, int | None],
                    deleted: Iterable[str]) -> None:
        """A diff MAU, in place: O(addresses it names)."""
        dirty = self._dirty.get(node)
        if dirty is not None:           # the index lags behind the set: each address named is made exact
            addresses = state.addresses
            addresses.update(added)
            for address in deleted:
                addresses.pop(address, None)
            for address in chain(added, deleted):
                dirty.discard(address)
                self._reconcile(node, address)
            if not dirty:
                del self._dirty[node]
            self.epoch += 1
            return
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
        """An absolute MAU: the set is replaced now, the index follows now or in steps (`_pend`)."""
        old = state.addresses
        if old != addresses:
            self.epoch += 1
        state.addresses = addresses
        # a set made from the larger side (at C speed, ~0.4 ms for 20,000), then the smaller one folded in
        big, small = (addresses, old) if len(addresses) >= len(old) else (old, addresses)
        self._pend(node, big.keys() ^ small.keys())

    def _pend(self, node: str, addresses: Iterable[str]) -> None:
        """The index entries of ``addresses`` may not agree with ``node``'s set any more: made exact now if
        they are few and nothing is pending for the node, else left to `step`."""
        dirty = self._dirty.get(node)
        if dirty is not None:
            dirty.update(addresses)
            return
        addresses = addresses if isinstance(addresses, set) else set(addresses)
        if len(addresses) > MAU_CHUNK:
            self._dirty[node] = addresses
            return
        for address in addresses:
            self._reconcile(node, address)

    def _reconcile(self, node: str, address: str) -> bool:
        """Make the index say ``node`` holds ``address`` exactly if its set has it; True if it changed."""
        state = self._nodes.get(node)
        wanted = state is not None and address in state.addresses
        if wanted == (node in self._index.get(address, ())):
            return False
        if wanted:
            self._hold(address, node)
        else:
            self._release(address, node)
        return True

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
