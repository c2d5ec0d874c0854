"""The read budget's decisions (router.forwarding.readturns): which client reads wait for the next pass."""

from router.forwarding.readturns import ReadTurns

MS = 0.001


class Conn:
    def __init__(self, name):
        self.name = name
        self.heavy = False
        self.read_cpu = 0.0


def turns(budget=2 * MS):
    passes = []
    t = ReadTurns(1 * MS, budget, lambda: passes.append(1))
    return t, passes


def read(t, conn, ms):
    assert not t.defer(conn)
    return t.read(conn, ms * MS)


def test_cheap_reads_alone_never_start_pacing_nor_wait():
    t, passes = turns()
    rpc = Conn("rpc")
    for _ in range(100):
        assert not read(t, rpc, 0.1)
    assert not t.pacing and not passes and t.spent == 0


def test_once_the_budget_is_spent_heavy_and_not_cheap_connections_wait_cheap_ones_do_not():
    t, passes = turns()
    storm = [Conn(f"s{i}") for i in range(5)]
    for c in storm:                         # a first round: costs unknown until read
        read(t, c, 1.1)
    assert passes == [1] and t.spent > t.budget
    rpc, busy = Conn("rpc"), Conn("busy")
    rpc.read_cpu, busy.read_cpu = 0.05 * MS, 0.6 * MS
    assert not t.defer(rpc)                 # cheap: read at once
    assert t.defer(busy)                    # not cheap, while pacing over the budget
    assert all(t.defer(c) for c in storm)   # heavy
    assert list(t.deferred) == [busy, *storm] and passes == [1]


def test_light_reads_count_while_pacing():
    t, _ = turns(budget=3 * MS)
    read(t, Conn("a"), 1.5)                 # heavy: pacing from now on
    for i in range(3):
        read(t, Conn(f"light{i}"), 0.9)     # just under heavy_read: not heavy, but counted
    assert abs(t.spent - 4.2 * MS) < 1e-9
    c = Conn("x")
    c.read_cpu = 0.9 * MS
    assert t.defer(c)


def test_a_connection_stays_heavy_until_a_read_costs_under_half_the_threshold():
    t, _ = turns()
    c = Conn("c")
    read(t, c, 1.05)
    for ms in (0.98, 0.7, 0.51):            # reads cut to about heavy_read: still heavy
        t.start_pass()
        t.read(c, ms * MS)
        assert c.heavy
    t.read(c, 0.3 * MS)
    assert not c.heavy


def test_a_pass_reads_in_order_while_the_budget_lasts_and_asks_for_another_for_the_rest():
    t, passes = turns()
    read(t, Conn("first"), 2.5)
    waiting = [Conn(f"w{i}") for i in range(4)]
    for c in waiting:
        c.heavy = True
        assert t.defer(c)
    t.start_pass()
    done = []
    while (c := t.next_deferred()) is not None:
        done.append(c)
        t.read(c, 1.2 * MS)
    assert done == waiting[:2]
    t.end_pass()
    assert len(passes) == 2 and t.pacing
    t.start_pass()
    while (c := t.next_deferred()) is not None:
        t.read(c, 0.1 * MS)
    t.end_pass()
    assert not t.deferred and not t.pacing and len(passes) == 2


def test_measuring_is_skipped_only_for_cheap_pumps_outside_pacing():
    t, _ = turns()
    assert not t.measure(0.1 * MS)
    assert t.measure(0.3 * MS)
    read(t, Conn("h"), 1.5)
    assert t.measure(0.01 * MS)


def test_once_the_budget_is_spent_reads_not_deferred_take_a_probe_size():
    from router.forwarding.readturns import PROBE_READ

    t, _ = turns()
    assert t.read_limit() is None
    read(t, Conn("storm"), 1.5)
    assert t.read_limit() is None           # pacing, but budget left
    read(t, Conn("storm2"), 1.5)
    assert t.read_limit() == PROBE_READ     # a first read of unknown cost takes little
    t.start_pass()
    assert t.read_limit() is None
