"""router.security.guessing.CheckQueue: round robin over hosts, growing bounded delays, bounded memory."""

from __future__ import annotations

from router.security.guessing import CheckQueue


def test_round_robin_serves_a_quiet_host_next():
    q = CheckQueue(max_queued=10)
    for i in range(5):
        assert q.add("attacker", f"a{i}", 0.0)
    assert q.add("user", "u0", 0.0)
    order = [q.next_ready(0.0)[0] for _ in range(3)]
    assert order == ["a0", "u0", "a1"]


def test_delay_grows_after_free_failures_and_is_bounded():
    q = CheckQueue(free_failures=3, base_delay=0.25, max_delay=8.0)
    delays = []
    for _ in range(12):
        q.result("h", False, 0.0)
        delays.append(q.delay("h"))
    assert delays[:2] == [0.0, 0.0]
    assert delays[2:7] == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert max(delays) == 8.0
    q.add("h", "x", 0.0)
    assert q.next_ready(1.0) == (None, 8.0)             # waits its delay
    assert q.next_ready(8.0) == ("x", None)
    q.result("h", True, 9.0)                             # a success resets it
    assert q.delay("h") == 0.0


def test_queue_per_host_is_bounded_and_hosts_are_bounded():
    q = CheckQueue(max_queued=4, max_hosts=100)
    assert [q.add("h", i, 0.0) for i in range(6)] == [True] * 4 + [False] * 2
    for i in range(1000):
        q.result(f"10.0.{i // 256}.{i % 256}", False, 0.0)
    assert len(q.hosts) <= 100
    assert len(q) == 4                                   # the host with waiting attempts is kept


def test_a_quiet_host_is_forgotten():
    q = CheckQueue(forget_after=600.0)
    for _ in range(10):
        q.result("h", False, 0.0)
    q.add("h", "x", 700.0)
    assert q.next_ready(700.0) == ("x", None)            # its failures were forgotten
