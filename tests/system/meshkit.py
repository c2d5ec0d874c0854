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
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from proton import Data, symbol

from tests.integration.helpers import (
    ACCEPTED,
    MODIFIED,
    REJECTED,
    RELEASED,
    Client,
    ReceiverLink,
    SenderLink,
    Tracker,
    WaitTimeout,
    make_message,
    outcome_name,
    pump,
    rss_bytes,
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
          rules=RULES, link_capacity: int = 250, log_level: str = "info", idle_timeout: float | None = None):
    """One node with a client listener (port 0), optionally an inter-router listener, and connectors
    ``(port, cost)``; short control-plane timers as in tests/integration/test_mesh_control.py.
    ``idle_timeout``: the node's AMQP idle timeout (default: node_factory's)."""
    listeners = [{"host": "127.0.0.1", "port": 0, "role": "normal"}]
    if listen:
        listeners.append({"host": "127.0.0.1", "port": 0, "role": "inter-router", "cost": listen_cost})
    extra = {
        "listeners": listeners,
        "connectors": [{"host": "127.0.0.1", "port": port, "cost": cost} for port, cost in connect],
        "router": {"hello_interval": hello, "hello_max_age": hello_max_age or hello * 3,
                   "ra_interval_flux": 1.0},
    }
    more = {} if idle_timeout is None else {"idle_timeout": idle_timeout}
    return node_factory(node_id, rules=rules, link_capacity=link_capacity, log_level=log_level, extra=extra,
                        **more)


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

    def newest() -> dict | None:
        lines = [ln for ln in node.stderr_tail(4000).splitlines() if " state {" in ln]
        if len(lines) <= before:
            return None
        try:                    # a long line may be read while the node is still writing it
            return json.loads(lines[-1].split(" state ", 1)[1])
        except json.JSONDecodeError:
            return None

    return wait_for(newest, what=f"a complete state line in the log of node {node.node_id}")


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


# --------------------------------------------------------------------------------------------------
# robustness helpers (tests/faults, tests/fuzz, tests/netns): an audited stream, RSS sampling, a
# proxy that can blackhole its connections
# --------------------------------------------------------------------------------------------------


class AuditStream:
    """A producer that keeps up to ``window`` deliveries in flight and records every attempt, for the
    message audit of the fault tests: every message was accepted by a consumer or came back to the
    producer RELEASED / MODIFIED / REJECTED; none vanished, none was duplicated by the mesh.

    Message ``mid`` (0, 1, ...) carries the application property ``mid`` and the body
    ``f"{tag}-{mid}"`` (followed by ``pad`` dots). With ``resend`` a RELEASED or MODIFIED attempt is
    sent again (as the router's RPC clients do), so in the end every message is accepted exactly
    once. ``rate`` (msg/s) paces new messages. Call :meth:`poll` while pumping
    (``wait_until(stream.poll_until_done, ...)``)."""

    def __init__(self, sender: SenderLink, receivers: Sequence[ReceiverLink], *, total: int | None = None,
                 window: int = 50, resend: bool = True, rate: float | None = None, tag: str = "m",
                 pad: int = 0):
        self.sender = sender
        self.receivers = list(receivers)
        self.total = total
        self.window = window
        self.resend = resend
        self.rate = rate
        self.tag = tag
        self.pad = "." * pad
        self.sending = True
        self.next_id = 0
        self.attempts = 0
        self.per_id: dict[int, list[int | None]] = {}
        self.pending: dict[str, tuple[int, Tracker]] = {}
        self.to_resend: list[int] = []
        self.modified_without_failed = 0
        self.started = time.monotonic()

    # ---- producing
    def poll(self) -> bool:
        """Collect settled attempts, send what the window and the pace allow; returns True."""
        for tag, (mid, tr) in list(self.pending.items()):
            if tr.settled:
                del self.pending[tag]
                self.per_id[mid].append(tr.state)
                if tr.state == MODIFIED and not tr.failed:
                    self.modified_without_failed += 1
                if self.resend and tr.state in (RELEASED, MODIFIED):
                    self.to_resend.append(mid)
        s = self.sender
        if s.client.closed or s.remote_closed:
            return True
        while len(self.pending) < self.window and s.credit - s.queued > 0:
            if self.to_resend:
                mid = self.to_resend.pop(0)
            elif self.sending and (self.total is None or self.next_id < self.total) and self._pace_ok():
                mid, self.next_id = self.next_id, self.next_id + 1
                self.per_id[mid] = []
            else:
                break
            tr = s.send(make_message(self.body(mid), id=f"{self.tag}-{mid}", properties={"mid": mid}))
            self.attempts += 1
            self.pending[tr.tag] = (mid, tr)
        return True

    def body(self, mid: int) -> str:
        return f"{self.tag}-{mid}{self.pad}"

    def _pace_ok(self) -> bool:
        if self.rate is None:
            return True
        return self.next_id < (time.monotonic() - self.started) * self.rate + 1

    def stop(self) -> None:
        """Send no new messages (resends still go)."""
        self.sending = False

    @property
    def finished(self) -> bool:
        """Nothing in flight, nothing to resend, and every message sent (``total``) or sending stopped."""
        all_sent = not self.sending or (self.total is not None and self.next_id >= self.total)
        return all_sent and not self.pending and not self.to_resend

    def poll_until_done(self) -> bool:
        self.poll()
        return self.finished

    # ---- the audit
    def outcomes(self) -> Counter:
        return Counter(outcome_name(st) for states in self.per_id.values() for st in states)

    def received_ids(self) -> Counter:
        return Counter(rec.message.properties["mid"] for r in self.receivers for rec in r.received
                       if rec.message is not None and (rec.message.properties or {}).get("mid") is not None
                       and rec.body == self.body(rec.message.properties["mid"]))

    def summary(self) -> str:
        return (f"{self.next_id} messages in {self.attempts} attempts, outcomes {dict(self.outcomes())}, "
                f"{len(self.pending)} in flight, {len(self.to_resend)} to resend, "
                f"{sum(self.received_ids().values())} received")

    def audit(self, *, in_order: bool = False, only_accepted: bool = False) -> str:
        """Check the audit (see the class doc); ``in_order``: one consumer got the messages in the order
        sent; ``only_accepted``: no attempt may have failed. Returns a one-line summary."""
        assert not self.pending, f"{len(self.pending)} attempts never settled: {self.summary()}"
        assert self.modified_without_failed == 0, \
            f"{self.modified_without_failed} MODIFIED outcomes without delivery-failed"
        names = {ACCEPTED, RELEASED, MODIFIED, REJECTED}
        odd = {mid: st for mid, st in self.per_id.items() if any(x not in names for x in st)}
        assert not odd, f"attempts settled without an outcome: {dict(list(odd.items())[:10])}"
        got = self.received_ids()
        lost, dup = [], []
        for mid, states in self.per_id.items():
            accepted = states.count(ACCEPTED)
            assert accepted <= 1, f"message {mid} accepted {accepted} times: {states}"
            if self.resend:
                assert accepted == 1 or states[-1] == REJECTED, \
                    f"message {mid} never accepted: {[outcome_name(x) for x in states]}"
            if accepted and not got[mid]:
                lost.append(mid)
            # a consumer may see a message again only after an attempt came back MODIFIED: it was on
            # the wire when a node or connection went, and its acceptance was lost with it
            if got[mid] > accepted + states.count(MODIFIED):
                dup.append((mid, got[mid], [outcome_name(x) for x in states]))
        assert not lost, f"accepted at the producer but never received: {lost[:20]}"
        assert not dup, f"received more often than the producer's outcomes allow: {dup[:10]}"
        unknown = sorted(set(got) - set(self.per_id))
        assert not unknown, f"received messages never sent: {unknown[:10]}"
        if only_accepted:
            bad = {mid: [outcome_name(x) for x in st] for mid, st in self.per_id.items() if st != [ACCEPTED]}
            assert not bad, f"attempts that did not end ACCEPTED at once: {dict(list(bad.items())[:10])}"
        if in_order:
            assert len(self.receivers) == 1
            seq = [rec.message.properties["mid"] for rec in self.receivers[0].received
                   if rec.message is not None]
            assert seq == sorted(seq) and len(seq) == len(set(seq)), \
                f"out of order or repeated at the consumer: first problem near {_first_disorder(seq)}"
        return self.summary()


def _first_disorder(seq: list[int]) -> list[int]:
    for i in range(1, len(seq)):
        if seq[i] <= seq[i - 1]:
            return seq[max(0, i - 3):i + 3]
    return []


class RssSampler:
    """RSS of some processes (node pids), sampled at most every ``interval`` s by :meth:`poll`."""

    def __init__(self, pids: dict[str, int], interval: float = 0.5):
        self.pids = pids
        self.interval = interval
        self.samples: dict[str, list[tuple[float, int]]] = {name: [] for name in pids}
        self._next = 0.0
        self.t0 = time.monotonic()

    def poll(self) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            for name, pid in self.pids.items():
                try:
                    self.samples[name].append((now - self.t0, rss_bytes(pid)))
                except (OSError, RuntimeError):
                    pass
        return True

    def window(self, name: str, start: float, end: float) -> list[int]:
        """The samples of ``name`` taken between fractions ``start`` and ``end`` of the run so far."""
        s = self.samples[name]
        if not s:
            return []
        span = s[-1][0] - s[0][0]
        lo, hi = s[0][0] + start * span, s[0][0] + end * span
        return [v for t, v in s if lo <= t <= hi]


def blackhole(proxy: TcpProxy) -> None:
    """Silently stop relaying on every connection through ``proxy`` (the sockets stay open, nothing
    is closed or reset: the peers only notice by timers, as with a cable pulled). New connections are
    refused until :meth:`TcpProxy.resume`."""
    with proxy._lock:
        if proxy.lsock is not None:
            proxy.lsock.close()
            proxy.lsock = None
        held = getattr(proxy, "held", [])
        held.extend(proxy.pairs)            # keep the sockets open, and out of the relay loop
        proxy.held = held
        proxy.pairs.clear()


def release_blackhole(proxy: TcpProxy) -> None:
    """Reset the connections a :func:`blackhole` held and accept new ones again."""
    with proxy._lock:
        for s in getattr(proxy, "held", []):
            TcpProxy._reset(s)
        proxy.held = []
    proxy.resume()
