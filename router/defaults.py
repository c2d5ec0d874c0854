"""Defaults that more than one layer uses, each defined once.

A leaf module: it imports nothing. router.config (the YAML keys, at the bottom of the layers), the
sans-IO cores (router.forwarding, router.linkstate) and the Proton adapter read these values here.

Why a module of its own rather than "the lowest layer that needs the value": for the link capacity and
the timers that layer is a sans-IO core (router.forwarding, router.linkstate), which router.config would
then have to import just to learn a number, turning config from the bottom layer into one above the
cores; for the max frame size it is the adapter, which sits above router.config. Here every arrow points
down to a module with no arrows out. A default that one module alone uses stays with that module's
declaration (the config keys' defaults in router.config, ``node_grace`` in router.linkstate).
"""

from __future__ import annotations

LINK_CAPACITY = 250
"""Credit window per producer link and the most unsettled deliveries it may have in flight
(``node.link_capacity``; the forwarding core's ``RouterCore(capacity=...)``)."""

MAX_FRAME_SIZE = 16384
"""The max-frame-size of our Open, as qdrouterd's (``listeners[].max_frame_size``; the adapter's
``MAX_FRAME`` for connections without a listener's policy)."""

STREAM_WINDOW = 256 * 1024
"""Bytes of a streamed message a peer may have in flight to a node while the peer's data link is quiet
(``node.stream_window``; router.adapter.streamlinks)."""

STREAM_WINDOW_SHARED = 32 * 1024
"""The same while messages cross on the peer's data link too (``node.stream_window_shared``)."""

STREAM_WINDOW_MIN = 2 * MAX_FRAME_SIZE
"""The smallest of either (two frames; a connection with larger frames gets two of its own)."""

MEMORY_LIMIT_MIN = 16 * 1024 * 1024
"""The smallest node-wide memory budget (``node.memory_limit``; router.forwarding.budget)."""

# Control-plane timers in seconds, qdrouterd's defaults: the ``router:`` keys of router.config and the
# fields of router.linkstate.LinkStateConfig of the same names.
HELLO_INTERVAL = 1.0
HELLO_MAX_AGE = 3.0
RA_INTERVAL = 30.0
RA_INTERVAL_FLUX = 4.0
LS_MAX_AGE = 60.0
