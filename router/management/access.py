"""What a management request may see: the entities as its access level allows (router.policy.levels).

The level of a request is the level its ingress node granted the requesting connection; the agent knows it
by the receiver the request arrived on (router.policy.reserved: `$management` for ``redacted``,
`$management/read`, `$management/write`), which no client can forge: clients never receive from those
addresses nor send to any but `$management`, which their ingress node routes by their level.

`EntityView` is the source `router.management.requests.answer` reads: the node's entities at ``read`` and
above, and below that the same rows without what reveals files, user names, peer addresses or other
connections' reply addresses:

* ``connection``: `host`, `user`, `container` (container ids often name a host) are null;
* ``link``: `linkName` is null, and `owningAddr` when it is a reply address other than the requester's;
* ``address``: reply addresses other than the requester's are left out;
* ``listener``: the file paths in `settings` (certificates, keys, CAs, users files, sasldb) are null;
* ``broker``: `url` is null (it names a host and a user);
* ``node``: `lastReload` is null (its lines name files, hosts and ports);
* ``connector``: the file paths in `settings` are null;
* ``policy-group``: `settings` is null (it names users and hosts).

`level` is there for the operations that change the node (router.management.writes): they need ``write``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.policy.levels import READ
from router.policy.reserved import REPLY, classify

FILE_SETTINGS = {"tls": ("cert", "key", "key_password_file", "ca"), "sasl": ("users_file", "sasldb")}


class EntityView:
    """The entities of a node as one request may read them."""

    def __init__(self, entities: Any, level: int, reply_to: str | None = None) -> None:
        self.entities = entities
        self.level = level
        own = (reply_to or "").removeprefix("amqp:").lstrip("/")
        self.own = own if classify(own) == REPLY else None

    def rows(self, entity_type: str) -> list[dict[str, Any]]:
        return self.page(entity_type, 0, None)

    def page(self, entity_type: str, offset: int, count: int | None) -> list[dict[str, Any]]:
        """Rows `offset` to `offset + count` (None: to the end) as this level sees them (below ``read``, the
        address rows left out do not count: the whole table is redacted, then cut)."""
        page = getattr(self.entities, "page", None)
        if self.level >= READ and page is not None:
            return page(entity_type, offset, count)
        rows = self.entities.rows(entity_type)
        redact = getattr(self, "_" + entity_type.replace("-", "_"), None)
        rows = rows if redact is None or self.level >= READ else redact(rows)
        return rows[offset:None if count is None else offset + count]

    def _others_reply(self, address: object) -> bool:
        return isinstance(address, str) and classify(address) == REPLY and address != self.own

    def _connection(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "host": None, "user": None, "container": None} for r in rows]

    def _link(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "linkName": None, "owningAddr": None if self._others_reply(r.get("owningAddr"))
                 else r.get("owningAddr")} for r in rows]

    def _address(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if not self._others_reply(r.get("identity"))]

    def _listener(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "settings": _without_files(r.get("settings"))} for r in rows]

    def _node(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "lastReload": None} for r in rows]

    def _connector(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "settings": _without_files(r.get("settings"))} for r in rows]

    def _policy_group(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "settings": None} for r in rows]

    def _broker(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "url": None} for r in rows]


def _without_files(settings: object) -> object:
    if not isinstance(settings, Mapping):
        return settings
    out = dict(settings)
    for section, keys in FILE_SETTINGS.items():
        sub = out.get(section)
        if isinstance(sub, Mapping):
            out[section] = {k: (None if k in keys else v) for k, v in sub.items()}
    return out
