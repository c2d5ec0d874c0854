"""Outcomes given to a producer's delivery: a consumer's copied back with its details, or the node's own.

`pn_delivery_update` copies only the outcome type; a rejection's error condition and a modified
outcome's flags and annotations are copied here explicitly, since clients rely on them. Every outcome
object has `outcome` (the code) and `apply(delivery)`, so an outcome decided early (a streamed message
answered before its last frame, a multicast group's best copy) can be applied later.
"""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import (
    pn_condition_get_description,
    pn_condition_get_name,
    pn_condition_info,
    pn_condition_is_set,
    pn_condition_set_description,
    pn_condition_set_name,
    pn_data,
    pn_data_copy,
    pn_data_free,
    pn_delivery_local,
    pn_delivery_remote,
    pn_delivery_update,
    pn_disposition_annotations,
    pn_disposition_condition,
    pn_disposition_is_failed,
    pn_disposition_is_undeliverable,
    pn_disposition_set_failed,
    pn_disposition_set_undeliverable,
)

from router.forwarding.records import ACCEPTED, MODIFIED, REJECTED


def copy_outcome(src_dlv: object, dst_dlv: object, outcome: int) -> None:
    """Give `dst_dlv` (ours, towards the producer) the outcome the consumer gave `src_dlv`."""
    if outcome == REJECTED or outcome == MODIFIED:
        _copy_details(pn_delivery_remote(src_dlv), pn_delivery_local(dst_dlv), outcome)
    pn_delivery_update(dst_dlv, outcome)


def _copy_details(src: object, dst: object, outcome: int) -> None:
    if outcome == REJECTED:
        sc = pn_disposition_condition(src)
        if pn_condition_is_set(sc):
            dc = pn_disposition_condition(dst)
            pn_condition_set_name(dc, pn_condition_get_name(sc))
            desc = pn_condition_get_description(sc)
            if desc != ffi.NULL:
                pn_condition_set_description(dc, desc)
            pn_data_copy(pn_condition_info(dc), pn_condition_info(sc))
    else:
        pn_disposition_set_failed(dst, pn_disposition_is_failed(src))
        pn_disposition_set_undeliverable(dst, pn_disposition_is_undeliverable(src))
        pn_data_copy(pn_disposition_annotations(dst), pn_disposition_annotations(src))


class OutcomeSnapshot:
    """A copy of a consumer's outcome details that outlives its delivery (multicast aggregation)."""

    __slots__ = ("outcome", "name", "description", "info", "failed", "undeliverable", "annotations")

    def __init__(self, dlv: object, outcome: int) -> None:
        src = pn_delivery_remote(dlv)
        self.outcome = outcome
        self.name = self.description = None
        self.info = self.annotations = None
        self.failed = self.undeliverable = False
        if outcome == REJECTED:
            sc = pn_disposition_condition(src)
            if pn_condition_is_set(sc):
                self.name = ffi.string(pn_condition_get_name(sc))
                d = pn_condition_get_description(sc)
                self.description = ffi.string(d) if d != ffi.NULL else None
                self.info = pn_data(0)
                pn_data_copy(self.info, pn_condition_info(sc))
        elif outcome == MODIFIED:
            self.failed = bool(pn_disposition_is_failed(src))
            self.undeliverable = bool(pn_disposition_is_undeliverable(src))
            self.annotations = pn_data(0)
            pn_data_copy(self.annotations, pn_disposition_annotations(src))

    def apply(self, dst_dlv: object) -> None:
        """Give `dst_dlv` this outcome, with its details."""
        dst = pn_delivery_local(dst_dlv)
        if self.outcome == REJECTED and self.name is not None:
            dc = pn_disposition_condition(dst)
            pn_condition_set_name(dc, self.name)
            if self.description is not None:
                pn_condition_set_description(dc, self.description)
            pn_data_copy(pn_condition_info(dc), self.info)
        elif self.outcome == MODIFIED:
            pn_disposition_set_failed(dst, self.failed)
            pn_disposition_set_undeliverable(dst, self.undeliverable)
            if self.annotations is not None:
                pn_data_copy(pn_disposition_annotations(dst), self.annotations)
        pn_delivery_update(dst_dlv, self.outcome)

    def __del__(self) -> None:
        for d in (self.info, self.annotations):
            if d is not None:
                pn_data_free(d)


def set_modified(dst_dlv: object, failed: bool, undeliverable: bool = False) -> None:
    """Give `dst_dlv` a MODIFIED outcome made by the node (e.g. delivery-failed on consumer loss)."""
    dst = pn_delivery_local(dst_dlv)
    pn_disposition_set_failed(dst, failed)
    pn_disposition_set_undeliverable(dst, undeliverable)
    pn_delivery_update(dst_dlv, MODIFIED)


def set_rejected(dst_dlv: object, name: bytes, description: bytes) -> None:
    """Give `dst_dlv` a REJECTED outcome made by the node, with an error condition."""
    dc = pn_disposition_condition(pn_delivery_local(dst_dlv))
    pn_condition_set_name(dc, name)
    pn_condition_set_description(dc, description)
    pn_delivery_update(dst_dlv, REJECTED)


class NodeOutcome:
    """An outcome made by the node itself (ACCEPTED for a hand-over, RELEASED, MODIFIED delivery-failed)."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: int) -> None:
        self.outcome = outcome

    def apply(self, dst_dlv: object) -> None:
        if self.outcome == MODIFIED:
            set_modified(dst_dlv, failed=True)
        else:
            pn_delivery_update(dst_dlv, self.outcome)


class Rejection:
    """REJECTED by the node, with an error condition (e.g. amqp:decode-error and why)."""

    __slots__ = ("name", "description")
    outcome = REJECTED

    def __init__(self, name: bytes, description: bytes) -> None:
        self.name = name
        self.description = description

    def apply(self, dst_dlv: object) -> None:
        set_rejected(dst_dlv, self.name, self.description)


def oversize(limit: int) -> Rejection:
    """REJECTED for a transfer bigger than its connection's max_message_size (a listener limit)."""
    return Rejection(b"amqp:link:message-size-exceeded",
                     f"message larger than this connection's max-message-size of {limit} bytes".encode())


NO_TO = Rejection(b"amqp:precondition-failed", b"anonymous relay: the message has no readable 'to' address")

# the node's own outcomes and rejections (router.adapter.deliveries and its mixins)
ACCEPT = NodeOutcome(ACCEPTED)
UNAUTHORIZED = b"amqp:unauthorized-access"
BAD_SECTIONS = "malformed message: "     # the description of a rejection for sections out of order
UNREADABLE = Rejection(b"amqp:decode-error", b"unreadable message or router annotations")
NO_PROPERTIES = Rejection(b"amqp:decode-error", b"cannot read the message properties")
