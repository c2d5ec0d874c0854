"""Client helpers for the node integration tests.

Two kinds of clients talk to a node over TCP:

* :class:`Client` drives a real Proton engine (``proton.Connection`` + ``proton.Transport``) over a
  socket, single threaded: nothing happens until the test *pumps*.  :func:`wait_for` pumps every
  open client until a condition holds (or fails the test after a timeout), so a test can read
  link credit, delivery states and received messages directly and deterministically.
* :class:`RawConn` speaks AMQP frames written by hand (encoded with ``proton.Data``), for what a
  well-behaved client cannot do: stay silent, withhold its session window, send garbage or frames
  that break the protocol.

Every wait has a timeout (``DEFAULT_TIMEOUT`` at most), so nothing can hang.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from proton import (
    Collector,
    Condition,
    Connection,
    Data,
    Delivery,
    Described,
    Endpoint,
    Event,
    Link,
    Message,
    Transport,
    TransportException,
    symbol,
    ubyte,
    uint,
    ulong,
    ushort,
)

DEFAULT_TIMEOUT = 10.0
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


class WaitTimeout(AssertionError):
    pass


# --------------------------------------------------------------------------------------------------
# the pump: every open Client is driven from here
# --------------------------------------------------------------------------------------------------

_CLIENTS: list[Client] = []
_RAWS: list[RawConn] = []


def pump(timeout: float = 0.05) -> None:
    """One I/O round over all open clients: wait up to ``timeout`` for input, then process it."""
    live = [c for c in _CLIENTS if not c.closed]
    now = time.monotonic()
    for c in live:
        c._tick(now)
        c._write()
    if not live:
        time.sleep(timeout)
        return
    deadlines = [c._deadline for c in live if c._deadline]
    if deadlines:
        timeout = max(0.0, min(timeout, min(deadlines) - now))
    rlist = [c.sock for c in live if c._may_read()]
    wlist = [c.sock for c in live if c._want_write]
    if rlist or wlist:
        r, w, _ = select.select(rlist, wlist, [], timeout)
    else:
        time.sleep(timeout)
        r, w = [], []
    rset = set(r)
    del w
    now = time.monotonic()
    for c in live:
        if c.sock in rset:
            c._read()
        c._process()
        c._tick(now)
        c._write()
        c._process()
        c._check_closed()


def _describe(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what


def wait_for(pred: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT,
             what: str | Callable[[], str] = "condition") -> Any:
    """Pump all clients until ``pred()`` is truthy; return its value or fail after ``timeout`` s.
    ``what`` (a string, or a callable giving one at failure time) says what was awaited."""
    timeout = min(timeout, DEFAULT_TIMEOUT)
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {_describe(what)}")
        pump(min(0.05, left))


def assert_stays(pred: Callable[[], Any], duration: float,
                 what: str | Callable[[], str] = "condition") -> None:
    """Pump all clients for ``duration`` s and fail as soon as ``pred()`` turns false."""
    deadline = time.monotonic() + duration
    while True:
        if not pred():
            raise AssertionError(f"{_describe(what)} no longer holds")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        pump(min(0.05, left))


def pump_for(duration: float) -> None:
    """Keep every client running (heartbeats, dispositions) for ``duration`` s."""
    assert_stays(lambda: True, duration)


def close_all(timeout: float = 2.0) -> None:
    """Close every client and raw socket still open (fixture teardown)."""
    for r in list(_RAWS):
        r.close()
    _RAWS.clear()
    clients = [c for c in _CLIENTS if not c.closed]
    for c in clients:
        c.begin_close()
    try:
        wait_for(lambda: all(c.closed or c.transport_closed for c in clients), timeout, "clients closed")
    except WaitTimeout:
        pass
    for c in clients:
        c.abort()
    _CLIENTS.clear()


# --------------------------------------------------------------------------------------------------
# Proton engine client
# --------------------------------------------------------------------------------------------------


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
        _CLIENTS.append(self)
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


# --------------------------------------------------------------------------------------------------
# Raw AMQP frames
# --------------------------------------------------------------------------------------------------

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
PERFORMATIVES = {OPEN: "open", BEGIN: "begin", ATTACH: "attach", FLOW: "flow", TRANSFER: "transfer",
                 DISPOSITION: "disposition", DETACH: "detach", END: "end", CLOSE: "close"}
SOURCE, TARGET = 0x28, 0x29
ACCEPTED_OUTCOME, REJECTED_OUTCOME, RELEASED_OUTCOME, MODIFIED_OUTCOME = 0x24, 0x25, 0x26, 0x27


def encode_performative(code: int, fields: Iterable[Any]) -> bytes:
    d = Data()
    d.put_object(Described(ulong(code), list(fields)))
    return d.encode()


def encode_frame(body: bytes, channel: int = 0) -> bytes:
    """An AMQP frame: size, doff=2, type=0 (AMQP), channel, body."""
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def described(code: int, fields: Any) -> Described:
    return Described(ulong(code), fields)


@dataclass
class Frame:
    channel: int
    code: int | None          # performative descriptor, None for an empty (heartbeat) frame
    fields: list
    payload: bytes = b""

    @property
    def name(self) -> str:
        if self.code is None:
            return "empty"
        return PERFORMATIVES.get(self.code, hex(self.code))

    def field(self, i: int, default: Any = None) -> Any:
        return self.fields[i] if i < len(self.fields) else default

    def __repr__(self) -> str:
        return f"<Frame ch={self.channel} {self.name} {self.fields!r}{' +payload' if self.payload else ''}>"


def decode_frame_body(channel: int, body: bytes) -> Frame:
    if not body:
        return Frame(channel, None, [])
    d = Data()
    n = d.decode(body)
    d.rewind()
    d.next()
    obj = d.get_object()
    if not isinstance(obj, Described):
        raise ValueError(f"frame body is not a described performative: {obj!r}")
    fields = obj.value if isinstance(obj.value, list) else [obj.value]
    return Frame(channel, int(obj.descriptor), fields, body[n:])


class ConnectionClosed(AssertionError):
    pass


class RawConn:
    """A bare TCP connection speaking hand-made AMQP frames."""

    def __init__(self, url_or_host: str, port: int | None = None):
        if port is None:
            host, port = parse_url(url_or_host)
        else:
            host = url_or_host
        self.sock = socket.create_connection((host, port), timeout=DEFAULT_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False
        self.header: bytes | None = None
        self.frames: list[Frame] = []       # every frame read so far
        self.delivery_id = 0
        _RAWS.append(self)

    # ---- writing
    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, code: int, fields: Iterable[Any], channel: int = 0, payload: bytes = b"") -> None:
        self.send_bytes(encode_frame(encode_performative(code, fields) + payload, channel))

    def send_empty_frame(self) -> None:
        self.send_bytes(encode_frame(b""))

    def send_header(self) -> None:
        self.send_bytes(AMQP_HEADER)

    def open(self, container_id: str = "raw-client", idle_timeout_ms: int | None = None,
             max_frame_size: int = 65536) -> Frame:
        """Send the protocol header and OPEN, read the node's header and OPEN."""
        self.send_header()
        fields = [container_id, None, uint(max_frame_size), ushort(65535)]
        if idle_timeout_ms is not None:
            fields.append(uint(idle_timeout_ms))
        self.send_frame(OPEN, fields)
        return self.expect(OPEN)

    def begin(self, channel: int = 0, incoming_window: int = 65535, outgoing_window: int = 65535,
              next_outgoing_id: int = 0) -> Frame:
        self.send_frame(BEGIN, [None, uint(next_outgoing_id), uint(incoming_window),
                                uint(outgoing_window), uint(1023)], channel)
        return self.expect(BEGIN)

    def attach(self, name: str, handle: int, role_receiver: bool, *, source: str | None = None,
               target: str | None = None, snd_settle_mode: int | None = None, channel: int = 0,
               wait: bool = True) -> Frame | None:
        """ATTACH a link; role_receiver=False: we send (the node is the receiver)."""
        fields = [name, uint(handle), role_receiver,
                  ubyte(snd_settle_mode) if snd_settle_mode is not None else None,
                  None,
                  described(SOURCE, [source]),
                  described(TARGET, [target]),
                  None, None,
                  None if role_receiver else uint(0)]
        self.send_frame(ATTACH, fields, channel)
        if wait:
            return self.expect(ATTACH, pred=lambda f: f.field(1) == handle)
        return None

    def flow(self, *, handle: int | None = None, next_incoming_id: int | None = 0,
             incoming_window: int = 65535, next_outgoing_id: int = 0, outgoing_window: int = 65535,
             delivery_count: int | None = None, link_credit: int | None = None, drain: bool = False,
             echo: bool = False, channel: int = 0) -> None:
        fields = [uint(next_incoming_id) if next_incoming_id is not None else None,
                  uint(incoming_window), uint(next_outgoing_id), uint(outgoing_window),
                  uint(handle) if handle is not None else None,
                  uint(delivery_count) if delivery_count is not None else None,
                  uint(link_credit) if link_credit is not None else None,
                  None, drain, echo]
        self.send_frame(FLOW, fields, channel)

    def transfer(self, handle: int, payload: bytes, *, tag: bytes | None = None, settled: bool = False,
                 more: bool = False, delivery_id: int | None = None, first: bool = True,
                 channel: int = 0) -> int:
        """One TRANSFER frame.  ``first=False`` sends a continuation frame of the current delivery."""
        if first:
            did = self.delivery_id if delivery_id is None else delivery_id
            self.delivery_id = did + 1
            fields = [uint(handle), uint(did), tag if tag is not None else f"t{did}".encode(),
                      uint(0), settled, more]
        else:
            did = self.delivery_id - 1
            fields = [uint(handle), None, None, None, None, more]
        self.send_frame(TRANSFER, fields, channel, payload)
        return did

    def close_amqp(self) -> None:
        self.send_frame(CLOSE, [])

    # ---- reading
    def _fill(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([self.sock], [], [], left)
        if not r:
            return False
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_frame(self, timeout: float = DEFAULT_TIMEOUT) -> Frame | None:
        """The next frame, or None at EOF.  Raises WaitTimeout when nothing complete arrives in time."""
        deadline = time.monotonic() + min(timeout, DEFAULT_TIMEOUT)
        while True:
            if self.header is None and len(self.buf) >= 8 and self.buf.startswith(b"AMQP"):
                self.header, self.buf = self.buf[:8], self.buf[8:]
                continue
            if self.header is not None and len(self.buf) >= 8:
                size, doff, _ftype, channel = struct.unpack(">IBBH", self.buf[:8])
                if len(self.buf) >= size:
                    body = self.buf[doff * 4:size]
                    self.buf = self.buf[size:]
                    frame = decode_frame_body(channel, body)
                    self.frames.append(frame)
                    return frame
            if self.eof:
                return None
            if not self._fill(deadline):
                if self.eof:
                    continue
                raise WaitTimeout(f"no complete frame within {timeout:.1f}s (buffered {len(self.buf)} bytes)")

    def expect(self, code: int, pred: Callable[[Frame], bool] | None = None,
               timeout: float = DEFAULT_TIMEOUT) -> Frame:
        """Read frames until one with performative ``code`` (and ``pred``) arrives."""
        deadline = time.monotonic() + min(timeout, DEFAULT_TIMEOUT)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"no {PERFORMATIVES.get(code, code)} frame within {timeout:.1f}s; "
                                  f"got {self.frames[-5:]}")
            f = self.read_frame(left)
            if f is None:
                raise ConnectionClosed(f"connection closed while waiting for "
                                       f"{PERFORMATIVES.get(code, code)}; last frames {self.frames[-5:]}")
            if f.code == code and (pred is None or pred(f)):
                return f

    def wait_header(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """Wait for the node's protocol header."""
        deadline = time.monotonic() + min(timeout, DEFAULT_TIMEOUT)
        while len(self.buf) < 8 and self.header is None:
            if not self._fill(deadline):
                raise WaitTimeout(f"no protocol header from the node (eof={self.eof}, got {self.buf!r})")
        if self.header is None:
            self.header, self.buf = self.buf[:8], self.buf[8:]
        return self.header

    def wait_eof(self, timeout: float = DEFAULT_TIMEOUT) -> float:
        """Read (and keep) frames until the node closes the socket; return the seconds waited."""
        start = time.monotonic()
        deadline = start + min(timeout, DEFAULT_TIMEOUT)
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"node did not close the connection within {timeout:.1f}s; "
                                  f"frames {self.frames[-5:]}")
            try:
                self.read_frame(left)
            except WaitTimeout:
                continue
            except ValueError:
                # an undecodable frame: skip the rest, only EOF matters here
                self.buf = b""
        return time.monotonic() - start

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self in _RAWS:
            _RAWS.remove(self)


# --------------------------------------------------------------------------------------------------
# misc
# --------------------------------------------------------------------------------------------------


def send_paced(sender: SenderLink, receivers: list[ReceiverLink], n: int, body_prefix: str = "m",
               timeout: float = DEFAULT_TIMEOUT) -> list[Tracker]:
    """Send ``n`` unsettled messages one at a time: each only after the previous one has reached a
    receiver and, if that receiver settles on its own (auto_accept), after its outcome is back at the
    producer.  Distribution decisions are then taken with all earlier outcomes known."""
    trackers = []
    for i in range(n):
        before = sum(len(r.received) for r in receivers)
        sender.wait_credit(1, timeout)
        tr = sender.send(f"{body_prefix}{i}")
        trackers.append(tr)
        wait_for(lambda b=before: sum(len(r.received) for r in receivers) > b, timeout,
                 f"message {i} at one of the receivers")
        owner = next(r for r in receivers if r.received and r.received[-1].body == f"{body_prefix}{i}")
        if owner.auto_accept:
            tr.wait(timeout)
    return trackers


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS from /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def assert_not_spinning(pid: int, duration: float = 1.0, max_share: float = 0.5) -> None:
    """The process (an idle node) uses less than ``max_share`` of a CPU over ``duration`` s while
    the clients keep being pumped."""
    before = cpu_seconds(pid)
    pump_for(duration)
    used = cpu_seconds(pid) - before
    assert used < max_share * duration, f"node busy: {used:.2f} s CPU in {duration:.1f} s while idle"


def random_bytes(n: int) -> bytes:
    return os.urandom(n)


def symbols(d: dict) -> dict:
    """Turn str keys into AMQP symbols (annotations, disposition info)."""
    return {symbol(k) if isinstance(k, str) else k: v for k, v in d.items()}
