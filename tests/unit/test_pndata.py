"""router.adapter.pndata: the values read from a Proton pn_data_t with the C API (capabilities, the
inter-router cost), against what python-qpid-proton's Data wrapper put there."""

from __future__ import annotations

from cproton_ffi.lib import pn_data, pn_data_free
from proton import Data, byte, int32, symbol, ubyte, uint, ulong, ushort

from router.adapter.pndata import map_integer, symbols


def _data(value: object) -> tuple[object, Data]:
    raw = pn_data(0)
    d = Data(raw)
    if value is not None:
        d.put_object(value)
    return raw, d


def _symbols(value: object) -> set[str]:
    raw, _d = _data(value)
    try:
        return symbols(raw)
    finally:
        pn_data_free(raw)


def _cost(value: object) -> int | None:
    raw, _d = _data(value)
    try:
        return map_integer(raw, "qd.inter-router-cost")
    finally:
        pn_data_free(raw)


def test_symbols_one_a_list_an_array_or_none():
    assert _symbols(None) == set()
    assert _symbols(symbol("qd.router")) == {"qd.router"}
    assert _symbols([symbol("a"), "b", 3]) == {"a", "b"}            # non-text elements are ignored
    d = Data()
    d.put_array(False, Data.SYMBOL)
    d.enter()
    for s in ("x", "y"):
        d.put_symbol(s)
    d.exit()
    raw = pn_data(0)
    try:
        Data(raw).copy(d)
        assert symbols(raw) == {"x", "y"}
    finally:
        pn_data_free(raw)


def test_map_integer_any_integer_type_under_a_symbol_or_string_key():
    for value in (int32(3), uint(3), ulong(3), ushort(3), ubyte(3), byte(3)):
        assert _cost({symbol("qd.inter-router-cost"): value}) == 3
    assert _cost({"qd.inter-router-cost": int32(7), symbol("other"): int32(1)}) == 7
    assert _cost({symbol("qd.inter-router-cost"): "3"}) is None       # not an integer
    assert _cost({symbol("qd.inter-router-cost"): True}) is None      # a boolean is not a cost
    assert _cost({symbol("other"): int32(2)}) is None
    assert _cost([int32(1)]) is None                                   # not a map
    assert _cost(None) is None
