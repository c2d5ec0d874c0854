#!/usr/bin/env python3
"""One side of a large-message transfer with python-qpid-proton, for benchmarks/large_bench.py ``rss``.

    large_client.py send URL ADDRESS SIZE   # one message, a data section of SIZE bytes made chunk by chunk
    large_client.py recv URL ADDRESS SIZE   # prints READY, receives it, hashing chunk by chunk

Neither side holds the message whole: the sender generates 256 KiB chunks while Proton holds under 2 MiB
for output; the receiver hashes what has arrived at every delivery event. Each prints one JSON line with
the byte count, the SHA-256 of the data section's content and the seconds it took.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

from proton.handlers import MessagingHandler
from proton.reactor import Container

CHUNK = 256 * 1024
LIMIT = 2 * 1024 * 1024           # bytes Proton may hold for output before the sender waits
BLOCK = bytes(range(256)) * (CHUNK // 256)
HEADER = 8                        # a data section's descriptor and 32-bit length


def data_section_header(size: int) -> bytes:
    return b"\x00\x53\x75\xb0" + size.to_bytes(4, "big")


class Side(MessagingHandler):
    def __init__(self, role: str, url: str, address: str, size: int) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.role, self.url, self.address, self.size = role, url, address, size
        self.hash = hashlib.sha256()
        self.n = 0                # content bytes sent or received
        self.raw = 0              # bytes received, header included
        self.t0 = time.monotonic()
        self.started = False
        self.done = False

    def on_start(self, event) -> None:
        conn = event.container.connect(self.url, reconnect=False)
        if self.role == "send":
            self.sender = event.container.create_sender(conn, self.address)
        else:
            event.container.create_receiver(conn, self.address).flow(1)
            print("READY", flush=True)

    def on_sendable(self, event) -> None:
        self.pump(event.container)

    def on_timer_task(self, event) -> None:
        self.pump(event.container)

    def pump(self, container) -> None:
        s = self.sender
        if self.done:
            return
        if not self.started:
            if s.credit <= 0:
                return
            self.started = True
            s.delivery(b"big")
            s.send(data_section_header(self.size))
        while self.n < self.size:
            if s.session.outgoing_bytes + s.transport.pending() > LIMIT:
                container.schedule(0.001, self)
                return
            piece = BLOCK[:min(CHUNK, self.size - self.n)]
            self.hash.update(piece)
            s.send(piece)
            self.n += len(piece)
        s.advance()
        self.done = True

    def report(self, event, **what) -> None:
        print(json.dumps({**what, "sha256": self.hash.hexdigest(), "s": time.monotonic() - self.t0}),
              flush=True)
        event.connection.close()

    def on_accepted(self, event) -> None:
        self.report(event, sent=self.n)

    def on_released(self, event) -> None:
        self.report(event, sent=self.n, error="released")

    def on_modified(self, event) -> None:
        self.report(event, sent=self.n, error="modified")

    def on_rejected(self, event) -> None:
        self.report(event, sent=self.n, error="rejected")

    def on_delivery(self, event) -> None:
        if self.role != "recv":
            return
        d, link = event.delivery, event.link
        while d.pending > 0:
            chunk = link.recv(min(d.pending, CHUNK))
            skip = max(0, HEADER - self.raw)
            self.raw += len(chunk)
            self.hash.update(chunk[skip:])
            self.n += max(0, len(chunk) - skip)
        if not d.partial:
            d.update(d.ACCEPTED)
            d.settle()
            link.advance()
            self.report(event, received=self.n)


def main(argv: list[str]) -> int:
    role, url, address, size = argv[1], argv[2], argv[3], int(argv[4])
    Container(Side(role, url, address, size)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
