"""Proton's transport buffers: small while a connection is idle, grown once it is busy (issue 33).

The stock python-qpid-proton 0.40 gives every transport 8 KiB of input and 8 KiB of output buffer (and
4 KiB of framed output), ~16 KiB of an idle connection's ~20 KiB. `make` builds it with 1 KiB each
(scripts/build_proton.py). Proton grows an input buffer only when a frame does not fit, and an output
buffer only when it is asked for more while full, so a busy connection would move its bytes 1 KiB per
system call: these helpers grow its buffers to `BUSY_BUFFER`, the stock size, once it fills them. With the
stock build they cost one extra call now and then and change nothing.
"""

from __future__ import annotations

import ctypes

import cproton_ffi
from cproton_ffi import ffi, lib

#: what a busy connection's input and output buffers grow to (the stock initial size)
BUSY_BUFFER = 8 * 1024

_lib = ctypes.CDLL(cproton_ffi.__file__)      # the copy python-qpid-proton already loaded
_grow_capacity = _lib.pni_transport_grow_capacity
_grow_capacity.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_grow_capacity.restype = ctypes.c_ssize_t


def initial_buffer() -> int:
    """Bytes of input buffer a new transport starts with: 1024 built by `make`, 8192 from PyPI."""
    t = lib.pn_transport()
    try:
        return int(lib.pn_transport_capacity(t))
    finally:
        lib.pn_decref(t)


def grow_input(transport: object) -> int:
    """Grow the transport's input buffer to `BUSY_BUFFER` (a read filled it); returns its free room."""
    return int(_grow_capacity(int(ffi.cast("uintptr_t", transport)), BUSY_BUFFER))


def grow_output(transport: object, p: int) -> int:
    """`p` bytes pending, a power of two under `BUSY_BUFFER`: maybe a full output buffer. Ask again (Proton
    doubles a full buffer and fills the rest) until the count stops growing; returns the last count."""
    while 0 < p < BUSY_BUFFER and not p & (p - 1):
        more = lib.pn_transport_pending(transport)
        if more == p:
            break
        p = more
    return p


def pending(transport: object) -> int:
    """`pn_transport_pending`, with a full output buffer grown (`grow_output`)."""
    p = lib.pn_transport_pending(transport)
    return grow_output(transport, p) if 0 < p < BUSY_BUFFER and not p & (p - 1) else p
