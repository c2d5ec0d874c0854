"""Hand-written AMQP frames over a bare TCP connection, for what a well-behaved client cannot do.

:class:`RawConn` stays silent, withholds its session window, sends garbage or frames that break the
protocol, and reads back every frame the node sends (decoded with ``proton.Data``). Each read has a
timeout (``DEFAULT_TIMEOUT`` at most). Raw connections still open at teardown are closed by
:func:`tests.support.waiting.close_all`.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from proton import Data, Described, ubyte, uint, ulong, ushort

from tests.support.clients import parse_url
from tests.support.waiting import DEFAULT_TIMEOUT, WaitTimeout, add_raw, forget_raw

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
        add_raw(self)

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
              next_outgoing_id: int = 0, handle_max: int = 1023) -> Frame:
        self.send_frame(BEGIN, [None, uint(next_outgoing_id), uint(incoming_window),
                                uint(outgoing_window), uint(handle_max)], channel)
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
        forget_raw(self)
