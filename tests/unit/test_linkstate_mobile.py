"""Mobile-address sync: local diffs, remote sequence rules, index."""

from __future__ import annotations

from router.linkstate.messages import MobileAddressUpdate
from router.linkstate.mobile import (
    HINT_BALANCED,
    HINT_CLOSEST,
    Applied,
    LocalAddresses,
    RemoteAddresses,
    distribution_for,
    hint_for,
)


def diff(seq: int, add=(), delete=(), hints=None, node: str = "B") -> MobileAddressUpdate:
    return MobileAddressUpdate(node, 1, seq, add=tuple(add), delete=tuple(delete), hints=hints)


def absolute(seq: int, exist=(), node: str = "B") -> MobileAddressUpdate:
    return MobileAddressUpdate(node, 1, seq, exist=tuple(exist))


def test_local_changes_become_one_diff_per_tick():
    local = LocalAddresses()
    assert local.take_diff() is None
    local.add("M0a", HINT_CLOSEST)
    local.add("M0b", HINT_BALANCED)
    local.remove("M0b")  # added and removed before publishing: nothing to say about it
    assert local.take_diff() == (1, {"M0a": HINT_CLOSEST}, [])
    local.remove("M0a")
    local.add("M0a", HINT_CLOSEST)  # removal cancelled
    assert local.take_diff() is None and local.seq == 1
    local.remove("M0a")
    local.add("M0c", HINT_BALANCED)
    assert local.addresses == {"M0c": HINT_BALANCED}
    assert local.published() == {"M0a": HINT_CLOSEST}  # as of seq 1
    assert local.take_diff() == (2, {"M0c": HINT_BALANCED}, ["M0a"])
    assert local.published() == {"M0c": HINT_BALANCED}


def test_diffs_apply_in_strict_sequence():
    remote = RemoteAddresses()
    assert remote.apply(diff(1, ["M0a", "M0b"], hints=(2, 3))) is Applied.APPLIED
    assert remote.apply(diff(1, ["M0a", "M0b"])) is Applied.DUPLICATE
    assert remote.apply(diff(3, ["M0z"])) is Applied.GAP
    assert remote.behind("B")
    assert remote.index() == {"M0a": frozenset({"B"}), "M0b": frozenset({"B"})}
    assert remote.apply(diff(2, delete=["M0a"])) is Applied.APPLIED
    assert remote.index() == {"M0b": frozenset({"B"})} and remote.hint("M0b") == 3
    assert remote.behind("B")  # 3 was heard of: still behind


def test_a_pending_mar_never_admits_a_too_new_diff():
    remote = RemoteAddresses()
    remote.apply(diff(1, ["M0a"]))
    assert remote.apply(diff(3, ["M0c"])) is Applied.GAP  # 2 was lost
    remote.requested("B", now=10.0)
    assert remote.request_outstanding("B", 10.5, retry=1.0)
    assert remote.apply(diff(4, ["M0d"])) is Applied.GAP  # still not admitted while the MAR is pending
    assert remote.index() == {"M0a": frozenset({"B"})}
    assert remote.apply(absolute(4, ["M0a", "M0b", "M0c", "M0d"])) is Applied.APPLIED
    assert set(remote.index()) == {"M0a", "M0b", "M0c", "M0d"}
    assert not remote.behind("B") and not remote.request_outstanding("B", 10.6, retry=1.0)
    assert remote.apply(diff(5, delete=["M0a"])) is Applied.APPLIED  # back in sequence


def test_absolute_updates_replace_unless_same_or_older():
    remote = RemoteAddresses()
    remote.apply(absolute(5, ["M0a"]))
    assert remote.apply(absolute(5, ["M0x"])) is Applied.DUPLICATE
    assert remote.apply(absolute(4, ["M0y"])) is Applied.STALE  # a late answer must not roll back
    assert remote.index() == {"M0a": frozenset({"B"})}
    assert remote.apply(absolute(9, ["M0b"])) is Applied.APPLIED
    assert remote.index() == {"M0b": frozenset({"B"})} and remote.seq_of("B") == 9


def test_index_spans_nodes_and_flush_forgets_one():
    remote = RemoteAddresses()
    remote.apply(diff(1, ["M0a"], node="B"))
    remote.apply(diff(1, ["M0a", "M0c"], node="C"))
    epoch = remote.epoch
    assert remote.index()["M0a"] == frozenset({"B", "C"})
    remote.flush("C")
    assert remote.index() == {"M0a": frozenset({"B"})} and remote.seq_of("C") == 0
    assert remote.epoch > epoch and not remote.heard_of("C")
    remote.advertised("C", 0)
    assert remote.heard_of("C") and not remote.behind("C")
    remote.advertised("C", 2)
    assert remote.behind("C")


def test_hint_names():
    assert distribution_for(hint_for("closest")) == "closest"
    assert distribution_for(hint_for("multicast")) == "multicast"
    assert distribution_for(99) is None


def test_changed_addresses_are_collected_once_followed():
    """A diff changes the node's set and the index in place; the addresses whose holders changed are
    collected between two `take_changed` calls (the first call: None, meaning all of them)."""
    remote = RemoteAddresses()
    remote.apply(diff(1, ["M0a", "M0b"], node="B"))
    assert remote.take_changed() is None
    remote.apply(diff(2, ["M0c"], ["M0a"], node="B"))
    remote.apply(diff(1, ["M0b"], node="C"))
    remote.apply(diff(3, [], ["M0zz"], node="B"))            # deleting what it never had: nothing
    assert remote.take_changed() == {"M0a", "M0b", "M0c"}
    assert remote.take_changed() == set()
    assert remote.holders("M0b") == ("B", "C") and remote.holders("M0a") == ()
    assert len(remote) == 2 and remote.count_of("B") == 2
    remote.apply(absolute(5, ["M0c", "M0d"], node="B"))     # a resync: the difference only
    assert remote.take_changed() == {"M0b", "M0d"}
    assert remote.index() == {"M0b": frozenset({"C"}), "M0c": frozenset({"B"}), "M0d": frozenset({"B"})}


def test_a_large_burst_is_published_in_chunks_of_consecutive_seqs():
    """Over `limit` changes: several diffs, deletions first, that together say what one diff would."""
    local = LocalAddresses()
    for i in range(5):
        local.add(f"old{i}", HINT_CLOSEST)
    local.take_diff()
    for i in range(5):
        local.remove(f"old{i}")
    for i in range(8):
        local.add(f"new{i}", HINT_BALANCED)
    remote = RemoteAddresses()
    remote.apply(absolute(1, [f"old{i}" for i in range(5)]))
    chunks = []
    while (d := local.take_diff(limit=4)) is not None:
        chunks.append(d)
    assert [seq for seq, _, _ in chunks] == [2, 3, 4, 5]
    assert all(len(added) + len(deleted) <= 4 for _, added, deleted in chunks)
    assert sorted(a for _, _, deleted in chunks for a in deleted) == [f"old{i}" for i in range(5)]
    assert chunks[0][2] and not chunks[0][1]                  # deletions go first
    for seq, added, deleted in chunks:                         # a peer applies them in turn, no gap
        assert remote.apply(diff(seq, list(added), deleted, hints=tuple(added.values()))) is Applied.APPLIED
    assert remote.addresses_of("B") == {f"new{i}": HINT_BALANCED for i in range(8)}
    assert local.published() == local.addresses == {f"new{i}": HINT_BALANCED for i in range(8)}
