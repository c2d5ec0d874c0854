"""Building blocks for the system tests: meshes of real node processes, waits, a cuttable TCP proxy.

A mesh is described by node names in start order and edges ``(from, to, cost)``: ``from`` dials the
inter-router listener of ``to`` with a connector of that cost (the listener's own cost is 1, and a
link's cost is the max of both ends, so the edge cost is the link cost). ``to`` must be started
before ``from``; a node that is the ``to`` of an edge gets an inter-router listener.

Everything here pumps the python-qpid-proton clients of ``tests.integration.helpers`` while it waits.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from proton import Data, symbol

from tests.integration.helpers import (
    Client,
    ReceiverLink,
    SenderLink,
    Tracker,
    WaitTimeout,
    make_message,
    pump,
    wait_for,
)

HELLO = 0.2
IR_RE = re.compile(r"^listening: role=inter-router url=amqp://(?P<host>[^:\s]+):(?P<port>\d+)")

# the prefixes the system tests use (those of config/node.yaml plus the test ones)
RULES = (
    ("openstack.org/om/rpc/multicast", "multicast"),
    ("openstack.org/om/rpc/unicast", "closest"),
    ("openstack.org/om/rpc/anycast", "balanced"),
    ("openstack.org/om/notify", "balanced"),
    ("multicast", "multicast"),
    ("closest", "closest"),
    ("balanced", "balanced"),
)

QD_PREFIX = "x-opt-qd."


# --------------------------------------------------------------------------------------------------
# waiting
# --------------------------------------------------------------------------------------------------


def wait_until(pred: Callable[[], Any], timeout: float, what: str | Callable[[], str] = "condition") -> Any:
    """Like ``wait_for`` but for waits longer than its 10 s cap: pump until ``pred()`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        left = deadline - time.monotonic()
        if left <= 0:
            desc = what() if callable(what) else what
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {desc}")
        pump(min(0.05, left))


# --------------------------------------------------------------------------------------------------
# nodes and meshes
# --------------------------------------------------------------------------------------------------


def inter_router_port(node) -> int:
    for line in node.stdout_lines:
        m = IR_RE.match(line)
        if m:
            return int(m["port"])
    raise AssertionError(f"node {node.node_id} has no inter-router listener: {node.stdout_lines}")


def start(node_factory, node_id: str, *, listen: bool = False, connect: Iterable[tuple[int, int]] = (),
          listen_cost: int = 1, hello: float = HELLO, hello_max_age: float | None = None,
          rules=RULES, link_capacity: int = 250, log_level: str = "info"):
    """One node with a client listener (port 0), optionally an inter-router listener, and connectors
    ``(port, cost)``; short control-plane timers as in tests/integration/test_mesh_control.py."""
    listeners = [{"host": "127.0.0.1", "port": 0, "role": "normal"}]
    if listen:
        listeners.append({"host": "127.0.0.1", "port": 0, "role": "inter-router", "cost": listen_cost})
    extra = {
        "listeners": listeners,
        "connectors": [{"host": "127.0.0.1", "port": port, "cost": cost} for port, cost in connect],
        "router": {"hello_interval": hello, "hello_max_age": hello_max_age or hello * 3,
                   "ra_interval_flux": 1.0},
    }
    return node_factory(node_id, rules=rules, link_capacity=link_capacity, log_level=log_level, extra=extra)


def build(node_factory, names: Sequence[str], edges: Iterable[tuple[str, str, int]], *,
          port_map: Callable[[str, str, int], int] | None = None, wait: bool = True, **kw) -> dict:
    """Start the nodes ``names`` in order, wired by ``edges`` ``(from, to, cost)``; wait until every
    node reaches every other one.  ``port_map(from, to, port)`` may replace the port ``from`` dials
    (to put a proxy in between)."""
    edges = list(edges)
    listeners = {to for _, to, _ in edges}
    nodes: dict = {}
    for name in names:
        connect = []
        for frm, to, cost in edges:
            if frm != name:
                continue
            assert to in nodes, f"edge {frm}->{to}: {to} must be started before {frm}"
            port = inter_router_port(nodes[to])
            if port_map is not None:
                port = port_map(frm, to, port)
            connect.append((port, cost))
        nodes[name] = start(node_factory, name, listen=name in listeners, connect=connect, **kw)
    if wait:
        wait_until(lambda: converged(nodes.values()), 15, lambda: "convergence: " + views(nodes.values()))
    return nodes


def node_state(node) -> dict:
    """Ask the node for its state line (SIGUSR1) and return the newest one."""
    before = node.stderr_tail(4000).count(" state {")
    os.kill(node.pid, signal.SIGUSR1)
    wait_for(lambda: node.stderr_tail(4000).count(" state {") > before,
             what=f"state line in the log of node {node.node_id}")
    line = [ln for ln in node.stderr_tail(4000).splitlines() if " state {" in ln][-1]
    return json.loads(line.split(" state ", 1)[1])


def mesh_view(node) -> dict:
    return node_state(node)["mesh"]


def converged(nodes: Iterable) -> bool:
    nodes = list(nodes)
    ids = {n.node_id for n in nodes}
    return all(set(mesh_view(n)["reachable"]) == ids - {n.node_id} for n in nodes)


def views(nodes: Iterable) -> str:
    out = []
    for n in nodes:
        if not n.alive():
            out.append(f"{n.node_id}: dead")
            continue
        try:
            v = mesh_view(n)
        except AssertionError as e:
            out.append(f"{n.node_id}: no state ({e})")
            continue
        out.append(f"{n.node_id}: reachable={v['reachable']} next_hops={v['next_hops']} "
                   f"addresses={v['addresses']}")
    return "; ".join(out)


def wait_address(nodes: Iterable, address: str, holders: Iterable[str], timeout: float = 10.0) -> None:
    """Wait until every node knows exactly ``holders`` (minus itself) as the other nodes with
    consumers for ``address``."""
    nodes = list(nodes)
    holders = set(holders)

    def ok() -> bool:
        for n in nodes:
            want = sorted(holders - {n.node_id})
            got = mesh_view(n)["addresses"].get(address, [])
            if got != want:
                return False
        return True

    wait_until(ok, timeout, lambda: f"{address} known at every node as served by {sorted(holders)}: "
               + views(nodes))


def kill9(node) -> None:
    """SIGKILL a node on purpose (the fixture then does not count its death as a failure)."""
    node.stopped = True
    os.kill(node.pid, signal.SIGKILL)
    node.proc.wait(5)


def fake_peer_data_sender(node, peer_id: str = "Z") -> SenderLink:
    """Pose as peer node ``peer_id`` on ``node``'s inter-router listener and open only a data link
    (capability ``qd.router-data``) toward it: a way to hand the node transfers with router
    annotations of the test's choosing.  No control link: the peer never joins the mesh."""
    cl = Client(f"amqp://127.0.0.1:{inter_router_port(node)}", container_id=peer_id)
    link = cl.session.sender(f"{peer_id}-data-out")
    caps = link.target.capabilities
    caps.put_array(False, Data.SYMBOL)
    caps.enter()
    caps.put_symbol(symbol("qd.router-data"))
    caps.exit()
    w = SenderLink(cl, link)
    cl._links[link.name] = w
    link.open()
    cl._write()
    w.wait_attached()
    return w


# --------------------------------------------------------------------------------------------------
# messages
# --------------------------------------------------------------------------------------------------


def qd_keys(message) -> list[str]:
    """The ``x-opt-qd.*`` keys of a received message's message-annotations."""
    ann = message.annotations or {}
    return [str(k) for k in ann if str(k).startswith(QD_PREFIX)]


def outcome_counts(trackers: Iterable[Tracker]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in trackers:
        key = t.outcome if t.settled else "unsettled"
        counts[key] = counts.get(key, 0) + 1
    return counts


class _GuardedReceiver(ReceiverLink):
    """A ReceiverLink whose delivery handler does not re-enter itself.

    With ``auto_accept`` the helpers' ReceiverLink accepts inside its delivery handler; accepting
    writes, writing processes the next events, which accept again...: one nested call per message
    already received, so a burst of a few hundred messages overflows the stack.  Here a nested
    call returns at once: the outer call's loop over ``link.current`` takes the next deliveries."""

    _in_handler = False

    def _on_delivery(self, d) -> None:
        if self._in_handler:
            return
        self._in_handler = True
        try:
            super()._on_delivery(d)
        finally:
            self._in_handler = False


def receiver(client: Client, address: str | None = None, **kw) -> ReceiverLink:
    """``client.receiver(...)`` whose link can take bursts of any size (see _GuardedReceiver)."""
    r = client.receiver(address, **kw)
    r.__class__ = _GuardedReceiver
    return r


class EchoServer:
    """An RPC server: consumes ``address``, answers each request's ``reply_to`` through an anonymous
    sender (target None) with ``correlation_id`` = the request's id, then accepts the request.
    ``poll()`` must be called while waiting (it is cheap); it returns True."""

    def __init__(self, client: Client, address: str, name: str, credit: int = 10):
        self.name = name
        self.rx: ReceiverLink = receiver(client, address, credit_window=credit, auto_accept=False)
        self.tx: SenderLink = client.sender(None)
        self.replies: list[Tracker] = []
        self._done = 0

    def poll(self) -> bool:
        for rec in self.rx.received[self._done:]:
            m = rec.message
            reply = make_message(f"{self.name}:{m.body}", address=m.reply_to, correlation_id=m.id)
            self.replies.append(self.tx.send(reply))
            rec.accept()
        self._done = len(self.rx.received)
        return True

    @property
    def calls(self) -> int:
        return len(self.rx.received)


# --------------------------------------------------------------------------------------------------
# a TCP proxy that can cut the connections through it (and stop accepting new ones)
# --------------------------------------------------------------------------------------------------


class TcpProxy:
    """Relays every connection made to ``port`` to ``target_port`` on 127.0.0.1.

    ``cut()`` resets every relayed connection and closes the listening socket (new connection
    attempts are refused); ``resume()`` listens on the same port again."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.port = 0
        self.lsock: socket.socket | None = None
        self.pairs: dict[socket.socket, socket.socket] = {}
        self.accepted = 0
        self._lock = threading.Lock()
        self._stop = False
        self._listen()
        self._thread = threading.Thread(target=self._run, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        s.setblocking(False)
        self.port = s.getsockname()[1]
        self.lsock = s

    @staticmethod
    def _reset(s: socket.socket) -> None:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            s.close()
        except OSError:
            pass

    def _drop(self, s: socket.socket) -> None:
        other = self.pairs.pop(s, None)
        if other is not None:
            self.pairs.pop(other, None)
            self._reset(other)
        self._reset(s)

    def _run(self) -> None:
        while not self._stop:
            with self._lock:
                rlist = list(self.pairs)
                if self.lsock is not None:
                    rlist.append(self.lsock)
                if not rlist:
                    r = []
                else:
                    try:
                        r, _, _ = select.select(rlist, [], [], 0.02)
                    except (OSError, ValueError):
                        continue
                for s in r:
                    if s is self.lsock:
                        try:
                            conn, _ = s.accept()
                        except OSError:
                            continue
                        try:
                            up = socket.create_connection(self.target, timeout=2)
                        except OSError:
                            self._reset(conn)
                            continue
                        conn.setblocking(True)
                        up.setblocking(True)
                        for x in (conn, up):
                            x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        self.pairs[conn] = up
                        self.pairs[up] = conn
                        self.accepted += 1
                        continue
                    if s not in self.pairs:
                        continue
                    try:
                        data = s.recv(256 * 1024)
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(s)
                        continue
                    try:
                        self.pairs[s].sendall(data)
                    except OSError:
                        self._drop(s)
            if not rlist:
                time.sleep(0.02)

    def cut(self) -> None:
        with self._lock:
            if self.lsock is not None:
                self.lsock.close()
                self.lsock = None
            for s in list(self.pairs):
                if s in self.pairs:
                    self._drop(s)

    def resume(self) -> None:
        with self._lock:
            if self.lsock is None:
                self._listen()

    def close(self) -> None:
        self.cut()
        self._stop = True
        self._thread.join(2)
