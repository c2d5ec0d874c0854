"""HELLO protocol: bidirectional check, max age, links."""

from __future__ import annotations

import pytest

from router.linkstate.config import LinkStateConfig
from router.linkstate.messages import Hello
from router.linkstate.neighbors import NeighborChange, NeighborTable


@pytest.fixture
def table() -> NeighborTable:
    t = NeighborTable("A", 1, LinkStateConfig())
    t.link_up("L1", 3)
    return t


def test_one_way_hello_is_heard_but_not_a_neighbour(table):
    newly, changes = table.receive(Hello("B", 1, ()), 0.0, "L1")
    assert newly and changes == []
    assert table.hello().seen == ("B",)
    assert not table.is_neighbor("B")
    newly, _ = table.receive(Hello("B", 1, ()), 0.5, "L1")
    assert not newly  # already heard


def test_hello_listing_us_makes_a_neighbour_on_that_link(table):
    _, changes = table.receive(Hello("B", 1, ("A",)), 0.0, "L1")
    assert changes == [NeighborChange("B", 3, new=True)]
    assert table.link_of("B") == "L1" and table.bound_links() == {"B": "L1"}
    _, changes = table.receive(Hello("B", 1, ("A",)), 1.0, "L1")
    assert changes == []  # a refresh


def test_neighbour_expires_without_confirming_hello(table):
    table.receive(Hello("B", 1, ("A",)), 0.0, "L1")
    table.receive(Hello("B", 1, ()), 2.0, "L1")  # B stopped listing us: no refresh of the neighbour
    assert table.expire(3.0) == []
    assert table.expire(3.01) == [NeighborChange("B", None)]
    assert not table.is_neighbor("B")
    assert table.hello().seen == ("B",)  # still heard (at 2.0)
    table.expire(5.01)
    assert table.hello().seen == ()


def test_link_down_acts_at_once_and_forgets_the_peer(table):
    table.receive(Hello("B", 1, ("A",)), 0.0, "L1")
    assert table.link_down("L1") == [NeighborChange("B", None)]
    assert table.links == {} and table.hello().seen == () and table.peer_on("L1") is None
    assert table.link_down("L1") == []  # unknown link: nothing


def test_second_link_to_the_same_peer_takes_over_when_the_first_goes(table):
    table.link_up("L2", 5)
    table.receive(Hello("B", 1, ("A",)), 0.0, "L1")
    _, changes = table.receive(Hello("B", 1, ("A",)), 0.1, "L2")
    assert changes == [] and table.link_of("B") == "L1"  # tolerated, the first stays bound
    assert table.link_down("L1") == [NeighborChange("B", 5)]  # moved, with the cost of L2
    assert table.link_of("B") == "L2"
    assert table.link_down("L2") == [NeighborChange("B", None)]


def test_hello_timing_and_cost_validation(table):
    assert table.hello_due(0.0)
    table.hello_sent(0.0)
    assert not table.hello_due(0.99) and table.hello_due(1.0)
    with pytest.raises(ValueError):
        table.link_up("L9", 0)


def test_any_input_from_a_neighbour_keeps_it_alive(table):
    """A neighbour whose HELLOs are late (busy) but whose link carries other frames is not lost."""
    table.receive(Hello("B", 1, ("A",)), 0.0, "L1")
    for now in (1.0, 2.0, 3.0, 4.0, 5.0):
        table.heard("L1", now)
    assert table.expire(5.5) == [] and table.is_neighbor("B")
    assert table.expire(8.01) == [NeighborChange("B", None)]     # then silence: lost after max age


def test_input_does_not_keep_a_neighbour_that_stopped_listing_us(table):
    table.receive(Hello("B", 1, ("A",)), 0.0, "L1")
    table.receive(Hello("B", 1, ()), 1.0, "L1")                   # B no longer hears us
    table.heard("L1", 2.0)
    assert table.expire(3.01) == [NeighborChange("B", None)]
    table.heard("L2", 4.0)                                         # an unknown link: nothing
