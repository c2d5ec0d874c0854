"""oslo.messaging system tests: real oslo RPC servers, clients, notifiers and listeners (amqp1 driver)
talking through a four-node mesh of real node processes.

The mesh is topologies/four-node.yaml on ports picked by the system: A-B, C-D, A-C, B-D, A-D, B-C,
every link cost 1, HELLO every 0.2 s. Nodes are started with the ``node_factory`` fixture of
tests/conftest.py (it stops them at teardown, fails the test if one died, and attaches each node's
stderr tail to a failed test's report) by tests/support/meshes.py's ``build()``, with the address
rules shipped in config/node.yaml (the ``openstack.org/om`` ones among them).

``oslo`` (fixture) makes transports, servers, clients, notifiers, listeners and server subprocesses and
tears them all down after the test, then checks that no thread they started is left behind.

Every test runs twice (``mesh`` is parametrized): on an open mesh (``open``) and on a mesh whose nodes all
have the `policy:` of ``OSLO_POLICY`` (``policy``), which allows only what the driver needs: anonymous
clients may consume and send under ``openstack.org/om/`` and use reply addresses, nothing else (no
anonymous relay, no management, every other user refused).

A test marked ``rabbit_gateway("A")`` gets node A started with a ``brokers:`` section that bridges the
notification addresses of a unique topic (``rabbit`` fixture) to RabbitMQ on 127.0.0.1:5672 with
``direction: both``; the queues are deleted with pika after the nodes have stopped.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pika
import pytest

pytest.importorskip("pyngus", reason="oslo tests need the test extra (pyngus)")
om = pytest.importorskip("oslo_messaging", reason="oslo tests need the test extra (oslo.messaging 14.9.3)")
# impl_amqp1 runs warnings.simplefilter('always') when it is first imported, which would override the
# tests' filterwarnings marks if that happened inside a test: import it now, during collection.
pytest.importorskip("oslo_messaging._drivers.impl_amqp1")

from tests.support.authz import AuthClient  # noqa: E402
from tests.support.clients import Client  # noqa: E402
from tests.support.management import Requester  # noqa: E402
from tests.support.meshes import build, wait_converged  # noqa: E402
from tests.support.nodes import REPO_ROOT  # noqa: E402
from tests.support.oslo import (  # noqa: E402
    MESH_EDGES,
    MESH_NODES,
    make_conf,
    mesh_rules,
    notify_address,
    transport_url,
)
from tests.support.rabbit import RABBIT_URL, Broker, gateway_config, require_rabbit  # noqa: E402
from tests.support.state import mesh_view  # noqa: E402
from tests.support.waiting import wait_for, wait_until  # noqa: E402


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "rabbit_gateway(node, priorities=('info',)): the mesh's node `node` bridges the "
        "notification addresses of the `rabbit` fixture's unique topic to RabbitMQ (direction both)")


class RabbitNotifications:
    """A unique notification topic whose addresses one node bridges to RabbitMQ, and pika access to
    their queues (anycast: one queue per address, named after it). Queues are deleted at teardown."""

    def __init__(self, priorities: tuple[str, ...] = ("info",)):
        self.topic = f"stored-{uuid.uuid4().hex[:12]}"
        self.addresses = {p: notify_address(self.topic, p) for p in priorities}
        self.broker = Broker(self.topic)
        self.broker.track(queues=tuple(self.addresses.values()))

    def brokers_extra(self) -> dict:
        """``extra=`` for the gateway node: direction both, durable queues."""
        return gateway_config(*({"address": a, "semantics": "anycast", "direction": "both", "durable": True}
                                for a in self.addresses.values()))

    def depth(self, priority: str = "info") -> int:
        return self.broker.depth(self.addresses[priority])

    def queue_exists(self, queue: str) -> bool:
        conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
        try:
            conn.channel().queue_declare(queue, passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker:
            return False
        finally:
            if conn.is_open:
                conn.close()


@pytest.fixture
def rabbit(request):
    """:class:`RabbitNotifications` for a test marked ``rabbit_gateway``. Requested (through
    ``mesh_brokers``) before ``node_factory``, so its teardown runs after the nodes have stopped: a
    running gateway would declare the queues again."""
    require_rabbit()
    mark = request.node.get_closest_marker("rabbit_gateway")
    rn = RabbitNotifications(**({"priorities": tuple(mark.kwargs["priorities"])}
                                if mark is not None and "priorities" in mark.kwargs else {}))
    yield rn
    rn.broker.cleanup()
    left = [q for q in rn.addresses.values() if rn.queue_exists(q)]
    if left:
        pytest.fail(f"RabbitMQ queues left behind after the test: {left}", pytrace=False)


@pytest.fixture
def mesh_brokers(request) -> dict:
    """{node id: extra config}: a ``brokers:`` section for the node named by the test's
    ``rabbit_gateway`` mark, nothing otherwise."""
    mark = request.node.get_closest_marker("rabbit_gateway")
    if mark is None:
        return {}
    return {mark.args[0] if mark.args else "A": request.getfixturevalue("rabbit").brokers_extra()}


#: What the amqp1 driver needs (docs/SECURITY.md, the worked example's `om` group): its addresses
#: under openstack.org/om/, a dynamic reply address per connection, replies sent by a sender targeted at the
#: reply address (it never uses the anonymous relay); no management.
#: The tests read the policy's counters through the vhost `monitor.test` (management only).
OSLO_POLICY = {
    "default_group": "deny",
    "groups": {"om": {"users": ["anonymous"], "sources": ["openstack.org/om/#"],
                      "targets": ["openstack.org/om/#"], "allow_dynamic_source": True,
                      "allow_anonymous_sender": False, "management": "none"}},
    "vhosts": {"monitor.test": {"groups": {"monitor": {"users": ["anonymous"], "sources": [], "targets": [],
                                                       "management": "read"}}}},
}


@pytest.fixture(params=["open", "policy"])
def mesh(request, mesh_brokers, node_factory) -> dict:
    """The four nodes, converged, every pair at cost 1, without or with `OSLO_POLICY`. Returns
    {node id: NodeProcess}."""
    policy = {"policy": OSLO_POLICY} if request.param == "policy" else {}
    sections = {n: {**policy, **(mesh_brokers.get(n) or {})} for n in MESH_NODES}
    nodes = build(node_factory, MESH_NODES, MESH_EDGES, rules=mesh_rules(), sections=sections, wait=False)
    if request.param == "policy":
        for n in nodes.values():
            n.state_vhost = "monitor.test"      # tests.support.state reads through the policy's monitor vhost
    wait_converged(nodes.values(), 10.0)
    for n in nodes.values():
        assert mesh_view(n).costs == {o: 1 for o in nodes if o != n.node_id}, "not a full mesh of cost 1"
    if request.param == "policy":
        _probe_policy(nodes)
    yield nodes
    if request.param == "policy":
        _no_other_denials(nodes)


def _probe_policy(nodes: dict) -> None:
    """The policy is in force on every node: outside openstack.org/om/, or the anonymous relay, refused."""
    for n in nodes.values():
        c = Client(n.url)
        links = [c.receiver("not-openstack/probe", wait=False), c.sender("not-openstack/probe", wait=False),
                 c.sender(None, wait=False)]
        wait_for(lambda links=links: all(link.remote_closed for link in links), what="the policy's refusals")
        assert all(link.remote_condition.name == "amqp:unauthorized-access" for link in links)
        c.close()


def _no_other_denials(nodes: dict) -> None:
    """The driver never ran into the policy: each node's only refusals are the probe's three links."""
    monitor = Requester(AuthClient(nodes["A"].url, hostname="monitor.test"))
    for node_id in nodes:
        rows = {row["group"]: row for row in monitor.query("policy", node_id)}
        om = rows["om"]
        assert (om["connectionsDenied"], om["sessionsDenied"], om["linksDenied"], om["messagesDenied"]) == \
            (0, 0, 3, 0), f"node {node_id} refused the driver something: {om}"
        assert om["connectionsOpened"] >= 1


class ServerProcess:
    """An RPC server in a subprocess (tests/oslo/rpc_server_proc.py) that a test may SIGKILL."""

    def __init__(self, node, topic: str, server: str, err_path: Path):
        self.name = server
        self.err_path = err_path
        err = open(err_path, "wb")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.oslo.rpc_server_proc", transport_url(node.url), topic, server],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO_ROOT, text=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
        finally:
            err.close()
        self.lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"oslo-proc-{server}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line == text:
                return
            if line is None:
                raise AssertionError(f"server process {self.name}: no {text!r} line within {timeout:.0f}s "
                                     f"(exit code {self.proc.poll()}); stderr:\n{self.stderr_tail()}")

    def stderr_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.err_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"<{e}>"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)


class OsloKit:
    """Makes oslo.messaging objects bound to mesh nodes and cleans every one of them up."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self._transports: list = []
        self._servers: list = []          # RPC servers and notification listeners (in-process)
        self._procs: list[ServerProcess] = []

    # transports --------------------------------------------------------------------------------
    def rpc_transport(self, node, **amqp_overrides):
        t = om.get_rpc_transport(make_conf(**amqp_overrides), url=transport_url(node.url))
        self._transports.append(t)
        return t

    def notification_transport(self, node, **amqp_overrides):
        t = om.get_notification_transport(make_conf(**amqp_overrides), url=transport_url(node.url))
        self._transports.append(t)
        return t

    # RPC -----------------------------------------------------------------------------------------
    def rpc_server(self, node, topic: str, server: str, endpoints: list, transport=None):
        transport = transport or self.rpc_transport(node)
        srv = om.get_rpc_server(transport, om.Target(topic=topic, server=server), endpoints,
                                executor="threading")
        srv.start()
        self._servers.append(srv)
        return srv

    def rpc_client(self, node, topic: str, timeout: float = 10, transport=None, **target_kw):
        transport = transport or self.rpc_transport(node)
        return om.get_rpc_client(transport, om.Target(topic=topic, **target_kw), timeout=timeout)

    def server_process(self, node, topic: str, server: str) -> ServerProcess:
        p = ServerProcess(node, topic, server, self.tmp_path / f"oslo-server-{server}.stderr")
        self._procs.append(p)
        p.expect("started", 15.0)
        return p

    # notifications -------------------------------------------------------------------------------
    def notifier(self, node, topic: str, publisher_id: str, transport=None):
        transport = transport or self.notification_transport(node)
        return om.Notifier(transport, publisher_id=publisher_id, driver="messagingv2", topics=[topic])

    def notification_listener(self, node, topic: str, endpoints: list, transport=None,
                              allow_requeue: bool = False):
        transport = transport or self.notification_transport(node)
        lst = om.get_notification_listener(transport, [om.Target(topic=topic)], endpoints,
                                           executor="threading", allow_requeue=allow_requeue)
        lst.start()
        self._servers.append(lst)
        return lst

    # teardown ------------------------------------------------------------------------------------
    def close(self) -> list[str]:
        problems = []
        for srv in reversed(self._servers):
            try:
                srv.stop()
                srv.wait()
            except Exception as e:  # report every failure, clean up the rest
                problems.append(f"stopping {srv!r}: {e!r}")
        for p in self._procs:
            p.stop()
            if p.proc.stdout is not None:
                p.proc.stdout.close()
        for t in reversed(self._transports):
            pipe = _wakeup_pipe(t)
            try:
                t.cleanup()
            except Exception as e:
                problems.append(f"cleaning up {t!r}: {e!r}")
            for fd in pipe:
                os.close(fd)
        self._servers.clear()
        self._procs.clear()
        self._transports.clear()
        return problems


def _wakeup_pipe(transport) -> tuple[int, ...]:
    """The pipe 14.9.3's amqp1 driver makes per transport to wake its event loop: its cleanup never closes
    it (eventloop.Requests), and two descriptors per transport ran the suite out of those select() takes.
    Taken before cleanup, which drops the objects that hold it; () for a transport that never connected."""
    ctrl = getattr(getattr(transport, "_driver", None), "_ctrl", None)
    requests = getattr(getattr(ctrl, "processor", None), "_requests", None)
    return tuple(getattr(requests, "_wakeup_pipe", ()))


def _is_metrics_thread(t: threading.Thread) -> bool:
    # oslo.messaging's process-wide metrics sender: it ends by itself 1 s after its last use
    return t.name.endswith("(send_loop)")


@pytest.fixture
def oslo(mesh, tmp_path):
    """An :class:`OsloKit`; torn down before the nodes (it depends on ``mesh``)."""
    before = set(threading.enumerate())
    kit = OsloKit(tmp_path)
    yield kit
    problems = kit.close()

    def leftover():
        return [t for t in threading.enumerate()
                if t not in before and t.is_alive() and not _is_metrics_thread(t)]

    try:
        wait_until(lambda: not leftover(), 5.0, "oslo threads to end")
    except AssertionError:
        problems.append(f"threads left behind: {[t.name for t in leftover()]}")
    if problems:
        pytest.fail("oslo teardown: " + "; ".join(problems), pytrace=False)
