"""Link-state database: own LS, newer-only updates, instances, ageing and forgetting nodes."""

from __future__ import annotations

from router.linkstate.config import LinkStateConfig
from router.linkstate.lsdb import LinkStateDb, Verdict
from router.linkstate.messages import LinkState


def db() -> LinkStateDb:
    return LinkStateDb("A", LinkStateConfig())


def test_own_link_state_changes_are_committed_with_a_new_seq():
    d = db()
    assert d.take_changes() == {"A"}
    d.set_own_peer("B", 2)
    d.set_own_peer("B", 2)
    assert d.own_dirty and d.ls_seq == 0
    assert d.commit_own() and d.ls_seq == 1 and d.own_ls() == LinkState("A", 1, {"B": 2})
    assert not d.commit_own()
    d.del_own_peer("B")
    assert d.commit_own() and d.ls_seq == 2 and d.own_peers == {}
    assert d.take_changes() == {"A"}


def test_only_newer_link_states_are_accepted_and_new_peers_learned():
    d = db()
    d.learn("B", 0.0)
    assert d.update_ls(LinkState("B", 2, {"A": 1, "C": 3}), 1.0) == ["C"]
    assert d.update_ls(LinkState("B", 2, {"A": 1}), 2.0) is None
    assert d.update_ls(LinkState("B", 1, {"A": 1}), 2.0) is None
    assert d.peers_of("B") == {"A": 1, "C": 3} and d.is_named("C")
    assert d.get("C").peers is None
    assert d.take_changes() == {"A", "B"}


def test_instances_tell_restarts_stale_messages_and_duplicates():
    d = db()
    node, created = d.learn("B", 0.0)
    assert created and d.observe_instance(node, 10, 0.0) is Verdict.NEW
    assert d.observe_instance(node, 10, 1.0) is Verdict.SAME
    d.update_ls(LinkState("B", 5, {"A": 1}), 1.0)
    assert d.observe_instance(node, 11, 2.0) is Verdict.RESTART
    d.restart(node)
    assert node.peers is None and node.ls_seq == 0
    assert d.observe_instance(node, 10, 2.5) is Verdict.STALE  # an old message still in flight
    assert d.observe_instance(node, 10, 2.0 + LinkStateConfig().node_grace + 0.1) is Verdict.DUPLICATE


def test_link_state_ages_out_and_unnamed_nodes_are_forgotten():
    cfg = LinkStateConfig()
    d = db()
    d.learn("B", 0.0)
    d.update_ls(LinkState("B", 1, {"C": 1}), 0.0)  # B names C; nobody names B
    aged, deleted = d.expire(cfg.ls_max_age, lambda n: False)
    assert aged == [] and deleted == []
    aged, deleted = d.expire(cfg.ls_max_age + 0.1, lambda n: False)
    assert aged == ["B"] and d.peers_of("B") is None and not d.is_named("C")
    # B and C are now without link state and unnamed: gone after the grace period
    aged, deleted = d.expire(cfg.ls_max_age + 0.1 + cfg.node_grace + 0.1, lambda n: False)
    assert sorted(deleted) == ["B", "C"] and d.nodes == {}


def test_refresh_keeps_a_link_state_and_neighbours_are_kept():
    cfg = LinkStateConfig()
    d = db()
    d.learn("B", 0.0)
    d.update_ls(LinkState("B", 1, {"A": 1}), 0.0)
    d.refresh(d.get("B"), 50.0)  # an RA
    assert d.expire(cfg.ls_max_age + 1, lambda n: False) == ([], [])
    d.learn("N", 0.0)
    assert d.expire(100.0, lambda n: n == "N")[1] == []  # a neighbour without link state stays
