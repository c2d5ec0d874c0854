"""Plain-value views of Proton link handles, for code above the adapter (management, telemetry)."""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import pn_link_name, pn_link_queued


def text(p: object) -> str | None:
    """A C string from Proton as text (None for NULL; invalid UTF-8 replaced)."""
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None


def link_id(link: object) -> str:
    """A node-local id for a link, stable while the link lives (its management identity)."""
    return f"l{int(ffi.cast('uintptr_t', link)):x}"


def link_name(link: object) -> str | None:
    """The link's name as its peer attached it."""
    return text(pn_link_name(link))


def link_queued(link: object) -> int:
    """Deliveries handed to a sending link and not yet written to the wire."""
    return pn_link_queued(link)
