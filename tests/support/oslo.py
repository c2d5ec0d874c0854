"""oslo.messaging for the tests and their server subprocess: configuration, URLs, addresses, endpoints,
and the four-node mesh the oslo tests run on (:data:`MESH_EDGES`, :func:`mesh_rules`).

Each transport gets its own ``oslo_config`` ConfigOpts (no global ``cfg.CONF``), so tests never leak
options into each other. The amqp1 driver's options are registered up front so they can be overridden
before the driver reads them.
"""

from __future__ import annotations

import threading
import time

from oslo_config import cfg
from oslo_messaging._drivers.amqp1_driver import opts as amqp1_opts
from oslo_messaging._metrics import client as metrics_client

from tests.support.nodes import shipped_rules

OSLO_PREFIX = "openstack.org/om"
# topologies/four-node.yaml: every pair of nodes linked at cost 1; "from" dials "to" (started before it)
MESH_NODES = ("A", "B", "C", "D")
MESH_EDGES = (("B", "A", 1), ("C", "A", 1), ("C", "B", 1), ("D", "C", 1), ("D", "B", 1), ("D", "A", 1))
AMQP_GROUP = "oslo_messaging_amqp"
EXCHANGE = "openstack"          # control_exchange default: the routable addresses carry it

# The driver's own defaults (30 s) are longer than a test may run: a send that never gets credit
# must fail inside the test's time limit. None of these touch the calls' own timeouts.
TEST_AMQP_OVERRIDES = {
    "default_send_timeout": 10,      # cast without a timeout
    "default_notify_timeout": 10,    # notifications
    "default_reply_timeout": 10,     # a server's reply
}


def make_conf(**amqp_overrides) -> cfg.ConfigOpts:
    """A private ConfigOpts for one transport. ``addressing_mode`` stays the driver default
    (``dynamic``) unless overridden: the driver must pick routable addressing from the node's
    Open ``product`` property by itself."""
    conf = cfg.ConfigOpts()
    conf([], project="meshrouter-oslo-tests", default_config_files=[], default_config_dirs=[])
    # RPCClient.call() builds a process-wide metrics collector from the first conf it sees and
    # needs these options; its sender thread lives metrics_thread_stop_timeout s (default 10).
    conf.register_opts(metrics_client.oslo_messaging_metrics, group="oslo_messaging_metrics")
    conf.set_override("metrics_thread_stop_timeout", 1, group="oslo_messaging_metrics")
    conf.register_opts(amqp1_opts.amqp1_opts, group=AMQP_GROUP)
    for k, v in {**TEST_AMQP_OVERRIDES, **amqp_overrides}.items():
        conf.set_override(k, v, group=AMQP_GROUP)
    return conf


def transport_url(node_url: str) -> str:
    """``amqp://HOST:PORT`` (a node's client URL) → the driver's transport URL ``amqp://HOST:PORT/``
    (empty virtual host: no vhost segment in the addresses)."""
    return node_url.rstrip("/") + "/"


def rpc_addresses(topic: str, server: str | None = None, exchange: str = EXCHANGE) -> dict[str, str]:
    """The routable addresses of an RPC target (router-digest §7)."""
    base = "openstack.org/om/rpc"
    out = {"anycast": f"{base}/anycast/{exchange}/{topic}",
           "multicast": f"{base}/multicast/{exchange}/{topic}"}
    if server is not None:
        out["unicast"] = f"{base}/unicast/{exchange}/{topic}/{server}"
    return out


def notify_address(topic: str, priority: str, exchange: str = EXCHANGE) -> str:
    return f"openstack.org/om/notify/anycast/{exchange}/{topic}.{priority}"


class EchoEndpoint:
    """RPC endpoint: ``echo`` answers with the server's name, ``note`` (for casts) records,
    ``fail`` raises, ``slow`` sleeps. Every call is recorded in ``calls``."""

    def __init__(self, name: str, delay: float = 0.0, on_call=None):
        self.name = name
        self.delay = delay
        self.on_call = on_call
        self.calls: list[tuple[str, object]] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def _record(self, method: str, arg) -> None:
        with self.lock:
            self.calls.append((method, arg))
            self.changed.notify_all()
        if self.on_call is not None:
            self.on_call(method, arg)

    def echo(self, ctxt, text):
        self._record("echo", text)
        if self.delay:
            time.sleep(self.delay)
        return {"server": self.name, "text": text}

    def note(self, ctxt, text):
        self._record("note", text)

    def fail(self, ctxt, text):
        self._record("fail", text)
        raise ValueError(f"boom from {self.name}: {text}")

    def slow(self, ctxt, seconds):
        self._record("slow", seconds)
        time.sleep(seconds)
        return {"server": self.name, "slept": seconds}

    def count(self, method: str) -> int:
        with self.lock:
            return sum(1 for m, _ in self.calls if m == method)

    def args(self, method: str) -> list:
        with self.lock:
            return [a for m, a in self.calls if m == method]

    def wait_count(self, method: str, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.lock:
            while sum(1 for m, _ in self.calls if m == method) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True


def mesh_rules() -> tuple[tuple[str, str], ...]:
    """The address rules of config/node.yaml, so the tests exercise the shipped oslo rules."""
    rules = shipped_rules()
    assert dict(rules).get(f"{OSLO_PREFIX}/rpc/anycast") == "balanced", rules
    assert dict(rules).get(f"{OSLO_PREFIX}/rpc/unicast") == "closest", rules
    assert dict(rules).get(f"{OSLO_PREFIX}/rpc/multicast") == "multicast", rules
    assert dict(rules).get(f"{OSLO_PREFIX}/notify") == "balanced", rules
    return rules
