"""Fixtures for the simulation tests."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Keep the cyclic GC out of big simulations: hundreds of engines make each full collection slow, and
    none of their structures needs it (everything is freed by reference counting)."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()
