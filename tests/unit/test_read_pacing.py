"""The read pacing decision (router.forwarding.readpacing): a client's reads shrink to what costs about
`node.heavy_read` of CPU, and grow back (doubling) while they are cheap and full."""

from __future__ import annotations

from router.forwarding.readpacing import MIN_READ, START_READ, next_read_size

CEILING = 256 * 1024
TARGET = 0.001


def test_an_expensive_read_shrinks_to_the_target_cost():
    # 16 KiB of ATTACHes took 6 ms: the next read is the ~1 ms worth of them
    assert next_read_size(START_READ, START_READ, 0.006, TARGET, CEILING) == START_READ // 6


def test_never_below_the_minimum_nor_above_the_ceiling():
    assert next_read_size(START_READ, START_READ, 10.0, TARGET, CEILING) == MIN_READ
    assert next_read_size(CEILING, CEILING, 0.0, TARGET, CEILING) == CEILING


def test_cheap_full_reads_double_up_to_the_ceiling():
    size, steps = START_READ, 0
    while size < CEILING:
        size = next_read_size(size, size, TARGET / 10, TARGET, CEILING)
        steps += 1
    assert size == CEILING and steps == 4            # 16 -> 32 -> 64 -> 128 -> 256 KiB


def test_a_read_that_did_not_fill_its_size_keeps_it():
    assert next_read_size(START_READ, 300, 0.0001, TARGET, CEILING) == START_READ
    assert next_read_size(START_READ, 0, 0.5, TARGET, CEILING) == START_READ      # nothing read


def test_an_attach_storm_settles_near_the_target():
    """40 µs per ATTACH of ~120 bytes: the size converges to about 25 ATTACHes a read and stays there."""
    cost_per_byte = 40e-6 / 120
    size = START_READ
    for _ in range(10):
        size = next_read_size(size, size, size * cost_per_byte, TARGET, CEILING)
    assert 2500 <= size <= 6000, size
    assert size * cost_per_byte <= 2 * TARGET
