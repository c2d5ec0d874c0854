"""Fixtures for the gateway tests: the real RabbitMQ on 127.0.0.1:5672 and unique broker names.

``scripts/ensure-rabbitmq.sh`` (run by ``make test``) starts the broker; here an unreachable broker fails
the tests with a clear message. Every test gets its own address prefix (``gwt.<random>``) so that
tests running at the same time never share queues or exchanges, and :class:`Broker` deletes what the
test created (queues and exchanges named after that prefix) at teardown.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pika
import pytest

RABBIT_HOST, RABBIT_PORT = "127.0.0.1", 5672
RABBIT_URL = f"amqp://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/%2F"


def rabbit_reachable() -> bool:
    try:
        socket.create_connection((RABBIT_HOST, RABBIT_PORT), timeout=2).close()
        return True
    except OSError:
        return False


class Broker:
    """Direct pika access to RabbitMQ for checks and clean-up (BlockingConnection)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.queues: set[str] = set()
        self.exchanges: set[str] = set()
        self.conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
        self.ch = self.conn.channel()

    def name(self, suffix: str) -> str:
        return f"{self.prefix}/{suffix}"

    def reconnect(self) -> None:
        """A new connection (after the broker was restarted under the old one)."""
        try:
            self.conn.close()
        except Exception:
            pass
        self.conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
        self.ch = self.conn.channel()

    def _channel(self):
        if not self.ch.is_open:
            if not self.conn.is_open:
                self.conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
            self.ch = self.conn.channel()
        return self.ch

    def depth(self, queue: str) -> int:
        """Messages ready in ``queue`` (not counting unacknowledged ones)."""
        self.queues.add(queue)
        return self._channel().queue_declare(queue, passive=True).method.message_count

    def declare_queue(self, queue: str, **kw) -> None:
        self.queues.add(queue)
        self._channel().queue_declare(queue, **kw)

    def declare_exchange(self, exchange: str, kind: str = "fanout", **kw) -> None:
        self.exchanges.add(exchange)
        self._channel().exchange_declare(exchange, kind, **kw)

    def bind(self, queue: str, exchange: str, key: str = "") -> None:
        self._channel().queue_bind(queue, exchange, routing_key=key)

    def get_all(self, queue: str) -> list[tuple]:
        """Take every ready message from ``queue`` (acknowledged)."""
        out = []
        ch = self._channel()
        while True:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append((props, body))

    def publish(self, exchange: str, key: str, body: bytes,
                props: pika.BasicProperties | None = None) -> None:
        self._channel().basic_publish(exchange, key, body, props)

    def track(self, queues: tuple[str, ...] = (), exchanges: tuple[str, ...] = ()) -> None:
        self.queues.update(queues)
        self.exchanges.update(exchanges)

    def cleanup(self) -> None:
        try:
            ch = self._channel()
            for q in self.queues:
                try:
                    ch.queue_delete(q)
                except Exception:
                    ch = self._channel()
            for e in self.exchanges:
                try:
                    ch.exchange_delete(e)
                except Exception:
                    ch = self._channel()
            self.conn.close()
        except Exception:
            pass


@pytest.fixture
def broker() -> Iterator[Broker]:
    if not rabbit_reachable():
        pytest.fail(f"RabbitMQ is not reachable on {RABBIT_HOST}:{RABBIT_PORT}: run "
                    "scripts/ensure-rabbitmq.sh (make test does) or `rabbitmq-server -detached`")
    b = Broker(f"gwt.{uuid.uuid4().hex[:10]}")
    yield b
    b.cleanup()


def gateway_config(*addresses: dict, url: str = RABBIT_URL, name: str = "rabbit", heartbeat: int = 10,
                   confirm_window: int = 250) -> dict:
    """``extra=`` for node_factory: one broker with the given bridged addresses."""
    return {"brokers": [{"name": name, "url": url, "heartbeat": heartbeat, "confirm_window": confirm_window,
                         "addresses": list(addresses)}]}
