"""Only for benchmarks/gateway_bench.py, which imports the test client from here: the client and its
pump live in tests.support (tests import them from there). Remove this module once the benchmark
imports ``tests.support.clients.Client`` and ``tests.support.waiting.close_all, pump``."""

from tests.support.clients import Client
from tests.support.waiting import close_all, pump

__all__ = ["Client", "close_all", "pump"]
