"""RabbitMQ for the tests: the real broker on 127.0.0.1:5672, pika access to it, and a node's gateway config.

:class:`Broker` declares, reads and deletes (at teardown) the queues and exchanges one test uses, under
a unique name prefix. :func:`gateway_config` is the ``brokers:`` section of a node bridging addresses
to the broker. :func:`rabbitmqctl_unusable` says why the broker cannot be restarted by a test.
"""

from __future__ import annotations

import shutil
import socket
import subprocess

import pika
import pytest
from proton import Message

from tests.support.clients import make_message

RABBIT_HOST, RABBIT_PORT = "127.0.0.1", 5672
RABBIT_URL = f"amqp://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/%2F"


def rabbit_reachable() -> bool:
    try:
        socket.create_connection((RABBIT_HOST, RABBIT_PORT), timeout=2).close()
        return True
    except OSError:
        return False


def require_rabbit() -> None:
    """Fail the test with what to do when RabbitMQ is not reachable."""
    if not rabbit_reachable():
        pytest.fail(f"RabbitMQ is not reachable on {RABBIT_HOST}:{RABBIT_PORT}: run "
                    "scripts/ensure-rabbitmq.sh (make test does) or `rabbitmq-server -detached`")


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


def gateway_config(*addresses: dict, url: str = RABBIT_URL, name: str = "rabbit", heartbeat: int = 10,
                   confirm_window: int = 250) -> dict:
    """``extra=`` for node_factory: one broker with the given bridged addresses."""
    return {"brokers": [{"name": name, "url": url, "heartbeat": heartbeat, "confirm_window": confirm_window,
                         "addresses": list(addresses)}]}


def durable_message(body: str) -> Message:
    """A durable message whose body the broker stores as the plain bytes (a data section)."""
    m = make_message(body.encode(), durable=True)
    m.inferred = True
    return m


def rabbitmqctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout)


def rabbitmqctl_unusable() -> str | None:
    """None if ``rabbitmqctl`` can stop and start the broker here, else why it cannot."""
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed"
    try:
        r = rabbitmqctl("status", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"rabbitmqctl status failed: {exc}"
    if r.returncode != 0:
        return f"rabbitmqctl status failed (needs root or the Erlang cookie?): {r.stderr.strip()[:200]}"
    return None
