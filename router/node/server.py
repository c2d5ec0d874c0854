"""The node: asyncio event loop, listening sockets, connectors, timers, and the services plugged into it.

One asyncio loop per node (the pika-based broker gateway shares it). Sockets are watched with
`add_reader`; a read pushes the bytes into Proton and runs `_pump` at once, which handles all resulting
events, applies credit decisions and writes every connection that has output. Under load a read brings
many frames, so one pass forwards many messages.

The node knows nothing of its services (management, metrics, broker gateways, telemetry): router.launch
builds them from the config and plugs them in (`services`, `engine.observer`), and they use the node
through its methods (`add_local_connection`, `watch_address`, `consumers_of`, ...).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import resource
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from router.adapter.connection import IO_CHUNK, Connection
from router.adapter.engine import Engine
from router.adapter.pump import pump
from router.adapter.routerlinks import ROUTER_ROLES
from router.addressing import AddressRules, address_key
from router.amqp.codec import FlowEchoDetector
from router.config import ConfigError, ConnectorConfig, ListenerConfig, NodeConfig
from router.forwarding.budget import MemoryBudget, default_limit
from router.forwarding.core import RouterCore
from router.forwarding.readpacing import START_READ, next_read_size
from router.forwarding.readturns import ReadTurns
from router.logs import LogEvery
from router.node.collector import TICK as GC_TICK
from router.node.collector import GcPacer
from router.node.connectors import Connector
from router.node.edges import EdgeUplinks, InteriorEdges
from router.node.histogram import FORWARDING_BOUNDS, Histogram
from router.node.listening import bind_queues, queues_for, somaxconn
from router.node.memory import Trimmer, physical_memory
from router.node.mesh import MeshControl
from router.policy.engine import Policy

MESH_TICK = 0.1       # seconds between runs of the link-state engine's timers (cheap when idle)
# an edge's tables stay small (its clients' addresses): its collections are paced ten times less often, so
# that a thousand idle edges on as many hosts cost next to nothing (issue 31: idle CPU)
EDGE_GC_TICK = 1.0
HEARD_EVERY = 0.01    # seconds: input from a peer tells the control plane it is alive at most this often
REFUSE_GRACE = 5.0    # seconds a connection refused for max_connections gets to read its Close
HANDSHAKE_LOG_INTERVAL = 10.0   # seconds between a listener's lines about handshakes not completed
FD_LOG_INTERVAL = 10.0          # seconds between a listener's lines about connections refused for want of fds
# A reconnect storm (every client of a restarted node dialling at once) must not overflow the kernel's accept
# queue (`listeners[].backlog`, capped by net.core.somaxconn): a dropped SYN waits 1, 3, 7 ... s. So a
# listener's readiness takes up to ACCEPT_BATCH sockets off it at once (an accept() each, O(1)), and they are
# admitted (a Proton transport, a reader: their handshakes) ADMIT_BATCH per loop turn, between the other
# sockets' input, so that clients already up keep their latency while thousands come in.
ACCEPT_BATCH = 4096
ADMIT_BATCH = 64
FD_RESERVE = 64     # file descriptors the node needs beside its connections (logs, peers, management)
# Bulk input (an attach storm, a flood of transfers) must not hold up everyone else: per loop iteration, once
# client reads took `node.read_budget` of CPU time while some were heavy (over `node.heavy_read`), heavy and
# not-cheap connections wait for the next pass (router.forwarding.readturns). Cheap client reads and peers
# are always read at once.

log = logging.getLogger(__name__)


class Service(Protocol):
    """Something that runs beside the node (management agent, metrics, a broker gateway...)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Listener:
    """A bound listening socket: its config, the policy of its connections and how many it has."""

    def __init__(self, config: ListenerConfig, sock: socket.socket, name: str, policy: object) -> None:
        self.config = config
        self.sock = sock            # its (first) listening socket
        self.socks = [sock]         # all of them: one per accept queue (router.node.listening)
        self.name = name            # "host:port" as bound (the real port when 0 was configured)
        self.policy = policy        # router.adapter.policy.ConnectionPolicy
        self.count = 0              # connections accepted and not yet gone
        self.refused = 0            # refused since the limit was last reached (logged once per streak)
        self.url = ""               # amqp(s)://host:port as bound
        self.handshake_timeouts = 0  # connections closed for not completing their handshake in time


class NodeServer:
    """Runs one router node until stopped."""

    def __init__(self, config: NodeConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        rules = AddressRules([(r.prefix, r.distribution) for r in config.address_rules],
                             config.default_distribution)
        self.core = RouterCore(config.node_id, rules, config.link_capacity, policy=Policy(config.policy))
        self.core.tick(time.monotonic())
        self.engine = Engine(self.core, config.node_id, config.idle_timeout)
        self.engine.budget = MemoryBudget(config.memory_limit or default_limit(physical_memory()))
        streams = self.engine.mesh_links.streams
        streams.window, streams.shared_window = config.stream_window, config.stream_window_shared
        self.mesh = MeshControl(config.node_id, config.router_timers, self.engine.mesh_links.send_control,
                                close=self._close_impostor)
        self.connectors = [Connector(cc, loop, self._connector_connected)
                           for cc in (*config.connectors, *config.uplinks)]
        for i, connector in enumerate(self.connectors):
            connector.index = i             # an edge prefers the first of equally cheap uplinks
        # edge mode (router.node.edges): an edge's uplinks replace the link-state protocol; an interior
        # with a `role: edge` listener takes edges
        self.edges: object = None
        links = self.engine.mesh_links
        if config.mode == "edge":
            self.edges = links.edge = EdgeUplinks(self.core, links.send_control)
        else:
            self.engine.mesh = self.mesh
            if any(lc.role == "edge" for lc in config.listeners):
                self.edges = links.edge = InteriorEdges(self.core, self.mesh, links.send_control,
                                                        self._watch_for_edges, links)
        # plugged in by router.launch: started after the listeners, stopped (in reverse) before the
        # connections close; each has start() and stop()
        self.services: list[Service] = []
        self._mesh_handle: asyncio.TimerHandle | None = None
        self.listeners: list[tuple[socket.socket, str]] = []
        self.bound: list[Listener] = []      # the same listeners with their policies and counts
        self._counted: dict[Connection, Listener] = {}   # accepted connections -> their listener
        self._admitting: deque[tuple[Listener, socket.socket, tuple]] = deque()  # accepted, not yet served
        self._admit_scheduled = False
        self.trimmer = Trimmer()        # freed memory back to the system after waves of connections
        self.urls: list[tuple[str, str]] = []
        self._pump_scheduled = False
        self._bulk_handle: asyncio.TimerHandle | None = None   # the next bulk turn (address floods)
        self.heavy_read = config.heavy_read         # a client read taking more CPU than this: heavy
        self.forget_after = config.forget_after     # memos by routing key unused this long go (`_tick`)
        self._forget_at = time.monotonic() + self.forget_after
        # which client reads wait for the next pass (node.read_budget CPU seconds per loop iteration)
        self.read_turns = ReadTurns(config.heavy_read, config.read_budget, self._schedule_pass)
        self.reads_deferred = 0                     # reads put off by the budget (management: readsDeferred)
        self._watchers: dict[str, list[Callable[[], None]]] = {}   # routing key -> watch_address callbacks
        self._tick_handle: asyncio.TimerHandle | None = None
        self.stopped = loop.create_future()
        self.started = time.monotonic()     # uptimes are measured on the core's clock
        # what the services set once started, for each other (management reads the gateways)
        self.gateways: object = None        # router.gateway.Gateways when `brokers:` is configured
        self.management: object = None      # router.management.agent.ManagementAgent
        self.metrics: object = None         # router.management.metrics.MetricsListener with `metrics:`
        # forwarding latency: input read -> every resulting output written, per batch of events
        self.pump_latency = Histogram(FORWARDING_BOUNDS)
        self._took = 0.0                # seconds the last pump took
        # garbage collection paced by the node (router.node.collector): set by router.launch for a node
        # that has its process to itself, None in a process shared with other code (tests)
        self.gc_pacer: GcPacer | None = None
        self._gc_handle: asyncio.TimerHandle | None = None
        # connections closed for not completing header/TLS/SASL/Open within handshake_timeout
        self.handshake_timeouts = 0
        self._handshake_log = LogEvery(log, HANDSHAKE_LOG_INTERVAL, _handshake_line)
        self._fd_log = LogEvery(log, FD_LOG_INTERVAL, _fd_line)
        self.fd_limit = 0       # the process's limit on open files (raised to the hard limit at start)
        self.fd_refused = 0     # connections refused because no file descriptor was left
        self._spare_fd = -1     # held so that a connection can still be accepted (and closed) at the fd limit
        self.last_reload: object = None     # router.node.reconfigure.ReloadResult of the last reload
        self.config_data: object = None     # the YAML data `config` was built from (management edits it)

    def reload(self) -> object:
        """Read the config file again and apply what changed (SIGHUP; router.node.reconfigure)."""
        from router.node.reconfigure import reload

        return reload(self)

    # ---- start / stop -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Bind every listener and start the timers. Raises OSError when a port is taken, ConfigError
        when a TLS or SASL setting cannot be put in force (before anything is bound)."""
        policies = self._policies()
        self.fd_limit = _raise_fd_limit()
        self._check_fd_limit()
        self._spare_fd = os.open(os.devnull, os.O_RDONLY)
        for i, (lc, policy) in enumerate(zip(self.config.listeners, policies, strict=True)):
            self.open_listener(lc, i, policy)
        self._tick()
        if self.config.mode != "edge":      # an edge runs no link-state protocol: no 0.1 s timer either
            self._mesh_tick()
        for connector in self.connectors:
            connector.start()
        for service in self.services:
            service.start()
        if self.gc_pacer is not None:
            self.gc_pacer.start()           # freezes what start-up allocated
            self._gc_tick()

    def _check_fd_limit(self) -> None:
        """Say at start when the open-file limit is below what the listeners may accept: connections
        beyond it are refused (and logged as such), which a reconnect storm would otherwise meet silently."""
        total = sum(lc.max_connections for lc in self.config.listeners)
        if self.fd_limit != resource.RLIM_INFINITY and self.fd_limit < total + FD_RESERVE:
            log.warning("open-file limit %d (raised to the hard limit; `ulimit -Hn`, LimitNOFILE= raise "
                        "it) is below the listeners' max_connections (%d in all) + %d for the node's own "
                        "files: past ~%d connections new ones are accepted and closed at once (logged)",
                        self.fd_limit, total, FD_RESERVE, self.fd_limit - FD_RESERVE)

    # ---- listeners and connectors, also at run time (router.node.reconfigure) -----------------------------
    def open_listener(self, lc: ListenerConfig, index: int, policy: object = None) -> Listener:
        """Bind listener `lc` (listeners[`index`] of the config) and accept on it. Raises OSError naming
        it when its port is taken, ConfigError when its TLS or SASL cannot be put in force."""
        if policy is None:
            policy = self._listener_policy(index, lc)
        cap = somaxconn()
        queues = queues_for(lc.backlog, cap)
        try:
            socks = bind_queues(lc.host, lc.port, lc.backlog, queues)
        except OSError as exc:
            raise OSError(exc.errno, f"listeners[{index}] (role {lc.role}) on {lc.host}:{lc.port}: "
                                     f"{exc.strerror}") from None
        sock = socks[0]
        host, port = sock.getsockname()[:2]
        policy.listener = name = f"{host}:{port}"
        if queues > 1:
            log.info("listener %s: backlog %d in %d accept queues of %d (net.core.somaxconn caps one queue)",
                     name, lc.backlog, queues, cap)
        elif cap is not None and lc.backlog > cap:
            log.warning("listener %s: backlog %d capped to %d by net.core.somaxconn (raise it with "
                        "`sysctl -w net.core.somaxconn=%d`)", name, lc.backlog, cap, lc.backlog)
        listener = Listener(lc, sock, name, policy)
        listener.socks = socks
        for one in socks:
            self.loop.add_reader(one.fileno(), self._accept, listener, one)
        self.listeners += [(one, lc.role) for one in socks]
        self.bound.append(listener)
        scheme = ("wss" if lc.tls is not None else "ws") if lc.websocket else \
            ("amqps" if lc.tls is not None else "amqp")
        listener.url = f"{scheme}://{host}:{port}{lc.websocket_path if lc.websocket else ''}"
        self.urls.append((lc.role, listener.url))
        return listener

    def close_listener(self, listener: Listener) -> int:
        """Stop accepting on `listener` and close its connections (a Close each; their deliveries come
        back RELEASED / MODIFIED as for any lost connection). Returns how many were closed."""
        for sock in listener.socks:
            self.loop.remove_reader(sock.fileno())
            sock.close()
        self.listeners = [(s, r) for s, r in self.listeners if s not in listener.socks]
        self.bound.remove(listener)
        self.urls = [(r, u) for r, u in self.urls if u != listener.url]
        closing = [conn for conn, where in self._counted.items() if where is listener]
        for conn in closing:
            self.close_connection(conn)
        return len(closing)

    def add_connector(self, cc: ConnectorConfig, index: int) -> Connector:
        """Start dialling a new peer (connectors[`index`]). Raises ConfigError for its TLS or SASL."""
        from router.adapter.policy import PolicyError, connector_policy

        connector = Connector(cc, self.loop, self._connector_connected)
        try:
            connector.policy = connector_policy(cc, self.config.idle_timeout)
        except PolicyError as exc:
            raise ConfigError(self.config.source, f"connectors[{index}].{exc.key}", exc.problem) from None
        self.connectors.append(connector)
        connector.start()
        return connector

    def remove_connector(self, connector: Connector) -> None:
        """Stop dialling `connector`'s peer and close its connection (if up)."""
        connector.stop()
        self.connectors.remove(connector)
        if connector.conn is not None:
            self.close_connection(connector.conn)

    def close_connection(self, conn: Connection) -> None:
        """Close `conn` cleanly now; drop it if its peer has not answered within REFUSE_GRACE s."""
        if conn.alive:
            self.engine.close(conn)
            self._wake(conn)
            self.loop.call_later(REFUSE_GRACE, self._drop, conn)

    def stop(self) -> None:
        """Stop the services, close listeners and every connection; resolves `stopped`."""
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:
                log.exception("internal error stopping %s", type(service).__name__)
        for sock, _role in self.listeners:
            self.loop.remove_reader(sock.fileno())
            sock.close()
        self.listeners = []
        while self._admitting:
            self._admitting.popleft()[1].close()
        if self._spare_fd >= 0:
            os.close(self._spare_fd)
            self._spare_fd = -1
        for connector in self.connectors:
            connector.stop()
        if self._mesh_handle is not None:
            self._mesh_handle.cancel()
        if self._bulk_handle is not None:
            self._bulk_handle.cancel()
        for conn in list(self.engine.conns.values()):
            self.engine.close(conn)         # say goodbye properly so peers do not see an abort
            self._close_socket(conn)
            self.engine.kill(conn)
        self._reap()
        self._drain_logs()
        if self.engine.observer is not None:
            self.engine.observer.close()            # writes what is pending
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if self._gc_handle is not None:
            self._gc_handle.cancel()
            self.gc_pacer.stop()
        if not self.stopped.done():
            self.stopped.set_result(None)

    def _drain_logs(self) -> None:
        """Write the counts of repeated events still waiting for their interval's line."""
        self._handshake_log.drain()
        self._fd_log.drain()
        self.engine.attach.failures.drain()
        for listener in self.bound:
            drain = getattr(getattr(listener.policy, "sasl", None), "drain_logs", None)
            if drain is not None:
                drain()

    # ---- in-process clients (management agent, broker gateways) -------------------------------------
    def add_local_connection(self, sock: socket.socket, peer: str) -> Connection:
        """Serve one end of an in-process socketpair exactly like an accepted client socket."""
        sock.setblocking(False)
        conn = self._serve(sock, peer, "normal")
        conn.internal = True
        return conn

    def add_broker_connection(self, sock: socket.socket, peer: str) -> Connection:
        """A broker gateway's in-process connection: its links are `broker` links in telemetry."""
        conn = self.add_local_connection(sock, peer)
        conn.kind = "broker"
        return conn

    def _serve(self, sock: socket.socket, peer: str, role: str, cost: int = 1, client: bool = False,
               policy: object = None) -> Connection:
        """Hand a connected socket to the engine (under its listener's or connector's policy) and watch it."""
        # a client may ask for a FLOW echo (Proton ignores it: the node answers); a peer node never does
        # (Proton sends echo=false), and scanning a peer's reads for it cost a transit hop ~3% per message
        echo = None if role in ROUTER_ROLES else FlowEchoDetector()
        conn = self.engine.add_connection(sock, peer, role, echo, client=client, cost=cost)
        if policy is not None:
            policy.apply(conn)              # TLS, SASL and limits, before the first byte
        self.loop.add_reader(sock.fileno(), self._readable, conn)
        self._schedule()
        return conn

    # ---- sockets ------------------------------------------------------------------------------------------
    def _accept(self, listener: Listener, sock: socket.socket) -> None:
        """Take what one of the listener's accept queues holds (ACCEPT_BATCH at most; the loop calls again
        for the rest) and admit it in turns."""
        admitting = self._admitting
        for _ in range(ACCEPT_BATCH):
            try:
                conn_sock, addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._refuse_without_fd(listener, sock):
                    continue
                log.warning("accept failed: %s", exc)
                break
            admitting.append((listener, conn_sock, addr))
        if admitting and not self._admit_scheduled:
            self._admit_scheduled = True
            self.loop.call_soon(self._admit)

    def _admit(self) -> None:
        """Serve ADMIT_BATCH accepted sockets; the rest on the next loop turn (after its reads)."""
        self._admit_scheduled = False
        admitting = self._admitting
        for listener in self.bound:         # a storm goes on: empty the kernel's queues between turns too
            for sock in listener.socks:
                self._accept(listener, sock)
        for _ in range(min(ADMIT_BATCH, len(admitting))):
            listener, sock, addr = admitting.popleft()
            if listener in self.bound:
                self._admit_one(listener, sock, addr)
            else:
                sock.close()                # its listener was closed meanwhile
        if admitting:
            self._admit_scheduled = True
            self.loop.call_soon(self._admit)

    def _admit_one(self, listener: Listener, sock: socket.socket, addr: tuple) -> None:
        lc = listener.config
        sock.setblocking(False)
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = self._serve(listener.policy.wrap(sock), f"{addr[0]}:{addr[1]}", lc.role, lc.cost,
                           policy=listener.policy)
        if lc.role == "normal":
            conn.read_size = START_READ     # a client's reads are paced (router.forwarding.readpacing)
        if lc.handshake_timeout > 0:
            self.loop.call_later(lc.handshake_timeout, self._handshake_deadline, conn, listener)
        if lc.max_connections is not None and listener.count >= lc.max_connections:
            self._refuse(conn, listener)
        else:
            listener.count += 1
            self._counted[conn] = listener

    def _refuse_without_fd(self, listener: Listener, queue: socket.socket) -> bool:
        """No file descriptor left: accept the waiting connection on the spare one and close it at once
        (rather than leave it in the backlog and the listener readable, which spins the loop); counted,
        logged once per interval. False if there is no spare descriptor to do it with."""
        if self._spare_fd < 0:
            return False
        os.close(self._spare_fd)
        self._spare_fd = -1
        try:
            sock, addr = queue.accept()
        except OSError:
            sock = addr = None
        if sock is not None:
            sock.close()
            self.fd_refused += 1
            self._fd_log.note(listener.name, time.monotonic(), (addr[0], self.fd_limit, self.fd_refused))
        try:
            self._spare_fd = os.open(os.devnull, os.O_RDONLY)
        except OSError:
            pass                # taken meanwhile; tried again by the next refusal's caller
        return sock is not None

    def _refuse(self, conn: Connection, listener: Listener) -> None:
        """Over max_connections: answer the client's Open with a Close saying so, drop it soon after."""
        limit = listener.config.max_connections
        listener.refused += 1
        if listener.refused == 1:
            log.warning("listener %s: max_connections (%d) reached; refusing new connections",
                        listener.name, limit)
        conn.refuse(b"amqp:resource-limit-exceeded",
                    f"listener {listener.name}: too many connections (max_connections {limit})".encode())
        self.loop.call_later(REFUSE_GRACE, self._drop, conn)

    def _handshake_deadline(self, conn: Connection, listener: Listener) -> None:
        """`handshake_timeout` after the accept: a connection whose Open has not arrived (no protocol
        header, or TLS or SASL not finished) is closed and counted; logged once per interval."""
        if not conn.alive or conn.remote_opened:
            return
        self.handshake_timeouts += 1
        listener.handshake_timeouts += 1
        self._handshake_log.note(listener.name, time.monotonic(),
                                 (conn.peer, listener.config.handshake_timeout, listener.handshake_timeouts))
        self.engine.kill(conn)
        self._reap()

    def _close_impostor(self, conn: Connection) -> None:
        """The control plane found that this inter-router peer claims the id of a node alive elsewhere."""
        if conn.alive:
            conn.close_with(b"amqp:unauthorized-access",
                            b"this node id belongs to another live node (its link-state instance differs)")
            self.engine.dirty.add(conn)
            self._schedule()

    def _drop(self, conn: Connection) -> None:
        if conn.alive:
            self.engine.kill(conn)
            self._reap()

    def _policies(self) -> list:
        """Each listener's policy; sets each connector's. Raises ConfigError naming the setting."""
        from router.adapter.policy import PolicyError, connector_policy

        cfg = self.config
        out = [self._listener_policy(i, lc) for i, lc in enumerate(cfg.listeners)]
        for i, connector in enumerate(self.connectors):
            try:
                connector.policy = connector_policy(connector.config, cfg.idle_timeout)
            except PolicyError as exc:
                raise ConfigError(cfg.source, f"connectors[{i}].{exc.key}", exc.problem) from None
        return out

    def _listener_policy(self, index: int, lc: ListenerConfig) -> object:
        from router.adapter.policy import PolicyError, listener_policy

        try:
            return listener_policy(lc, "", self.config.idle_timeout, self.loop, self._conn_of_transport,
                                   self._wake)
        except PolicyError as exc:
            raise ConfigError(self.config.source, f"listeners[{index}].{exc.key}", exc.problem) from None

    def _conn_of_transport(self, transport: object) -> Connection | None:
        return self.engine.conn_of_transport(transport)

    def _wake(self, conn: Connection) -> None:
        """Something changed a connection outside the pump (a SASL outcome): write it out."""
        if conn.alive:
            self.engine.dirty.add(conn)
            self._schedule()

    def _connector_connected(self, sock: socket.socket, connector: Connector) -> Connection:
        conn = self._serve(sock, connector.target, connector.config.role, connector.config.cost, client=True,
                           policy=connector.policy)
        conn.connector = connector          # set before the loop runs the reader: nothing is read yet
        return conn

    def _readable(self, conn: Connection) -> None:
        if not conn.alive:
            return
        turns = self.read_turns
        peer = conn.router
        # a client's read may wait for the next pass (router.forwarding.readturns); a peer's never does
        if peer is None and turns.defer(conn):
            self.loop.remove_reader(conn.sock.fileno())
            self.reads_deferred += 1
            return
        now = time.monotonic()
        cpu = time.thread_time() if peer is None else 0.0      # peers are never heavy: no clock for them
        echo = conn.read(None if peer is not None else turns.read_limit())
        if peer is not None and now >= peer.heard_due:     # a peer sending anything is alive (HELLO or not)
            peer.heard_due = now + HEARD_EVERY
            if conn.role == "inter-router":
                self.mesh.heard(conn)
        if echo:
            self.engine.answer_echo(conn)
        if conn.input_closed:
            self.engine.end_of_input(conn)
        self.engine.dirty.add(conn)
        # Pump at once rather than on the next loop iteration: it saves a select() round per
        # request (RPC p50 95 µs instead of ~165 µs here) and reads stay large under load.
        self._pump(now)
        # the read's and the pump's time; CPU time, since on a busy machine the wall clock also counts the
        # time the process waited for a core (that made an RPC server's connection "heavy")
        if peer is not None:
            return
        cpu = time.thread_time() - cpu if turns.measure(self._took) else 0.0
        if turns.read(conn, cpu):
            conn.read_size = next_read_size(conn.read_size, conn.last_read, cpu, self.heavy_read, IO_CHUNK)
        elif conn.last_read >= conn.read_size < IO_CHUNK:     # a cheap full read: the next one larger
            conn.read_size = next_read_size(conn.read_size, conn.last_read, 0.0, self.heavy_read, IO_CHUNK)

    def _schedule_pass(self) -> None:
        """The read turns' next pass: a timer, so that it runs after the next iteration's fresh input
        (asyncio runs due timers after the I/O callbacks)."""
        self.loop.call_later(0, self._new_pass)

    def _new_pass(self) -> None:
        """A pass of the read turns: deferred connections are read, in order, while the budget lasts."""
        turns = self.read_turns
        turns.start_pass()
        while (conn := turns.next_deferred()) is not None:
            if conn.alive:
                self.loop.add_reader(conn.sock.fileno(), self._readable, conn)
                self._readable(conn)
        turns.end_pass()

    def _writable(self, conn: Connection) -> None:
        if conn.alive:
            self.engine.dirty.add(conn)
        self._schedule()

    def _schedule(self) -> None:
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self.loop.call_soon(self._pump)

    def _schedule_bulk(self) -> None:
        """Pump again when the next bulk turn is due (at once, after other sockets' input, if it is)."""
        delay = self.engine.mesh_links.bulk_due_in()
        if delay <= 0:
            self._schedule()
        elif self._bulk_handle is None:
            self._bulk_handle = self.loop.call_later(delay, self._bulk_pump)

    def _bulk_pump(self) -> None:
        self._bulk_handle = None
        self._pump()

    def _pump(self, now: float | None = None) -> None:
        """Handle all Proton events, apply credit, write output; once per loop iteration. `now`: when the
        input that led to it was read (its decoding, in Proton, counts in the pass's time)."""
        self._pump_scheduled = False
        engine = self.engine
        if now is None:
            now = time.monotonic()              # one clock read per batch: in-flight stamps, latency
        engine.core.tick(now)
        if engine.observer is not None:
            engine.observer.tick(now)
        try:
            pump(engine, self._write_interest)
        except Exception:                    # a bug must not take the whole node down silently
            log.exception("internal error while processing events")
        self._reap()
        if self._watchers:
            self._notify_watchers()
        if engine.mesh_links.route_backlog:  # more route updates: in the next bulk turn
            self._schedule_bulk()
        self._took = took = time.monotonic() - now
        self.pump_latency.observe(took)         # its sum: the seconds spent working (the GC pacer's load)

    # ---- address watches (the broker gateway follows its addresses' consumers) --------------------------
    def watch_address(self, address: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` after every pump in which the consumers of `address` (local or remote)
        changed; returns the function that stops it."""
        key = address_key(address, self.config.node_id)
        self.core.watch(key)
        self._watchers.setdefault(key, []).append(callback)

        def unwatch() -> None:
            callbacks = self._watchers.get(key)
            if callbacks and callback in callbacks:
                callbacks.remove(callback)
                self.core.unwatch(key)
                if not callbacks:
                    del self._watchers[key]
        return unwatch

    def _watch_for_edges(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        """`watch_address` for an interior's edges: the change is evaluated in the next pump."""
        def changed() -> None:
            callback()
            self._schedule()
        return self.watch_address(key, changed)

    def consumers_of(self, address: str, exclude_conn: object = None) -> int:
        """Consumers of `address` in the mesh: local ones not on `exclude_conn`, plus remote nodes."""
        return self.core.consumers_of(address_key(address, self.config.node_id), exclude_conn)

    def _notify_watchers(self) -> None:
        for key in self.core.take_watched_changes():
            for callback in list(self._watchers.get(key, ())):
                try:
                    callback()
                except Exception:
                    log.exception("internal error in a watcher of %s", key)

    def _write_interest(self, conn: Connection, on: bool) -> None:
        if on:
            self.loop.add_writer(conn.sock.fileno(), self._writable, conn)
        else:
            self.loop.remove_writer(conn.sock.fileno())

    def _close_socket(self, conn: Connection) -> None:
        try:
            fd = conn.sock.fileno()
            if fd >= 0:
                self.loop.remove_reader(fd)
                self.loop.remove_writer(fd)
        except (ValueError, OSError):
            pass
        conn.sock.close()

    def _reap(self) -> None:
        for conn in self.engine.take_dead():
            self._close_socket(conn)
            conn.free()
            self.trimmer.freed_connection()
            listener = self._counted.pop(conn, None)
            if listener is not None:
                listener.count -= 1
                if listener.refused and listener.count < listener.config.max_connections:
                    log.info("listener %s: accepting connections again (%d refused)", listener.name,
                             listener.refused)
                    listener.refused = 0
            if conn.connector is not None and self.listeners:   # not while stopping
                conn.connector.lost()

    # ---- timers -------------------------------------------------------------------------------------------
    def _tick(self) -> None:
        """Drive Proton's idle-timeout processing (heartbeats out, silent peers dropped)."""
        now = time.monotonic()
        self.engine.tick(int(now * 1000))
        if now >= self._forget_at:          # memos by routing key not used for node.forget_after
            self.engine.deliveries.forget_unused()
            self._forget_at = now + self.forget_after
        self._handshake_log.flush(now)
        if self.trimmer.maybe_trim() and self.gc_pacer is not None:
            self.gc_pacer.connections_freed()
        self._fd_log.flush(now)
        if self._spare_fd < 0 and self.listeners:
            try:
                self._spare_fd = os.open(os.devnull, os.O_RDONLY)
            except OSError:
                pass
        self._schedule()
        timeout = self._shortest_idle_timeout()
        interval = min(1.0, timeout / 4) if timeout > 0 else 1.0
        self._tick_handle = self.loop.call_later(interval, self._tick)

    def _shortest_idle_timeout(self) -> float:
        """The smallest idle timeout in force (node default, listeners, connectors, uplinks), 0 if none."""
        timeouts = [self.config.idle_timeout] + [c.idle_timeout for c in (*self.config.listeners,
                                                                           *self.config.connectors,
                                                                           *self.config.uplinks)
                                                 if c.idle_timeout is not None]
        return min((t for t in timeouts if t > 0), default=0.0)

    def _mesh_tick(self) -> None:
        """Run the link-state engine's timers (HELLO, RA, expiries, path computation)."""
        try:
            self.mesh.tick()
        except Exception:
            log.exception("internal error in the control plane")
        self._schedule()            # the pump gives the core any new routes and applies their credit
        self._mesh_handle = self.loop.call_later(MESH_TICK, self._mesh_tick)

    def _gc_tick(self) -> None:
        """Collect and freeze what survived since the last tick; a full collection when due and calm."""
        try:
            if self.gc_pacer.tick(time.monotonic(), self.pump_latency.sum):
                self.trimmer.trim()             # what the full collection freed goes back to the system
        except Exception:
            log.exception("internal error in the garbage collection pacer")
        self._gc_handle = self.loop.call_later(EDGE_GC_TICK if self.config.mode == "edge" else GC_TICK,
                                               self._gc_tick)

    def log_state(self) -> None:
        """Log the node's table sizes, counters and mesh view as one JSON line (SIGUSR1)."""
        state = self.engine.snapshot()
        state["mesh"] = self.mesh.snapshot()
        if self.edges is not None:
            state["edge"] = self.edges.snapshot()
        if self.gateways is not None:
            state["gateway"] = self.gateways.snapshot()
        if self.gc_pacer is not None:
            state["gc"] = self.gc_pacer.snapshot()
        log.info("state %s", json.dumps(state, sort_keys=True))



def _handshake_line(listener: object, count: int, detail: object) -> tuple:
    peer, timeout, total = detail
    return ("listener %s: closed %d connection(s) that did not complete the protocol header, TLS, SASL and "
            "Open within handshake_timeout (%g s), the last from %s (%d in all)",
            listener, count, timeout, peer, total)


def _fd_line(listener: object, count: int, detail: object) -> tuple:
    host, limit, total = detail
    return ("listener %s: refused %d connection(s) for want of a file descriptor (the process's limit is "
            "%s), the last from %s (%d in all)", listener, count, limit, host, total)


def _raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard one (each connection takes one); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft
