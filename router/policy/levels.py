"""Management access levels, lowest first.

* ``none``: requests to a management agent are refused at the ingress node (attach detached, an
  anonymous-relay message REJECTED, both `amqp:unauthorized-access`);
* ``redacted``: QUERY / READ / GET-TYPES, with the attributes that reveal files, user names, peer
  addresses and other connections' reply addresses left null (or their rows left out);
* ``read``: every attribute;
* ``write``: ``read`` plus the operations that change the node (router.management.writes; the agent
  knows the level of every request it answers).

Without a group setting, the level is ``read`` for authenticated users (PLAIN, EXTERNAL) and for
connections from the loopback interface, ``redacted`` for everyone else.
"""

from __future__ import annotations

NONE, REDACTED, READ, WRITE = 0, 1, 2, 3
LEVELS = {"none": NONE, "redacted": REDACTED, "read": READ, "write": WRITE}
NAMES = {level: name for name, level in LEVELS.items()}


def default_level(authenticated: bool, loopback: bool) -> int:
    """The level of a connection whose group does not set `management`."""
    return READ if authenticated or loopback else REDACTED
