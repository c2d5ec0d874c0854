"""Small Proton helpers shared by the engine's parts: refusing an attach, reading a terminus address."""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import (
    pn_condition_set_description,
    pn_condition_set_name,
    pn_link_close,
    pn_link_condition,
    pn_link_open,
    pn_terminus_get_address,
)

SESSION_CAPACITY = 8 * 1024 * 1024   # bytes a peer may have in flight to us per session (bounds memory)


def refuse(link: object, name: bytes, description: bytes) -> None:
    """Answer an attach with a detach carrying this error condition."""
    cond = pn_link_condition(link)
    pn_condition_set_name(cond, name)
    pn_condition_set_description(cond, description)
    pn_link_open(link)
    pn_link_close(link)


def terminus_address(terminus: object) -> str | None:
    """The terminus address ("" when it has none, None when it is not valid UTF-8)."""
    p = pn_terminus_get_address(terminus)
    if p == ffi.NULL:
        return ""
    try:
        return ffi.string(p).decode()
    except UnicodeDecodeError:
        return None
