"""A seeded AMQP 1.0 fuzz client over raw TCP (no Proton engine on this side).

    python -m tests.support.amqp_fuzz --seed 42 --frames 100000 \\
        --target normal:127.0.0.1:5672 --target inter-router:127.0.0.1:5673

Each *episode* is one TCP connection to one target carrying one kind of input:

* ``random-bytes``: a stream of random bytes (sometimes after a protocol header);
* ``header``: a protocol header variant (TLS, SASL, 0-9-1, wrong versions, truncated) then frames;
* ``random-frames``: a valid AMQP header, then well-framed performatives with random descriptors and
  fields, some mutated;
* ``sasl``: the SASL header, a SASL init (random or mutated mechanism and response), then an AMQP session;
* ``session`` (client listener): open, begin, attaches (sender, receiver with credit, anonymous relay,
  dynamic source) and then many transfers (single and multi-frame, aborted, pre-settled, mutated
  payloads), flows, dispositions, detaches, random performatives; each frame mutated with a small
  probability (bit flips, truncation, length-field corruption, wrong descriptors, huge sizes...);
* ``router`` (inter-router listener): an inter-router open (a ``fuzz-*`` container id, random cost),
  the four router links, then malformed and well-formed control messages (HELLO, RA, LSR, LSU, MAU, MAR)
  on the control link and messages with random router annotations on the data link, mutated likewise.

An episode goes on until its frame budget is spent or the node closes the connection; then the next
one starts on a new connection. Frames are written in small bursts and whatever the node sends is
read and discarded in between, so the node never blocks on us. The run stops after ``--frames``
frames (counted when written in full) or ``--seconds``. The last line on stdout is a JSON summary.
Exit status 0, or 2 when the node stopped accepting connections (it died).
"""

from __future__ import annotations

import argparse
import json
import random
import select
import socket
import struct
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.support import frame_gen as gen
from tests.support.raw_amqp import AMQP_HEADER, ATTACH, BEGIN, SASL_HEADER, SOURCE, TARGET

FUZZ_PREFIX = "fuzz/"          # the addresses fuzz episodes use (never those of the real traffic)
SEND_TIMEOUT = 2.0


@dataclass
class Target:
    role: str          # "normal" or "inter-router"
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Target:
        role, host, port = text.rsplit(":", 2)
        if role not in ("normal", "inter-router"):
            raise argparse.ArgumentTypeError(f"role must be normal or inter-router, not {role!r}")
        return cls(role, host, int(port))


@dataclass
class Stats:
    connections: int = 0
    frames: int = 0                 # frames (or byte-stream chunks) written in full
    bytes: int = 0
    closed_by_node: int = 0         # episodes cut short because the node closed the connection
    send_timeouts: int = 0          # episodes abandoned because the node stopped reading
    connect_failures: int = 0
    cases: Counter = field(default_factory=Counter)
    frames_by_case: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        return {"connections": self.connections, "frames": self.frames, "bytes": self.bytes,
                "closed_by_node": self.closed_by_node, "send_timeouts": self.send_timeouts,
                "connect_failures": self.connect_failures, "cases": dict(self.cases),
                "frames_by_case": dict(self.frames_by_case)}


class NodeGone(Exception):
    """The node refuses connections: it is dead."""


@dataclass
class Wait:
    """Yielded by an episode: read what the node sends until ``count`` performatives ``code`` have
    arrived in all (or ``timeout`` passes), as a client waits for the answer to its attach."""

    code: int
    count: int = 1
    timeout: float = 0.3


class Wire:
    """One raw TCP connection: writes bursts, reads what the node sends (counting its performatives,
    keeping nothing else), notices when it closes."""

    def __init__(self, target: Target, stats: Stats, rng: random.Random) -> None:
        self.stats = stats
        self.rng = rng
        self.sock = socket.create_connection((target.host, target.port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.closed = False       # the node closed (or reset) the connection
        self.stuck = False
        self.seen: Counter = Counter()   # performative code -> how many the node sent
        self._in = b""
        self._parse = True

    def _frames(self, data: bytes) -> None:
        """Count the node's performatives (descriptor 00 53 xx) in the bytes it sent."""
        if not self._parse:
            return
        buf = self._in + data
        while len(buf) >= 8:
            if buf.startswith(b"AMQP"):
                buf = buf[8:]
                continue
            size, doff = struct.unpack_from(">IB", buf)
            if size < 8 or doff < 2 or size > 1 << 24:
                self._parse = False          # not a stream we understand: stop counting
                return
            if len(buf) < size:
                break
            body = buf[doff * 4:size]
            if body[:2] == b"\x00\x53" and len(body) > 2:
                self.seen[body[2]] += 1
            buf = buf[size:]
        self._in = buf

    def _drain(self) -> None:
        while True:
            try:
                data = self.sock.recv(256 * 1024)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.closed = True
                return
            if not data:
                self.closed = True
                return
            self._frames(data)

    def wait(self, w: Wait) -> None:
        deadline = time.monotonic() + w.timeout
        while self.seen[w.code] < w.count and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            select.select([self.sock], [], [], min(left, 0.05))
            self._drain()

    def send(self, frames: list[bytes], case: str) -> int:
        """Write ``frames`` in order; return how many were written in full."""
        done = 0
        for f in frames:
            view = memoryview(f)
            deadline = time.monotonic() + SEND_TIMEOUT
            while view:
                self._drain()
                if self.closed:
                    return done
                try:
                    n = self.sock.send(view)
                    view = view[n:]
                except (BlockingIOError, InterruptedError):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.stuck = True
                        return done
                    select.select([self.sock], [self.sock], [], min(left, 0.05))
                except OSError:
                    self.closed = True
                    return done
            done += 1
            self.stats.frames += 1
            self.stats.bytes += len(f)
            self.stats.frames_by_case[case] += 1
        self._drain()
        return done

    def close(self) -> None:
        try:
            if self.rng.random() < 0.3:      # sometimes vanish with a reset rather than a FIN
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass


# ------------------------------------------------------------------------------------------------
# episodes: each yields bursts (lists of frames); the runner stops one when the node closes
# ------------------------------------------------------------------------------------------------

Episode = Iterator[list[bytes] | Wait]


def maybe(rng: random.Random, frame: bytes, p: float) -> bytes:
    return gen.mutate(rng, frame) if rng.random() < p else frame


def ep_random_bytes(rng: random.Random, ctx: dict) -> Episode:
    prefix = rng.choice((b"", b"", AMQP_HEADER, SASL_HEADER, b"AMQP"))
    yield [prefix + rng.randbytes(rng.randint(1, 4096))]
    for _ in range(rng.randint(0, 8)):
        yield [rng.randbytes(rng.randint(1, 4096))]


def ep_header(rng: random.Random, ctx: dict) -> Episode:
    yield [rng.choice(gen.HEADER_VARIANTS)]
    yield [gen.open_frame(rng, f"fuzz-{rng.randint(0, 10**6)}"), gen.begin_frame()]
    for _ in range(rng.randint(0, 10)):
        yield [gen.random_performative(rng)]


def ep_random_frames(rng: random.Random, ctx: dict) -> Episode:
    yield [AMQP_HEADER]
    if rng.random() < 0.7:
        yield [gen.open_frame(rng, f"fuzz-{rng.randint(0, 10**6)}"), gen.begin_frame()]
    for _ in range(rng.randint(1, 60)):
        yield [maybe(rng, gen.random_performative(rng, channel=rng.choice((0, 0, None))), 0.2)]


def ep_sasl(rng: random.Random, ctx: dict) -> Episode:
    yield [SASL_HEADER]
    yield [maybe(rng, gen.sasl_init(rng), 0.3)]
    yield Wait(gen.SASL_OUTCOME)
    if rng.random() < 0.3:
        yield [gen.random_performative(rng)]
    if rng.random() < 0.6:
        yield from ep_session(rng, ctx, header=True)


def _addr(rng: random.Random) -> str:
    return FUZZ_PREFIX + rng.choice(("a", "b", "c", gen.rstr(rng, 8)))


def ep_session(rng: random.Random, ctx: dict, header: bool = True) -> Episode:
    """A client session: links to fuzz addresses, then transfers and control frames, some mutated."""
    p = ctx["mutation_rate"]
    if header:
        yield [AMQP_HEADER]
    idle_ms = rng.choice((None, 0, 500))
    yield [maybe(rng, gen.open_frame(rng, f"fuzz-{rng.randint(0, 10**6)}", idle_ms=idle_ms), p),
           maybe(rng, gen.begin_frame(), p)]
    yield Wait(BEGIN)
    addr = _addr(rng)
    yield [gen.attach_frame("rx", 0, True, gen.terminus(SOURCE, addr), gen.terminus(TARGET, None)),
           gen.flow_frame(0, rng.choice((0, 5, 100))),
           gen.attach_frame("tx", 1, False, gen.terminus(SOURCE, None), gen.terminus(TARGET, addr),
                            snd_settle_mode=rng.choice((None, 0, 1, 2))),
           gen.attach_frame("anon", 2, False, gen.terminus(SOURCE, None), gen.terminus(TARGET, None)),
           gen.attach_frame("dyn", 3, True, gen.terminus(SOURCE, None, dynamic=True),
                            gen.terminus(TARGET, None)),
           gen.flow_frame(3, 10)]
    yield Wait(ATTACH, 4)
    did = 0
    in_multi = False
    for _ in range(rng.randint(5, 400)):
        k = rng.random()
        if in_multi:                        # go on with (or abort) the multi-frame delivery
            last = rng.random() < 0.3
            aborted = last and rng.random() < 0.3
            frame = gen.transfer_frame(1, None, rng.randbytes(rng.randint(0, 3000)), more=not last,
                                       aborted=aborted)
            in_multi = not last
        elif k < 0.45:                      # a whole message to the fuzz address or the relay
            handle = rng.choice((1, 1, 2))
            to = addr if handle == 1 or rng.random() < 0.5 else _addr(rng)
            payload = gen.message(rng, to)
            if rng.random() < 0.3:
                payload = gen.mutate_body(rng, payload)
            frame = gen.transfer_frame(handle, did, payload, settled=rng.random() < 0.3)
            did += 1
        elif k < 0.52:                      # the first frame of a multi-frame delivery
            payload = gen.message(rng, addr)
            frame = gen.transfer_frame(1, did, payload[:rng.randint(0, len(payload))], more=True)
            did += 1
            in_multi = True
        elif k < 0.65:
            frame = gen.flow_frame(rng.choice((0, 1, 2, 3, None, rng.randint(0, 9))),
                                   rng.choice((0, 1, 50, 2**32 - 1)),
                                   delivery_count=rng.randint(0, 2**32 - 1) if rng.random() < 0.2 else 0,
                                   drain=rng.random() < 0.2, echo=rng.random() < 0.2)
        elif k < 0.8:
            first = rng.randint(0, max(0, did + 5)) if rng.random() < 0.9 else rng.randint(0, 2**32 - 1)
            last = first + rng.randint(0, 20) if rng.random() < 0.5 else None
            frame = gen.disposition_frame(rng, first, last, role_receiver=rng.random() < 0.8)
        elif k < 0.86:
            frame = gen.empty_frame()
        elif k < 0.94:
            h = rng.randint(4, 40)
            frame = gen.attach_frame(gen.rstr(rng, 10), h, rng.random() < 0.5,
                                     gen.terminus(SOURCE, rng.choice((None, addr, gen.ustr(rng, 20))),
                                                  dynamic=rng.random() < 0.2),
                                     gen.terminus(TARGET, rng.choice((None, addr, gen.ustr(rng, 20))),
                                                  dynamic=rng.random() < 0.1))
        elif k < 0.95:
            frame = gen.detach_frame(rng.randint(0, 40), closed=rng.random() < 0.7)
        elif k < 0.985:
            frame = gen.random_performative(rng, channel=0)
        elif k < 0.995:
            frame = gen.begin_frame(channel=rng.randint(1, 3))
        else:
            frame = rng.choice((gen.end_frame(), gen.close_frame(), gen.end_frame(rng.randint(0, 5))))
        yield [maybe(rng, frame, p)]
    if rng.random() < 0.5:
        yield [gen.close_frame()]


def ep_router(rng: random.Random, ctx: dict) -> Episode:
    """An inter-router peer: the router links, then control and data traffic, much of it malformed."""
    p = ctx["mutation_rate"]
    me = f"fuzz-{rng.randint(0, 10**6)}"
    if rng.random() < 0.03:
        me = rng.choice((ctx["node_id"], "", gen.ustr(rng, 20)))
    cost = rng.choice((None, 1, 5, 0, -3, 2**31 - 1, "7", 1.5))
    yield [AMQP_HEADER, maybe(rng, gen.open_frame(rng, me, cost=cost), p / 2), gen.begin_frame()]
    yield Wait(BEGIN)
    ctl, data = ["qd.router"], ["qd.router-data"]
    yield [gen.attach_frame(f"qdlink.{me}.ctl.out", 0, False, gen.terminus(SOURCE, None, ctl),
                            gen.terminus(TARGET, None, ctl), snd_settle_mode=1),
           gen.attach_frame(f"qdlink.{me}.ctl.in", 1, True, gen.terminus(SOURCE, None, ctl),
                            gen.terminus(TARGET, None, ctl)),
           gen.attach_frame(f"qdlink.{me}.data.out", 2, False, gen.terminus(SOURCE, None, data),
                            gen.terminus(TARGET, None, data)),
           gen.attach_frame(f"qdlink.{me}.data.in", 3, True, gen.terminus(SOURCE, None, data),
                            gen.terminus(TARGET, None, data)),
           gen.flow_frame(1, 1000), gen.flow_frame(3, 50)]
    yield Wait(ATTACH, 4)
    peers = [ctx["node_id"], me, f"fuzz-{rng.randint(0, 10**6)}"]
    my_instance = rng.randint(0, 2**40)
    did = 0
    for _ in range(rng.randint(5, 400)):
        k = rng.random()
        if k < 0.55:                        # a control message, as the real peers send them
            sender = rng.choice((me, me, me, f"fuzz-{rng.randint(0, 10**6)}", ctx["node_id"]))
            instance = my_instance if sender == me and rng.random() < 0.9 else None
            body = gen.control_message(rng, sender, peers, ctx["node_id"], instance)
            frame = gen.transfer_frame(0, did, body, settled=rng.random() < 0.9)
            did += 1
        elif k < 0.8:                       # a data message with random router annotations
            to = _addr(rng) if rng.random() < 0.8 else f"_topo/0/{rng.choice(peers)}/{gen.rstr(rng, 5)}"
            payload = gen.message(rng, to, router=True)
            if rng.random() < 0.3:
                payload = gen.mutate_body(rng, payload)
            frame = gen.transfer_frame(2, did, payload, settled=rng.random() < 0.2)
            did += 1
        elif k < 0.88:
            frame = gen.flow_frame(rng.choice((0, 1, 2, 3, None)), rng.choice((0, 10, 1000)),
                                   delivery_count=rng.randint(0, 2**32 - 1) if rng.random() < 0.2 else 0,
                                   drain=rng.random() < 0.1, echo=rng.random() < 0.2)
        elif k < 0.95:
            frame = gen.disposition_frame(rng, rng.randint(0, did + 3), None,
                                          role_receiver=rng.random() < 0.8)
        elif k < 0.98:
            frame = gen.random_performative(rng, channel=0)
        else:
            frame = gen.attach_frame(gen.rstr(rng, 8), rng.randint(4, 20), rng.random() < 0.5,
                                     gen.terminus(SOURCE, rng.choice((None, _addr(rng)))),
                                     gen.terminus(TARGET, rng.choice((None, _addr(rng)))))
        yield [maybe(rng, frame, p)]


EPISODES = {
    "normal": (("random-bytes", ep_random_bytes, 1), ("header", ep_header, 1),
               ("random-frames", ep_random_frames, 2), ("sasl", ep_sasl, 1), ("session", ep_session, 6)),
    "inter-router": (("random-bytes", ep_random_bytes, 1), ("header", ep_header, 1),
                     ("random-frames", ep_random_frames, 1), ("router", ep_router, 7)),
}


def run(targets: list[Target], seed: int, frames: int, seconds: float, node_id: str = "A",
        mutation_rate: float = 0.03, log=None, only: tuple[str, ...] = ()) -> Stats:
    """Fuzz ``targets`` until ``frames`` frames were written or ``seconds`` passed."""
    rng = random.Random(seed)
    stats = Stats()
    ctx = {"node_id": node_id, "mutation_rate": mutation_rate}
    deadline = time.monotonic() + seconds
    refused = 0
    next_report = 10_000
    while stats.frames < frames and time.monotonic() < deadline:
        target = rng.choice(targets)
        kinds = [k for k in EPISODES[target.role] if not only or k[0] in only]
        if not kinds:
            continue
        name, fn, _ = rng.choices(kinds, weights=[w for *_, w in kinds])[0]
        try:
            wire = Wire(target, stats, rng)
        except OSError as exc:
            stats.connect_failures += 1
            refused += 1
            if refused >= 20:
                raise NodeGone(f"{target.role} listener {target.host}:{target.port} refuses connections: "
                               f"{exc}") from None
            time.sleep(0.1)
            continue
        refused = 0
        stats.connections += 1
        stats.cases[f"{target.role}/{name}"] += 1
        try:
            for burst in fn(rng, ctx):
                if isinstance(burst, Wait):
                    wire.wait(burst)
                else:
                    wire.send(burst, name)
                if wire.closed or wire.stuck or stats.frames >= frames:
                    break
        finally:
            if wire.closed:
                stats.closed_by_node += 1
            if wire.stuck:
                stats.send_timeouts += 1
            wire.close()
        if log is not None and stats.frames >= next_report:
            next_report += 10_000
            log(f"fuzz: {stats.frames} frames on {stats.connections} connections")
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", type=Target.parse, required=True,
                    help="ROLE:HOST:PORT, ROLE = normal or inter-router (repeatable)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--node-id", default="A", help="the fuzzed node's id (used in some control messages)")
    ap.add_argument("--mutation-rate", type=float, default=0.03)
    ap.add_argument("--only", action="append", default=[], help="run only these episode kinds")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"fuzz seed {seed}", flush=True)
    t0 = time.monotonic()
    try:
        stats = run(args.target, seed, args.frames, args.seconds, args.node_id, args.mutation_rate,
                    log=lambda s: print(s, flush=True), only=tuple(args.only))
    except NodeGone as exc:
        print(json.dumps({"seed": seed, "error": str(exc)}), flush=True)
        return 2
    out = {"seed": seed, "seconds": round(time.monotonic() - t0, 2), **stats.as_dict()}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
