"""router.node.memory: the heap is trimmed once enough connections were freed, not on every timer."""

from router.node.memory import Trimmer


def test_trims_only_after_the_threshold():
    t = Trimmer(threshold=3)
    calls = []
    t._trim = calls.append
    assert not t.maybe_trim()
    for _ in range(3):
        t.freed_connection()
    assert t.maybe_trim() and calls == [0] and t.trims == 1
    assert not t.maybe_trim()                     # counted again from zero


def test_without_malloc_trim_it_does_nothing():
    t = Trimmer(threshold=1)
    t._trim = None
    t.freed_connection()
    assert not t.maybe_trim()


def test_the_tail_of_a_wave_is_trimmed_once_it_ends():
    t = Trimmer(threshold=3)
    calls = []
    t._trim = calls.append
    for _ in range(4):
        t.freed_connection()
    assert t.maybe_trim()                         # the wave: 4 freed
    t.freed_connection()
    t.freed_connection()
    assert not t.maybe_trim()                     # 2 more, still coming
    assert t.maybe_trim() and len(calls) == 2     # none for a tick: the tail is trimmed
    t.freed_connection()
    assert not t.maybe_trim() and not t.maybe_trim()   # a lone connection later: no wave, no trim
