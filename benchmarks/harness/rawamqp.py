"""Raw AMQP 1.0 for load the clients cannot make: frames encoded by the node's own codec, a connection's
Open, a storm of receiver ATTACHes over one connection, and a thread that drains what the node sends back
(scale_bench.py's address storm and idle connections)."""

from __future__ import annotations

import selectors
import socket
import threading
from typing import Any

from router.amqp.codec import Described
from router.amqp.encode import UInt, ULong, encode_value

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
OPEN, BEGIN, ATTACH = 0x10, 0x11, 0x12
SOURCE, TARGET = 0x28, 0x29
PER_SESSION = 1000


def frame(code: int, fields: list[Any], channel: int = 0) -> bytes:
    """One AMQP frame holding a performative (encoded by the node's own codec)."""
    body = encode_value(Described(ULong(code), fields))
    return (8 + len(body)).to_bytes(4, "big") + b"\x02\x00" + channel.to_bytes(2, "big") + body


def open_frames(container: str) -> bytes:
    return AMQP_HEADER + frame(OPEN, [container, None, UInt(65536)])


def storm_bytes(addresses: list[str], name: str = "storm") -> tuple[bytes, bytes]:
    """(header, Open and Begins; every ATTACH) for receivers on ``addresses`` over one connection."""
    sessions = (len(addresses) + PER_SESSION - 1) // PER_SESSION
    begin = [None, UInt(0), UInt(65535), UInt(65535), UInt(PER_SESSION)]
    head = open_frames(name) + b"".join(frame(BEGIN, begin, ch) for ch in range(sessions))
    attaches = []
    for i, address in enumerate(addresses):
        channel, handle = divmod(i, PER_SESSION)
        attaches.append(frame(ATTACH, [f"storm-{i}", UInt(handle), True, None, None,
                                       Described(ULong(SOURCE), [address]), Described(ULong(TARGET), [None])],
                              channel))
    return head, b"".join(attaches)


class Drain(threading.Thread):
    """Reads and discards what the node sends on some sockets (so its output never backs up)."""

    def __init__(self, socks: list[socket.socket]) -> None:
        super().__init__(daemon=True)
        self.socks = socks
        self.stop = False

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        for s in self.socks:                # no setblocking(False): another thread may be writing
            sel.register(s, selectors.EVENT_READ)
        while not self.stop:
            for key, _ in sel.select(0.2):
                try:
                    if not key.fileobj.recv(1 << 16, socket.MSG_DONTWAIT):
                        sel.unregister(key.fileobj)
                except (BlockingIOError, OSError):
                    pass
        sel.close()
