"""Defaults from the oslo.messaging "router-based message bus" spec (seed ``004_``), section
"Configuration Impact", and the credit-management section.

- The shared reply subscription gets a large credit (200) so a server never blocks sending a reply.
- Server and notification subscriptions get 100 and are topped up when half of it is used.
- Calls, casts and notifications time out after 30 s by default; a server's reply after 10 s.
"""

from __future__ import annotations

REPLY_CREDIT = 200
"""Credit of the one dynamic reply receiver per client connection."""

SERVER_CREDIT = 100
"""Credit of each server (and notification listener) subscription."""

CALL_TIMEOUT = 30.0
"""Seconds a call, cast or fanout may take by default (credit, outcome and reply included)."""

REPLY_TIMEOUT = 10.0
"""Seconds a server tries to deliver one reply before logging it as lost."""

NOTIFY_TIMEOUT = 30.0
"""Seconds a notification may wait for credit and its outcome by default."""

CONNECT_TIMEOUT = 10.0
"""Seconds to wait for the connection to open (and a client's reply address to be assigned)."""

RETRY_BACKOFF = (0.01, 0.5)
"""First and longest delay (seconds) before re-sending a RELEASED message; doubles on each attempt."""

WORKERS = 8
"""Default size of a server's handler thread pool."""
