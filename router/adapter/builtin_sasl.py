"""Proton's built-in SASL implementation (ANONYMOUS, EXTERNAL) for a transport, through ctypes.

Every connection is given Proton's built-in implementation rather than Cyrus (router.adapter.sasl has
the why). router.adapter.sasl reaches the plugin API with a cffi handle whose declarations are parsed at
import (pycparser: ~30-50 ms of a node's start-up); this one call needs none of it, so every connection
uses it and router.adapter.sasl is imported only by listeners that check PLAIN themselves or use Cyrus.
Same library, same symbols: ctypes dlopens the copy python-qpid-proton already loaded.
"""

from __future__ import annotations

import ctypes

import cproton_ffi
from cproton_ffi import ffi

_lib = ctypes.CDLL(cproton_ffi.__file__)
_DEFAULT = ctypes.addressof(ctypes.c_char.in_dll(_lib, "default_sasl_impl"))
_set_implementation = _lib.pnx_sasl_set_implementation
_set_implementation.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_set_implementation.restype = None


def use_builtin(transport: object) -> None:
    """Let Proton's built-in C implementation run SASL on `transport` (a cproton_ffi pn_transport_t*)."""
    _set_implementation(int(ffi.cast("uintptr_t", transport)), _DEFAULT, None)
