"""The python-qpid-proton test client: a real Proton engine over a socket, driven by the test.

:class:`Client` is a ``proton.Connection`` + ``proton.Transport`` over one TCP socket, single threaded:
nothing happens until the test pumps (every wait of :mod:`tests.support.waiting` does), so a test can
read link credit, delivery states and received messages directly and deterministically.
:class:`SenderLink` sends and keeps a :class:`Tracker` per delivery; :class:`ReceiverLink` keeps every
:class:`Received` message and settles it as the test decides (or accepts it at once).

Every wait has a timeout (``DEFAULT_TIMEOUT`` at most), so nothing can hang.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from proton import (
    Collector,
    Condition,
    Connection,
    Data,
    Delivery,
    Endpoint,
    Event,
    Link,
    Message,
    Transport,
    TransportException,
    symbol,
)

from router.adapter.pnbuffers import BUSY_BUFFER, grow_input, grow_output
from tests.support.ports import inter_router_port
from tests.support.waiting import DEFAULT_TIMEOUT, add_client, wait_for

READ_CHUNK = 256 * 1024

ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED
RELEASED = Delivery.RELEASED
MODIFIED = Delivery.MODIFIED
OUTCOME_NAMES = {ACCEPTED: "ACCEPTED", REJECTED: "REJECTED", RELEASED: "RELEASED", MODIFIED: "MODIFIED"}

DYNAMIC_ADDRESS_RE = r"amqp:/_topo/0/{node}/temp\.[A-Za-z0-9+_]{{15}}"


def outcome_name(state: int | None) -> str:
    if state is None or state == 0:
        return "none"
    return OUTCOME_NAMES.get(state, f"state {state}")


def parse_url(url: str) -> tuple[str, int]:
    u = urlparse(url)
    return u.hostname or "127.0.0.1", u.port or 5672


def make_message(body: Any = None, **fields: Any) -> Message:
    """A ``proton.Message`` with the given body and fields (``address``, ``ttl``, ``properties``...)."""
    m = Message(body=body)
    for k, v in fields.items():
        if not hasattr(m, k):
            raise AttributeError(f"proton.Message has no field {k!r}")
        setattr(m, k, v)
    return m


@dataclass
class Tracker:
    """What a producer knows about one of its deliveries."""

    link: SenderLink
    tag: str
    delivery: Delivery
    presettled: bool
    state: int | None = None          # remote outcome (Delivery.ACCEPTED, ...)
    settled: bool = False             # settled by the remote end
    condition: Condition | None = None
    failed: bool = False
    undeliverable: bool = False
    annotations: dict | None = None
    updates: int = 0
    local_settled: bool = False

    @property
    def outcome(self) -> str:
        return outcome_name(self.state)

    @property
    def done(self) -> bool:
        """Settled by the node (the producer knows the final outcome)."""
        return self.settled

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> Tracker:
        wait_for(lambda: self.settled, timeout, f"settlement of delivery {self.tag} on {self.link.name}")
        return self

    def __repr__(self) -> str:  # short, readable in assertion messages
        return f"<Tracker {self.tag} {self.outcome}{' settled' if self.settled else ''}>"


@dataclass
class Received:
    """One complete message received by a consumer."""

    link: ReceiverLink
    delivery: Delivery
    raw: bytes
    presettled: bool
    message: Message | None = field(init=False, repr=False)
    decode_error: str | None = None
    local_state: int | None = None

    def __post_init__(self) -> None:
        self.message = Message()
        try:
            self.message.decode(self.raw)
        except Exception as e:  # a broken message must not stop the pump; tests check decode_error
            self.message = None
            self.decode_error = f"{type(e).__name__}: {e}"

    @property
    def body(self) -> Any:
        if self.message is None:
            raise AssertionError(f"received message could not be decoded: {self.decode_error}")
        return self.message.body

    def _finish(self, state: int) -> None:
        if self.local_state is not None:
            raise AssertionError("delivery already settled")
        self.delivery.update(state)
        self.delivery.settle()
        self.local_state = state
        self.link.client._write()

    def accept(self) -> None:
        self._finish(ACCEPTED)

    def release(self) -> None:
        self._finish(RELEASED)

    def reject(self, name: str | None = None, description: str | None = None,
               info: dict | None = None) -> None:
        if name is not None:
            self.delivery.local.condition = Condition(name, description, info)
        self._finish(REJECTED)

    def modify(self, failed: bool = False, undeliverable: bool = False,
               annotations: dict | None = None) -> None:
        self.delivery.local.failed = failed
        self.delivery.local.undeliverable = undeliverable
        if annotations is not None:
            self.delivery.local.annotations = annotations
        self._finish(MODIFIED)


class _LinkBase:
    def __init__(self, client: Client, link: Link):
        self.client = client
        self.link = link
        self.name = link.name

    @property
    def credit(self) -> int:
        return self.link.credit

    @property
    def remote_active(self) -> bool:
        return bool(self.link.state & Endpoint.REMOTE_ACTIVE)

    @property
    def remote_closed(self) -> bool:
        return bool(self.link.state & Endpoint.REMOTE_CLOSED) or self.client.transport_closed

    @property
    def remote_condition(self) -> Condition | None:
        return self.link.remote_condition

    def wait_attached(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        wait_for(lambda: self.remote_active or self.remote_closed, timeout, f"attach of link {self.name}")

    def close(self, wait: bool = True) -> None:
        self.link.close()
        self.client._write()
        if wait:
            wait_for(lambda: self.remote_closed, DEFAULT_TIMEOUT, f"detach of link {self.name}")

    def detach(self, wait: bool = True) -> None:
        """Detach without closing (AMQP detach closed=false)."""
        self.link.detach()
        self.client._write()
        if wait:
            wait_for(lambda: self.remote_closed, DEFAULT_TIMEOUT, f"detach of link {self.name}")


class SenderLink(_LinkBase):
    """A producer link.  ``auto_drain``: answer the node's drain request as soon as it arrives."""

    def __init__(self, client: Client, link: Link, auto_drain: bool = True):
        super().__init__(client, link)
        self.auto_drain = auto_drain
        self.trackers: dict[str, Tracker] = {}
        self.drain_requests = 0
        self._tags = itertools.count(1)

    def send(self, message: Message | bytes | Any = None, *, settled: bool = False,
             tag: str | None = None, **fields: Any) -> Tracker:
        """Send a message (``proton.Message``, raw encoded bytes, or a body plus message fields).

        The delivery is handed to Proton at once; it goes on the wire when the link has credit."""
        if isinstance(message, (bytes, bytearray, memoryview)):
            data = bytes(message)
        elif isinstance(message, Message):
            data = message.encode()
        else:
            data = make_message(message, **fields).encode()
        tag = tag or f"{self.name}-{next(self._tags)}"
        dlv = self.link.delivery(tag)
        self.link.stream(data)
        self.link.advance()
        tr = Tracker(self, tag, dlv, presettled=settled)
        if settled:
            dlv.settle()
            tr.settled = tr.local_settled = True
        self.trackers[tag] = tr
        self.client._write()
        return tr

    @property
    def unsettled(self) -> list[Tracker]:
        return [t for t in self.trackers.values() if not t.settled]

    @property
    def queued(self) -> int:
        """Deliveries handed to Proton but not yet sent for lack of credit."""
        return self.link.queued

    def wait_credit(self, n: int = 1, timeout: float = DEFAULT_TIMEOUT) -> int:
        wait_for(lambda: self.link.credit >= n, timeout, f"credit >= {n} on sender {self.name} "
                 f"(has {self.link.credit})")
        return self.link.credit

    def _on_flow(self) -> None:
        link = self.link
        if link.drain_mode:
            self.drain_requests += 1
            if self.auto_drain and link.queued == 0:
                link.drained()
                self.client._write()        # put the answer on the wire now, not with the next transfer

    def _on_delivery(self, d: Delivery) -> None:
        tr = self.trackers.get(d.tag)
        if tr is None:
            return
        rs = d.remote_state
        if rs:
            tr.state = rs
            rem = d.remote
            tr.condition = rem.condition
            tr.failed = rem.failed
            tr.undeliverable = rem.undeliverable
            tr.annotations = rem.annotations
            tr.updates += 1
        if d.settled and not tr.settled:
            tr.settled = True
        if tr.settled and not tr.local_settled:
            tr.local_settled = True
            d.settle()


class ReceiverLink(_LinkBase):
    """A consumer link.  With ``auto_accept`` each unsettled delivery is accepted as it arrives;
    otherwise the test decides (``received[i].accept()``...).  ``credit_window`` keeps the link's
    credit topped up to that value (like a Container receiver's prefetch)."""

    def __init__(self, client: Client, link: Link, auto_accept: bool = True,
                 credit_window: int | None = None):
        super().__init__(client, link)
        self.auto_accept = auto_accept
        self.credit_window = credit_window
        self.received: list[Received] = []
        self.aborted = 0
        self._buf = bytearray()

    @property
    def address(self) -> str | None:
        return self.link.remote_source.address

    def flow(self, n: int) -> None:
        self.link.flow(n)
        self.client._write()

    def drain(self, n: int) -> None:
        self.link.drain(n)
        self.client._write()

    def wait_messages(self, n: int, timeout: float = DEFAULT_TIMEOUT) -> list[Received]:
        wait_for(lambda: len(self.received) >= n, timeout,
                 f"{n} messages at receiver {self.name} (got {len(self.received)})")
        return self.received

    @property
    def unsettled(self) -> list[Received]:
        return [r for r in self.received if r.local_state is None and not r.presettled]

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.received]

    def _on_delivery(self, d: Delivery) -> None:
        link = self.link
        while True:
            cur = link.current
            if cur is None:
                break
            if cur.aborted:
                self.aborted += 1
                self._buf = bytearray()
                cur.settle()
                continue
            if not cur.readable:
                break
            while cur.pending > 0:
                chunk = link.recv(cur.pending)
                if not chunk:
                    break
                self._buf += chunk
            if cur.partial:
                break
            data = bytes(self._buf)
            self._buf = bytearray()
            link.advance()
            rec = Received(self, cur, data, presettled=cur.settled)
            self.received.append(rec)
            if rec.presettled:
                cur.settle()
                rec.local_state = cur.remote_state or 0
            elif self.auto_accept:
                rec.accept()
        if self.credit_window is not None:
            want = self.credit_window - link.credit
            if want > 0 and (link.credit <= self.credit_window // 2):
                link.flow(want)


class Client:
    """An AMQP connection driven by the Proton engine; see the module docstring."""

    def __init__(self, url: str, *, sasl: bool = True, idle_timeout: float | None = None,
                 container_id: str | None = None, max_frame_size: int | None = None,
                 wait_open: bool = True, incoming_capacity: int | None = None):
        self.host, self.port = parse_url(url)
        self.conn = Connection()
        self.conn.container = container_id or f"test-{uuid.uuid4().hex[:8]}"
        self.conn.hostname = self.host
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport = Transport()
        if idle_timeout:
            self.transport.idle_timeout = idle_timeout
        if max_frame_size:
            self.transport.max_frame_size = max_frame_size
        if sasl:
            self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.transport.bind(self.conn)
        self.sock = socket.create_connection((self.host, self.port), timeout=DEFAULT_TIMEOUT)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.closed = False            # socket closed by us
        self.transport_closed = False  # the transport saw the end (either side)
        self.eof = False               # the node closed the socket
        self.paused = False            # stop reading input (simulates a stalled client)
        self.recv_budget: int | None = None   # if set: bytes this client may still read
        self.bytes_in = 0
        self.error: str | None = None
        self._want_write = False
        self._processing = False
        self._deadline = 0.0
        self._links: dict[str, SenderLink | ReceiverLink] = {}
        self._names = itertools.count(1)
        self.conn.open()
        self.session = self.conn.session()
        if incoming_capacity is not None:
            self.session.incoming_capacity = incoming_capacity
        self.session.open()
        add_client(self)
        self._write()
        if wait_open:
            wait_for(lambda: self.remote_open or self.transport_closed, DEFAULT_TIMEOUT, "connection open")
            if not self.remote_open:
                raise AssertionError(f"connection to {url} not opened: {self.error or self.remote_condition}")

    # ---- remote connection info
    @property
    def remote_open(self) -> bool:
        return bool(self.conn.state & Endpoint.REMOTE_ACTIVE)

    @property
    def remote_container(self) -> str | None:
        return self.conn.remote_container

    @property
    def remote_properties(self) -> dict | None:
        return self.conn.remote_properties

    @property
    def remote_offered_capabilities(self) -> list:
        caps = self.conn.remote_offered_capabilities
        return list(caps) if caps else []

    @property
    def remote_condition(self) -> Condition | None:
        return self.conn.remote_condition

    # ---- links
    def _name(self, kind: str) -> str:
        return f"{self.conn.container}-{kind}-{next(self._names)}"

    def sender(self, address: str | None, *, name: str | None = None, auto_drain: bool = True,
               wait: bool = True) -> SenderLink:
        """A sender link targeted at ``address`` (``None``: anonymous relay, null target address)."""
        link = self.session.sender(name or self._name("snd"))
        if address is not None:
            link.target.address = address
            link.source.address = address
        w = SenderLink(self, link, auto_drain=auto_drain)
        self._links[link.name] = w
        link.open()
        self._write()
        if wait:
            w.wait_attached()
        return w

    def receiver(self, address: str | None = None, *, credit: int = 10, dynamic: bool = False,
                 auto_accept: bool = True, credit_window: int | None = None, name: str | None = None,
                 wait: bool = True) -> ReceiverLink:
        """A receiver link on source ``address`` (or a dynamic source) granting ``credit``."""
        link = self.session.receiver(name or self._name("rcv"))
        if dynamic:
            link.source.dynamic = True
        elif address is not None:
            link.source.address = address
            link.target.address = address
        w = ReceiverLink(self, link, auto_accept=auto_accept, credit_window=credit_window)
        self._links[link.name] = w
        link.open()
        if credit:
            link.flow(credit)
        self._write()
        if wait:
            w.wait_attached()
        return w

    # ---- lifecycle
    def begin_close(self) -> None:
        if self.closed:
            return
        if not self.transport_closed:
            self.conn.close()
            self._write()

    def close(self, timeout: float = 5.0) -> None:
        """Close the connection politely and wait until the node has answered."""
        self.begin_close()
        try:
            wait_for(lambda: self.transport_closed or self.closed, timeout, "connection close")
        finally:
            self.abort()

    def abort(self) -> None:
        """Drop the TCP connection without any AMQP goodbye."""
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def disconnect(self) -> None:
        """Vanish: reset the TCP connection (SO_LINGER 0) as a crashing client would."""
        if not self.closed:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            self.abort()

    # ---- I/O, called by pump()
    def _may_read(self) -> bool:
        if self.closed or self.eof or self.paused:
            return False
        return self.recv_budget is None or self.recv_budget > 0

    def _read(self) -> None:
        for _ in range(16):              # drain what the socket has, up to a few MB per round
            if not self._read_once():
                return

    def _read_once(self) -> bool:
        """One recv into the transport; True if more may be waiting."""
        if not self._may_read():
            return False
        try:
            cap = self.transport.capacity()
        except TransportException as e:
            self.error = str(e)
            cap = -1
        if cap < 0:
            self.eof = True
            return False
        if cap == 0:
            return False
        n = min(cap, READ_CHUNK)
        if self.recv_budget is not None:
            n = min(n, self.recv_budget)
        try:
            data = self.sock.recv(n)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            self.error = str(e)
            data = b""
        if not data:
            self.eof = True
            try:
                self.transport.close_tail()
            except TransportException:
                pass
            return False
        self.bytes_in += len(data)
        if len(data) == cap < BUSY_BUFFER:    # as the node does: a busy connection's buffer is larger
            grow_input(self.transport._impl)
        if self.recv_budget is not None:
            self.recv_budget -= len(data)
        try:
            self.transport.push(data)
        except TransportException as e:
            self.error = str(e)
            return False
        return len(data) == n

    def _write(self) -> None:
        if self.closed:
            return
        self._process()
        t = self.transport
        while True:
            try:
                p = t.pending()
            except TransportException as e:
                self.error = str(e)
                p = -1
            if 0 < p < BUSY_BUFFER and not p & (p - 1):   # maybe a full output buffer: let it grow
                p = grow_output(t._impl, p)
            if p <= 0:
                self._want_write = False
                return
            data = t.peek(min(p, READ_CHUNK))
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                self._want_write = True
                return
            except OSError as e:
                self.error = str(e)
                t.close_head()
                self._want_write = False
                return
            t.pop(n)
            if n < len(data):
                self._want_write = True
                return

    def _tick(self, now: float) -> None:
        if self.closed:
            return
        try:
            self._deadline = self.transport.tick(now)
        except TransportException as e:
            self.error = str(e)

    def _check_closed(self) -> None:
        if self.closed:
            return
        if self.transport_closed or (self.eof and self.transport.closed):
            self.transport_closed = True
            self.abort()

    def _process(self) -> None:
        """Handle pending events once. Handlers may write (accept, drained...), which calls this
        again: the nested call returns at once and the outer loop handles what the write added, so
        no event is handled twice and a burst of messages does not recurse."""
        if self._processing:
            return
        self._processing = True
        try:
            self._process_events()
        finally:
            self._processing = False

    def _process_events(self) -> None:
        coll = self.collector
        while True:
            ev = coll.peek()
            if ev is None:
                return
            t = ev.type
            if t == Event.DELIVERY:
                d = ev.delivery
                w = self._links.get(d.link.name)
                if w is not None:
                    w._on_delivery(d)
            elif t == Event.LINK_FLOW:
                w = self._links.get(ev.link.name)
                if isinstance(w, SenderLink):
                    w._on_flow()
            elif t == Event.LINK_REMOTE_CLOSE or t == Event.LINK_REMOTE_DETACH:
                link = ev.link
                if link.state & Endpoint.LOCAL_ACTIVE:
                    link.close()
            elif t == Event.SESSION_REMOTE_CLOSE:
                s = ev.session
                if s.state & Endpoint.LOCAL_ACTIVE:
                    s.close()
            elif t == Event.CONNECTION_REMOTE_CLOSE:
                if self.conn.state & Endpoint.LOCAL_ACTIVE:
                    self.conn.close()
            elif t == Event.TRANSPORT_ERROR:
                cond = ev.transport.condition
                self.error = f"{cond.name}: {cond.description}" if cond else "transport error"
            elif t == Event.TRANSPORT_CLOSED:
                self.transport_closed = True
            coll.pop()


def at_most_once_receiver(client: Client, address: str, credit: int = 10) -> ReceiverLink:
    """A receiver link that asks the node to send everything settled (snd-settle-mode settled)."""
    link = client.session.receiver(client._name("rcv"))
    link.source.address = address
    link.target.address = address
    link.snd_settle_mode = Link.SND_SETTLED
    w = ReceiverLink(client, link, auto_accept=False)
    client._links[link.name] = w
    link.open()
    link.flow(credit)
    client._write()
    w.wait_attached()
    return w


def fake_peer_data_sender(node: Any, peer_id: str = "Z") -> SenderLink:
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


def random_bytes(n: int) -> bytes:
    return os.urandom(n)


def symbols(d: dict) -> dict:
    """Turn str keys into AMQP symbols (annotations, disposition info)."""
    return {symbol(k) if isinstance(k, str) else k: v for k, v in d.items()}
