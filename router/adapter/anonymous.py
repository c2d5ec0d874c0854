"""The anonymous relay: the routing key of a transfer's `to`, checked against the sender's policy.

A mixin of router.adapter.deliveries.Deliveries (it uses that class's read buffer, core and rejections).
"""

from __future__ import annotations

from cproton_ffi import ffi

from router.adapter.hotpath import find_to
from router.adapter.outcomes import NO_PROPERTIES, UNAUTHORIZED, Rejection
from router.addressing import address_key
from router.amqp.codec import MalformedError, scan_message
from router.forwarding.records import Producer

ANON_SCAN_LIMIT = 64 * 1024          # sections before the body of an anonymous message must fit in this
TO_KEYS_KEPT = 4096                  # anonymous-relay `to` addresses whose key is kept (then all forgotten)
# `forget_unused_to_keys` (every node.forget_after seconds) keeps only the keys used since the last call:
# replies go to callers' own addresses, and a caller that left leaves its address here otherwise


class AnonymousRelay:
    """The anonymous relay: the routing key of a transfer's `to`, checked against the sender's policy."""

    def _anonymous_key(self, d: object, buf: object, n: int, presettled: bool, p: Producer) -> str | None:
        """The routing key of an anonymous-relay transfer's `to`; settled here if it has none. The usual
        encodings are found by `find_to` and their key kept by the address's bytes (replies to one caller
        repeat them); anything else is read by `scan_message`, which says what is wrong."""
        span = find_to(buf, n if n <= ANON_SCAN_LIMIT else ANON_SCAN_LIMIT)
        key = None
        if span >= 0:
            at = span >> 32
            raw = self.view[at:at + (span & 0xFFFFFFFF)].tobytes()
            key = self._keys_of_to.get(raw)
            if key is None:
                key = self._key_of_to(raw)
        if key is None:
            try:
                head = ffi.buffer(buf, min(n, ANON_SCAN_LIMIT))[:]
                to = scan_message(head, complete=n <= ANON_SCAN_LIMIT).to
            except MalformedError:
                self._reject(d, p, presettled, NO_PROPERTIES)
                return None
            if not to:
                self._reject(d, p, presettled, Rejection(b"amqp:precondition-failed",
                                                         b"anonymous relay: the message has no 'to' address"))
                return None
            key = address_key(to, self.node_id)
        access = p.conn.access
        if access is not None and (access.check_relay or "$" in key):
            key, problem = self.core.policy.relay(access, key)   # targets; $management by level
            if problem is not None:
                self._reject(d, p, presettled, Rejection(UNAUTHORIZED, problem.encode()))
                return None
        return key

    def forget_unused_to_keys(self) -> None:
        """Drop the `to` keys not used since the last call."""
        self._unused_keys_of_to = self._keys_of_to
        self._keys_of_to = {}

    def _key_of_to(self, raw: bytes) -> str | None:
        """The routing key of the `to` address `raw` (kept for the next message to it); None if it is not
        UTF-8 (`scan_message` then rejects the message)."""
        try:
            to = raw.decode()
        except UnicodeDecodeError:
            return None
        keys = self._keys_of_to
        if len(keys) >= TO_KEYS_KEPT:
            keys.clear()
        key = self._unused_keys_of_to.pop(raw, None) or address_key(to, self.node_id)
        keys[raw] = key
        return key
