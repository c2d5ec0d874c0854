"""`stream_window` (router/adapter/streamlinks.py): the window of a peer's stream follows its data link."""

from __future__ import annotations

from router.adapter.routerlinks import RouterPeer
from router.adapter.streamlinks import SHARED_FOR, stream_window

FULL, SHARED = 256 * 1024, 32 * 1024


def test_the_full_window_while_the_data_link_delivers_nothing():
    peer = RouterPeer("B", 1)
    assert stream_window(peer, 0, 100.0, FULL, SHARED) == FULL
    assert stream_window(peer, 0, 200.0, FULL, SHARED) == FULL


def test_the_shared_window_from_a_delivery_until_shared_for_seconds_after_the_last():
    peer = RouterPeer("B", 1)
    assert stream_window(peer, 1, 100.0, FULL, SHARED) == SHARED          # a message crossed
    assert stream_window(peer, 1, 100.0 + SHARED_FOR / 2, FULL, SHARED) == SHARED
    assert stream_window(peer, 5, 100.0 + SHARED_FOR * 0.9, FULL, SHARED) == SHARED    # more: it restarts
    assert stream_window(peer, 5, 100.0 + SHARED_FOR * 1.8, FULL, SHARED) == SHARED
    assert stream_window(peer, 5, 100.0 + SHARED_FOR * 2, FULL, SHARED) == FULL        # quiet again
