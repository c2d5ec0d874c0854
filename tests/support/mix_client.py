"""A mix of message sizes and body kinds sent by python-qpid-proton through the mesh, checked on arrival.

The Python twin of tests/interop/js/mix.js (same SPEC, same protocol, same report), written the way a
user of python-qpid-proton writes a client: a ``Container`` and a ``MessagingHandler``.

    python -m tests.support.mix_client SPEC_JSON     (a file path, or the JSON itself)

Kinds: ``data`` (a data section), ``binary`` / ``string`` / ``map`` (an amqp-value), ``sequence`` (an
amqp-sequence), ``small`` (a short string). Each message carries application property ``seq``; its
payload is derived from (kind, seq, size), so each receiver checks it byte for byte. Prints READY once
every receiver is attached, sends after a line on stdin, then prints one JSON line.

The sender runs in a child process (``--send SPEC``, which prints the sender's half of the report): in
one process, the receivers' small reads (Proton's input capacity, ~16 KiB) paced every write of the
sender, and each write moved the whole of what Proton had queued for output (up to the node's 8 MiB
session window) - a 16 MB message then took minutes in the client, not in the router.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, AtMostOnce, Container, EventInjector

OUTGOING_LIMIT = 1024 * 1024         # bytes Proton may hold for output before the sender waits
CHUNK = 256 * 1024                   # bytes of a message handed to Proton at a time


def fill(seq: int) -> int:
    return (seq * 7 + 1) & 0xFF


def letter(seq: int) -> str:
    return chr(97 + seq % 26)


def make(kind: str, seq: int, size: int) -> Message:
    """The message of `kind` number `seq` with a payload of `size` bytes."""
    blob = bytes([fill(seq)]) * size
    inferred = kind in ("data", "sequence")
    body: Any = {
        "data": blob, "binary": blob, "string": letter(seq) * size,
        "map": {"seq": seq, "blob": blob}, "sequence": [seq, blob], "small": f"small #{seq}",
    }[kind]
    m = Message(body=body, inferred=inferred)
    m.properties = {"seq": seq, "kind": kind, "size": size}
    return m


def fitted(kind: str, seq: int, m: dict) -> int:
    """The payload size of message `seq` (its `encoded` size fitted, when given)."""
    if "encoded" not in m:
        return int(m.get("size", 0))
    target = int(m["encoded"])
    size = max(0, target - 200)
    for _ in range(8):
        got = len(make(kind, seq, size).encode())
        if got == target:
            return size
        size = max(0, size + target - got)
    raise ValueError(f"cannot fit {kind} to {target} encoded bytes")


def _plain(value: Any) -> Any:
    """A decoded value with binaries as bytes (Proton may hand out memoryviews)."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def check(msg: Message, kinds: list[str], sizes: list[int]) -> bool:
    """The message arrived as it was sent (kind, section, size and every byte)."""
    props = msg.properties or {}
    seq = props.get("seq")
    if not isinstance(seq, int) or not 0 <= seq < len(kinds):
        return False
    kind, size = kinds[seq], sizes[seq]
    if props.get("kind") != kind or props.get("size") != size:
        return False
    body, blob = _plain(msg.body), bytes([fill(seq)]) * size
    if kind == "data":
        return msg.inferred and isinstance(body, bytes) and body == blob
    if kind == "binary":
        return not msg.inferred and isinstance(body, bytes) and body == blob
    if kind == "string":
        return body == letter(seq) * size
    if kind == "map":
        return isinstance(body, dict) and body.get("seq") == seq and body.get("blob") == blob
    if kind == "sequence":
        return msg.inferred and isinstance(body, list) and body == [seq, blob]
    return body == f"small #{seq}"


class Mix(MessagingHandler):
    """One side of the mix: the receivers (`role` "recv") or the sender ("send")."""

    def __init__(self, spec: dict, role: str) -> None:
        super().__init__(prefetch=0, auto_accept=True)
        self.spec = spec
        self.role = role
        self.kinds = [m["kind"] for m in spec["messages"]]
        self.sizes = [fitted(m["kind"], i, m) for i, m in enumerate(spec["messages"])]
        self.n = len(self.kinds)
        self.presettled = bool(spec.get("presettled"))
        self.receivers: list[dict] = []
        self.by_link: dict[object, dict] = {}
        self.outcomes = {"accepted": 0, "released": 0, "modified": 0, "rejected": 0}
        self.released_seqs: list[int] = []
        self.seq_of: dict[object, int] = {}     # our deliveries -> their seq
        self.sent = 0
        self.current: list | None = None         # the message being sent: [delivery, bytes, offset]
        self.waiting = False                     # a timer will call pump again
        self.closing = False                     # the sender is done and closes its connection
        self.opened = 0
        self.sender = None
        self.container = None
        self.injector = None
        self.child: subprocess.Popen | None = None
        self.report: dict | None = None
        self.t0 = time.monotonic()

    def on_start(self, event) -> None:
        self.container = event.container
        self.injector = EventInjector()
        event.container.selectable(self.injector)
        event.container.schedule(self.spec.get("timeout_s", 30), self)
        if self.role == "send":
            conn = event.container.connect(self.spec["send"], reconnect=False)
            opts = [AtMostOnce()] if self.presettled else []
            self.sender = event.container.create_sender(conn, self.spec["address"], options=opts)
            return
        for url in self.spec["recv"]:
            conn = event.container.connect(url, reconnect=False)
            link = event.container.create_receiver(conn, self.spec["address"])
            link.flow(self.spec.get("credit", 200))
            r = {"got": 0, "seen": set(), "duplicates": 0, "bad": []}
            self.receivers.append(r)
            self.by_link[link] = r

    def on_timer_task(self, event) -> None:
        self.finish("TIMEOUT")

    def on_link_opened(self, event) -> None:
        if event.link in self.by_link:
            self.opened += 1
            if self.opened == len(self.receivers):
                print("READY", flush=True)
                threading.Thread(target=self._wait_go, daemon=True).start()

    def _wait_go(self) -> None:
        sys.stdin.readline()
        self.injector.trigger(ApplicationEvent("go"))

    def on_go(self, event) -> None:
        """The sender runs in a process of its own (see SENDER_APART)."""
        self.child = subprocess.Popen([sys.executable, "-m", "tests.support.mix_client", "--send",
                                       json.dumps(self.spec)], stdout=subprocess.PIPE, text=True)

    def on_sendable(self, event) -> None:
        if event.link != self.sender:
            return
        self.pump()

    def pump(self) -> None:
        """Send while there is credit, CHUNK bytes at a time while Proton holds less than OUTGOING_LIMIT
        bytes for output; look again shortly when it holds more.

        Proton's transport copies what is left of its output buffer on every socket write, and encodes as
        much as the node's session window allows (8 MiB): a 16 MB message handed over at once made each
        write copy megabytes, and the client, not the router, took minutes (a careful client streams)."""
        sender = self.sender
        transport = sender.transport
        while self.current is not None or (self.sent < self.n and sender.credit > 0):
            if sender.session.outgoing_bytes + transport.pending() > OUTGOING_LIMIT:
                if not self.waiting:            # one timer at a time
                    self.waiting = True
                    self.container.schedule(0.002, _Pump(self, self.pump_again))
                return
            if self.current is None:
                data = make(self.kinds[self.sent], self.sent, self.sizes[self.sent]).encode()
                d = sender.delivery(str(self.sent))
                self.seq_of[d] = self.sent
                self.current = [d, data, 0]
                self.sent += 1
            d, data, at = self.current
            sender.send(data[at:at + CHUNK])
            self.current[2] = at = at + CHUNK
            if at >= len(data):
                sender.advance()
                if self.presettled:
                    d.settle()
                self.current = None
        self.maybe_done()

    def pump_again(self) -> None:
        self.waiting = False
        self.pump()

    def on_message(self, event) -> None:
        r = self.by_link.get(event.link)
        if r is None:
            return
        seq = (event.message.properties or {}).get("seq")
        r["got"] += 1
        if seq in r["seen"]:
            r["duplicates"] += 1
        else:
            r["seen"].add(seq)
        if not check(event.message, self.kinds, self.sizes) and len(r["bad"]) < 50:
            r["bad"].append(seq)
        event.link.flow(1)
        self.maybe_done()

    def _outcome(self, name: str, event) -> None:
        self.outcomes[name] += 1
        seq = self.seq_of.pop(event.delivery, None)
        if name != "accepted" and seq is not None and len(self.released_seqs) < 50:
            self.released_seqs.append(seq)
        self.maybe_done()

    def on_accepted(self, event) -> None:
        self._outcome("accepted", event)

    def on_released(self, event) -> None:
        self._outcome("released", event)

    def on_modified(self, event) -> None:
        self._outcome("modified", event)

    def on_rejected(self, event) -> None:
        self._outcome("rejected", event)

    def maybe_done(self) -> None:
        if self.role == "send":
            if self.sent == self.n and (self.presettled or sum(self.outcomes.values()) == self.n):
                self.finish_when_written()
        elif all(len(r["seen"]) == self.n for r in self.receivers):
            self.finish_when_sender_done()

    def finish_when_written(self) -> None:
        """Finish once Proton holds nothing more to send (pre-settled messages still queued in it would
        be lost with the process)."""
        if self.sender.queued or self.sender.session.outgoing_bytes or self.sender.transport.pending() > 0:
            self.container.schedule(0.01, _Pump(self, self.finish_when_written))
        elif not self.closing:
            self.closing = True     # a clean close: an exit with the node's FLOWs unread would reset the
            self.sender.connection.close()      # socket, and the node would lose what it had not read

    def on_connection_closed(self, event) -> None:
        if self.role == "send" and self.closing:
            self.finish("OK")

    def finish_when_sender_done(self) -> None:
        """Finish once the sender has its outcomes (closing earlier would take our accepts with us: the
        node would release what we had not settled yet)."""
        if self.child is not None and self.child.poll() is None:
            self.container.schedule(0.01, _Pump(self, self.finish_when_sender_done))
        else:
            self.finish("OK")

    def finish(self, status: str) -> None:
        if self.report is not None:
            return
        self.report = {"status": status, "sent": self.sent, "outcomes": self.outcomes,
                       "released_seqs": self.released_seqs[:50], "seconds": time.monotonic() - self.t0}
        if self.role == "recv":
            self.report["receivers"] = [
                {"got": r["got"], "duplicates": r["duplicates"], "bad": r["bad"][:50],
                 "missing": [i for i in range(self.n) if i not in r["seen"]][:50]} for r in self.receivers]
        self.injector.close()
        self.container.stop()

    def merged(self) -> dict:
        """The receivers' report with the sender's (its child process) part."""
        report = dict(self.report)
        sender = None
        if self.child is not None:
            try:
                out, _ = self.child.communicate(timeout=max(1.0, self.spec.get("timeout_s", 30)
                                                           - (time.monotonic() - self.t0)))
                sender = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
            except (subprocess.TimeoutExpired, ValueError):
                self.child.kill()
                self.child.wait()
        if sender is None:
            report.update(status="TIMEOUT" if report["status"] == "OK" else report["status"], sent=0)
            return report
        report.update(sent=sender["sent"], outcomes=sender["outcomes"], released_seqs=sender["released_seqs"])
        if sender["status"] != "OK":
            report["status"] = sender["status"]
        return report


class _Pump:
    """A timer task: try sending (or `then`) again."""

    def __init__(self, mix: Mix, then=None) -> None:
        self.mix = mix
        self.then = then or mix.pump

    def on_timer_task(self, event) -> None:
        if self.mix.report is None:
            self.then()


def main(argv: list[str]) -> int:
    role = "send" if argv[1] == "--send" else "recv"
    arg = argv[-1]
    spec = json.loads(arg if arg.lstrip().startswith("{") else open(arg).read())
    mix = Mix(spec, role)
    Container(mix).run()
    report = mix.report if role == "send" else mix.merged()
    print(json.dumps(report), flush=True)
    return 0 if report["status"] == "OK" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
