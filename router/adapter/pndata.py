"""Reading the few AMQP values the adapter needs out of a Proton ``pn_data_t``, through the C API.

A terminus's capabilities (a symbol, or an array or list of them) and one integer of a connection's
properties map (the inter-router cost). python-qpid-proton's ``Data`` wrapper did this before, but
importing its wrappers costs ~40 ms of a node's start-up and of its first inter-router connection.
Each function leaves the data rewound, as it found it.
"""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_ARRAY,
    PN_BYTE,
    PN_INT,
    PN_LIST,
    PN_LONG,
    PN_MAP,
    PN_SHORT,
    PN_STRING,
    PN_SYMBOL,
    PN_UBYTE,
    PN_UINT,
    PN_ULONG,
    PN_USHORT,
    pn_data_enter,
    pn_data_exit,
    pn_data_get_byte,
    pn_data_get_int,
    pn_data_get_long,
    pn_data_get_short,
    pn_data_get_string,
    pn_data_get_symbol,
    pn_data_get_ubyte,
    pn_data_get_uint,
    pn_data_get_ulong,
    pn_data_get_ushort,
    pn_data_next,
    pn_data_rewind,
    pn_data_type,
)

_INTEGERS = {PN_BYTE: pn_data_get_byte, PN_UBYTE: pn_data_get_ubyte, PN_SHORT: pn_data_get_short,
             PN_USHORT: pn_data_get_ushort, PN_INT: pn_data_get_int, PN_UINT: pn_data_get_uint,
             PN_LONG: pn_data_get_long, PN_ULONG: pn_data_get_ulong}


def _text(data: object, kind: int) -> str | None:
    """The symbol or string at the cursor (None for another type)."""
    if kind == PN_SYMBOL:
        b = pn_data_get_symbol(data)
    elif kind == PN_STRING:
        b = pn_data_get_string(data)
    else:
        return None
    return ffi.unpack(b.start, b.size).decode("utf-8", errors="replace") if b.size else ""


def symbols(data: object) -> set[str]:
    """The symbols (or strings) held by `data`: one, or the elements of an array or a list."""
    out: set[str] = set()
    pn_data_rewind(data)
    if pn_data_next(data):
        kind = pn_data_type(data)
        if kind in (PN_ARRAY, PN_LIST):
            pn_data_enter(data)
            while pn_data_next(data):
                text = _text(data, pn_data_type(data))
                if text is not None:
                    out.add(text)
            pn_data_exit(data)
        else:
            text = _text(data, kind)
            if text is not None:
                out.add(text)
    pn_data_rewind(data)
    return out


def map_integer(data: object, key: str) -> int | None:
    """The integer value of `key` (a symbol or string key) in the map held by `data`; None if there is
    no such key, its value is not an integer, or `data` holds no map."""
    found = None
    pn_data_rewind(data)
    if pn_data_next(data) and pn_data_type(data) == PN_MAP:
        pn_data_enter(data)
        while pn_data_next(data):
            k = _text(data, pn_data_type(data))
            if not pn_data_next(data):
                break
            if k == key:
                get = _INTEGERS.get(pn_data_type(data))
                found = int(get(data)) if get is not None else None
        pn_data_exit(data)
    pn_data_rewind(data)
    return found
