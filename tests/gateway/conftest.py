"""Fixtures for the gateway tests: the real RabbitMQ on 127.0.0.1:5672 and unique broker names.

``scripts/ensure-rabbitmq.sh`` (run by ``make test``) starts the broker; here an unreachable broker fails
the tests with a clear message. Every test gets its own address prefix (``gwt.<random>``) so that
tests running at the same time never share queues or exchanges, and :class:`tests.support.rabbit.Broker`
deletes what the test created (queues and exchanges named after that prefix) at teardown.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.rabbit import Broker, require_rabbit


@pytest.fixture
def broker() -> Iterator[Broker]:
    require_rabbit()
    b = Broker(f"gwt.{uuid.uuid4().hex[:10]}")
    yield b
    b.cleanup()
