"""Proton's transport buffers: built at 1 KiB, grown once a connection fills them (pnbuffers)."""

from __future__ import annotations

from cproton_ffi import ffi, lib

from router.adapter.pnbuffers import BUSY_BUFFER, grow_input, grow_output, initial_buffer, pending


def _bound(server: bool = True) -> tuple[object, object]:
    c, t = lib.pn_connection(), lib.pn_transport()
    if server:
        lib.pn_transport_set_server(t)
    lib.pn_transport_bind(t, c)
    return c, t


def _drain(t: object, take: int = 65536) -> bytes:
    """Everything the transport has to send, popped in the way Connection.flush pops it."""
    out, buf = bytearray(), ffi.new("char[]", take)
    p = pending(t)
    while p > 0:
        k = lib.pn_transport_peek(t, buf, min(p, take))
        out += ffi.buffer(buf, k)[:]
        lib.pn_transport_pop(t, k)
        p = pending(t)
    return bytes(out)


def test_make_builds_proton_with_1_kib_transport_buffers():
    # scripts/build_proton.py (run by make): the stock python-qpid-proton starts at 8192
    assert initial_buffer() == 1024


def test_a_filled_input_buffer_grows_to_the_busy_size():
    _c, t = _bound()
    assert lib.pn_transport_capacity(t) == 1024
    assert grow_input(t) == BUSY_BUFFER
    assert lib.pn_transport_capacity(t) == BUSY_BUFFER
    assert grow_input(t) == BUSY_BUFFER          # already grown: nothing changes


def _put(put: object, data: object, value: bytes) -> None:
    keep = ffi.new("char[]", value)
    put(data, ffi.new("pn_bytes_t *", (len(value), keep))[0])


def test_a_full_output_buffer_grows_and_nothing_is_lost():
    # a client's Open with 20,000 bytes of properties: more than the 1 KiB buffer holds
    c, t = _bound(server=False)
    props = lib.pn_connection_properties(c)
    lib.pn_data_put_map(props)
    lib.pn_data_enter(props)
    _put(lib.pn_data_put_symbol, props, b"big")
    value = b"x" * 20_000
    _put(lib.pn_data_put_string, props, value)
    lib.pn_data_exit(props)
    lib.pn_connection_open(c)
    assert lib.pn_transport_pending(t) == 1024       # the full 1 KiB buffer
    assert grow_output(t, 1024) == BUSY_BUFFER       # doubled to the busy size, and filled
    out = _drain(t)
    assert out.startswith(b"AMQP") and value in out


def test_output_under_a_power_of_two_is_left_alone():
    c, t = _bound(server=False)
    lib.pn_connection_open(c)
    p = lib.pn_transport_pending(t)
    assert 0 < p < 1024 and p & (p - 1)
    assert pending(t) == p
