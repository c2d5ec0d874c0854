"""A large absolute MAU is indexed in bounded steps; what comes while steps are pending composes with them.

An absolute MAU (a resync, or the answer to a restarted node's MAR) replaces the node's set at once; the
address -> nodes index follows in steps of at most MAU_CHUNK addresses, so that no loop turn applies
20,000 addresses. Whatever arrives meanwhile (a diff, another absolute MAU, a flush of the node) must
leave the index exactly the node's newest set once the steps are done: nothing lost, nothing left behind.
A follower of `take_changed` (the node's route table) must end with the index's holders for every address.
"""

from __future__ import annotations

import random

import pytest

from router.linkstate.messages import MobileAddressUpdate
from router.linkstate.mobile import MAU_CHUNK, Applied, RemoteAddresses
from tests.support.linkstate_sim import SimNetwork

BIG = 20_000


def absolute(seq: int, exist, node: str = "B", hint: int = 3) -> MobileAddressUpdate:
    exist = tuple(exist)
    return MobileAddressUpdate(node, 1, seq, exist=exist, hints=(hint,) * len(exist))


def diff(seq: int, add=(), delete=(), node: str = "B", hint: int = 3) -> MobileAddressUpdate:
    add = tuple(add)
    return MobileAddressUpdate(node, 1, seq, add=add, delete=tuple(delete), hints=(hint,) * len(add))


def names(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}/{i}" for i in range(start, start + n)]


class Follower:
    """What the node's route table does with `take_changed`: copies the holders of each changed address."""

    def __init__(self, remote: RemoteAddresses) -> None:
        self.remote = remote
        self.table: dict[str, tuple[str, ...]] = {}
        assert remote.take_changed() is None     # from now on, changes are collected

    def follow(self) -> int:
        changed = self.remote.take_changed()
        for address in changed:
            holders = self.remote.holders(address)
            if holders:
                self.table[address] = holders
            else:
                self.table.pop(address, None)
        return len(changed)


def truth(remote: RemoteAddresses, nodes) -> dict[str, set[str]]:
    """The index the nodes' sets call for: address -> the nodes whose set has it."""
    want: dict[str, set[str]] = {}
    for node in nodes:
        for address in remote.addresses_of(node):
            want.setdefault(address, set()).add(node)
    return want


def assert_exact(remote: RemoteAddresses, nodes, follower: Follower | None = None) -> None:
    want = truth(remote, nodes)
    assert remote.pending() == 0
    assert {a: set(h) for a, h in remote.index().items()} == want
    for address in want:
        holders = remote.holders(address)
        assert len(holders) == len(set(holders)), f"{address} held twice: {holders}"
    if follower is not None:
        follower.follow()
        assert {a: set(h) for a, h in follower.table.items()} == want


def run_steps(remote: RemoteAddresses, follower: Follower | None = None, limit: int = MAU_CHUNK) -> int:
    """Step until nothing is pending; each step changes at most `limit` index entries. Returns the steps."""
    if follower is not None:
        follower.follow()                                       # what came before the steps
    steps = 0
    while remote.step(limit):
        steps += 1
        if follower is not None:
            assert follower.follow() <= limit
        assert steps < 10 * BIG
    if follower is not None:
        assert follower.follow() <= limit
    return steps + 1


def test_a_large_absolute_mau_replaces_the_set_at_once_and_the_index_follows_in_bounded_steps():
    remote = RemoteAddresses()
    follower = Follower(remote)
    assert remote.apply(absolute(7, names("a", BIG))) is Applied.APPLIED
    assert remote.seq_of("B") == 7 and remote.count_of("B") == BIG and not remote.behind("B")
    assert remote.pending() == BIG and len(remote) == 0         # nothing indexed in the MAU's own turn
    epoch = remote.epoch
    assert remote.step() is True
    assert len(remote) == MAU_CHUNK and remote.pending() == BIG - MAU_CHUNK and remote.epoch > epoch
    assert follower.follow() == MAU_CHUNK
    assert run_steps(remote, follower) == BIG // MAU_CHUNK - 1
    assert_exact(remote, ["B"], follower)
    assert remote.step() is False                               # nothing to do: no effect
    assert remote.hint("a/0") == 3


def test_a_small_absolute_mau_and_a_small_flush_are_applied_at_once():
    remote = RemoteAddresses()
    remote.apply(absolute(1, names("a", MAU_CHUNK)))
    assert remote.pending() == 0 and len(remote) == MAU_CHUNK
    # a resync changing few addresses of a large set is applied at once too: what counts is the change
    remote.apply(diff(2, names("b", BIG - MAU_CHUNK)))
    assert remote.apply(absolute(5, names("a", MAU_CHUNK - 10) + names("b", BIG - MAU_CHUNK)
                                 + names("c", 10))) is Applied.APPLIED
    assert_exact(remote, ["B"])
    remote.flush("B")                                           # 20,000 addresses: in steps
    assert remote.pending() == BIG and remote.count_of("B") == 0
    run_steps(remote)
    assert_exact(remote, ["B"])
    assert len(remote) == 0
    remote.apply(absolute(1, names("a", 3)))
    remote.flush("B")
    assert remote.pending() == 0 and len(remote) == 0


def test_a_diff_while_steps_are_pending_is_applied_on_the_new_set():
    remote = RemoteAddresses()
    follower = Follower(remote)
    old = names("old", 1000)
    remote.apply(absolute(1, old))
    run_steps(remote, follower)
    new = names("new", BIG) + old[:500]                         # keeps half the old ones
    remote.apply(absolute(5, new))
    for _ in range(10):
        remote.step()                                           # partly done
    follower.follow()
    assert 0 < remote.pending() < BIG
    # the next diff: adds an address of the old set that the steps would release, deletes new ones
    # (indexed already or not), deletes a kept old one, re-adds a kept one, adds a fresh one
    indexed = [a for a in names("new", BIG) if "B" in remote.holders(a)][:5]
    waiting = [a for a in names("new", BIG) if "B" not in remote.holders(a)][:5]
    assert indexed and waiting
    gone = [old[900]]                                           # in the old set only: pending release
    assert remote.apply(diff(6, add=[*gone, old[0], "fresh"], delete=[*indexed, *waiting, old[1]])) \
        is Applied.APPLIED
    for address in [*gone, old[0], "fresh"]:
        assert remote.holders(address) == ("B",)                # what the diff names is exact at once
    for address in [*indexed, *waiting, old[1]]:
        assert remote.holders(address) == ()
    assert follower.follow() <= 13
    run_steps(remote, follower)
    expected = (set(new) | {*gone, "fresh"}) - {*indexed, *waiting, old[1]}
    assert set(remote.addresses_of("B")) == expected
    assert_exact(remote, ["B"], follower)
    assert remote.apply(diff(8, add=["x"])) is Applied.GAP      # the sequence rules are unchanged
    assert remote.apply(diff(7, add=["x"])) is Applied.APPLIED


def test_a_newer_absolute_mau_while_steps_are_pending_wins_and_leaves_nothing_behind():
    remote = RemoteAddresses()
    follower = Follower(remote)
    first = names("first", BIG)
    remote.apply(absolute(3, first))
    for _ in range(15):
        remote.step()
    second = first[BIG // 2:] + names("second", BIG // 2)       # half of the first, half new
    remote.apply(absolute(4, second, hint=2))
    assert remote.count_of("B") == BIG
    assert remote.apply(absolute(3, first)) is Applied.STALE    # the late answer changes nothing
    for _ in range(7):
        remote.step()
    third = second[: BIG // 4] + names("third", 100)
    remote.apply(absolute(9, third, hint=1))
    run_steps(remote, follower)
    assert set(remote.addresses_of("B")) == set(third)
    assert_exact(remote, ["B"], follower)
    assert remote.hint(third[0]) == 1 and remote.hint(first[0]) is None


def test_a_flush_and_a_restart_while_steps_are_pending():
    remote = RemoteAddresses()
    follower = Follower(remote)
    remote.apply(absolute(2, names("a", BIG)))
    for _ in range(20):
        remote.step()
    remote.flush("B")                                           # the node restarted
    assert remote.count_of("B") == 0 and remote.seq_of("B") == 0
    for _ in range(5):
        remote.step()
    remote.apply(absolute(1, names("a", 3000, start=10_000) + names("b", 3000)))  # its new instance's set
    run_steps(remote, follower)
    assert_exact(remote, ["B"], follower)
    assert len(remote) == 6000


def test_steps_of_one_node_leave_other_holders_of_the_same_addresses_alone():
    remote = RemoteAddresses()
    follower = Follower(remote)
    shared = names("shared", 2000)
    remote.apply(absolute(1, shared + names("c", 1000), node="C", hint=2))
    run_steps(remote, follower)
    remote.apply(absolute(1, shared + names("b", BIG), node="B"))
    remote.step()
    assert all(remote.hint(a) in (2, 3) for a in shared)        # B's or C's hint, never an error
    remote.flush("C")
    run_steps(remote, follower)
    assert_exact(remote, ["B", "C"], follower)
    assert remote.holders(shared[0]) == ("B",) and remote.hint(shared[0]) == 3


def test_a_hint_is_read_from_a_holder_whose_set_has_the_address():
    remote = RemoteAddresses()
    remote.apply(absolute(1, names("a", 1000), node="A", hint=1))
    remote.apply(absolute(1, names("a", 1000), node="B", hint=3))
    run_steps(remote)
    remote.apply(absolute(2, names("z", 1000), node="A", hint=1))   # A drops them: pending release
    assert remote.holders("a/0") == ("A", "B")                  # A still in the index for now
    assert remote.hint("a/0") == 3                              # but its set no longer has it
    run_steps(remote)
    assert remote.holders("a/0") == ("B",)


@pytest.mark.parametrize("seed", range(6))
def test_random_sequences_of_updates_end_exact(seed):
    """Random absolute MAUs, diffs, flushes and steps of random sizes on three nodes sharing addresses;
    the sequence rules decide what is applied. At every point each index entry names a node at most once
    and only a node whose set has the address or has steps pending; once stepped out, the index and a
    follower of the changes are exactly the nodes' sets."""
    rng = random.Random(seed)
    pool = names("p", 3000)
    remote = RemoteAddresses()
    follower = Follower(remote)
    seqs = dict.fromkeys("BCD", 0)
    for _ in range(400):
        node = rng.choice("BCD")
        roll = rng.random()
        if roll < 0.15:
            seqs[node] += rng.choice((1, 2))
            remote.apply(absolute(seqs[node], rng.sample(pool, rng.randrange(0, 2500)), node=node,
                                  hint=rng.randrange(1, 4)))
        elif roll < 0.6:
            seqs[node] += 1 if rng.random() < 0.9 else 2        # now and then a gap: not applied
            have = list(remote.addresses_of(node))
            remote.apply(diff(seqs[node], add=rng.sample(pool, rng.randrange(0, 40)),
                              delete=rng.sample(have, min(len(have), rng.randrange(0, 40))), node=node))
        elif roll < 0.65:
            remote.flush(node)
            seqs[node] = 0
        else:
            remote.step(rng.choice((1, 7, 100, MAU_CHUNK)))
        if rng.random() < 0.3:
            follower.follow()
        sets = {n: remote.addresses_of(n) for n in "BCD"}
        for address, holders in remote._index.items():
            assert len(holders) == len(set(holders))
            for holder in holders:
                assert address in sets[holder] or address in remote._dirty.get(holder, ())
    run_steps(remote, follower, limit=rng.choice((50, MAU_CHUNK)))
    assert_exact(remote, "BCD", follower)


def test_a_restarted_engine_gets_a_large_absolute_mau_and_indexes_it_tick_by_tick():
    """Two engines: A has 5,000 addresses, B restarts and asks for them (MAR); the absolute MAU is taken in
    one message, B's known addresses follow at most MAU_CHUNK per tick, then they are all there."""
    net = SimNetwork()
    a, _ = net.add_node("A"), net.add_node("B")
    net.connect("A", "B")
    for address in names("m", 5000):
        a.add_local_address(address)
    net.run_until(lambda: len(net.engines["B"].known_addresses) == 5000, 10.0)
    b = net.restart("B", instance=2)
    seen: list[int] = []
    net.observers.append(lambda src, dst, m: seen.append(len(m["body"].get("exist") or ()))
                         if m["opcode"] == "MAU" and dst == "B" else None)
    net.run_until(lambda: b.remote_nodes() and b.remote_nodes()[0]["addresses"] == 5000, 10.0)
    assert seen == [5000]                                       # one absolute MAU carried them all
    assert b.address_updates_pending == 5000 - len(b.known_addresses)
    counts = [len(b.known_addresses)]
    while b.address_updates_pending:
        net.step()
        counts.append(len(b.known_addresses))
    assert max(y - x for x, y in zip(counts, counts[1:], strict=False)) <= MAU_CHUNK
    assert set(b.known_addresses) == set(names("m", 5000))
    assert b.apply_address_updates() is False
