"""Seeded generators of AMQP 1.0 input for the fuzz tests: values, messages, frames and mutations.

Everything takes a ``random.Random`` so a run is reproduced by its seed. Performatives are encoded
with ``proton.Data`` (via ``tests.support.raw_amqp``); mutations work on the encoded bytes.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

from proton import (
    Array,
    Data,
    Described,
    Message,
    byte,
    char,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

from tests.support.raw_amqp import (
    AMQP_HEADER,
    ATTACH,
    BEGIN,
    CLOSE,
    DETACH,
    DISPOSITION,
    END,
    FLOW,
    OPEN,
    SASL_HEADER,
    SOURCE,
    TARGET,
    TRANSFER,
    encode_frame,
    encode_performative,
)

R = random.Random
TRACE = symbol("x-opt-qd.trace")
INGRESS = symbol("x-opt-qd.ingress")
TO = symbol("x-opt-qd.to")
PHASE = symbol("x-opt-qd.phase")
OUTCOME_CODES = (0x23, 0x24, 0x25, 0x26, 0x27)   # received, accepted, rejected, released, modified
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
HEADER_VARIANTS = (
    AMQP_HEADER, SASL_HEADER,
    b"AMQP\x02\x01\x00\x00",            # TLS, which the listener does not offer
    b"AMQP\x00\x00\x09\x01",            # AMQP 0-9-1
    b"AMQP\x00\x01\x00\x01", b"AMQP\x00\x02\x00\x00", b"AMQP\x03\x01\x00\x01",
    b"AMQP", b"AMQ", b"amqp\x00\x01\x00\x00", b"GET / HTTP/1.1\r\n\r\n",
)


# ------------------------------------------------------------------------------------------------
# values
# ------------------------------------------------------------------------------------------------


def rstr(rng: R, n: int = 12, alphabet: str = "abcdefghijklmnopqrstuvwxyz0123456789/._-$") -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))


def ustr(rng: R, n: int = 12) -> str:
    """A string that may hold any code point, '/' and the characters AMQP addresses use."""
    out = []
    for _ in range(rng.randint(0, n)):
        k = rng.random()
        if k < 0.6:
            out.append(rng.choice("abcXYZ019/._-:$#*"))
        elif k < 0.9:
            out.append(chr(rng.randint(0x20, 0x7FF)))
        else:
            out.append(chr(rng.choice((0, 0xFFFF, 0x10FFFF, 0xE9, 0x2028))))
    return "".join(out)


def value(rng: R, depth: int = 0) -> Any:
    """A random AMQP value (any primitive type, lists, maps, described values)."""
    k = rng.randint(0, 22 if depth < 3 else 17)
    if k == 0:
        return None
    if k == 1:
        return rng.random() < 0.5
    if k == 2:
        return ubyte(rng.randint(0, 255))
    if k == 3:
        return ushort(rng.randint(0, 65535))
    if k == 4:
        return uint(rng.choice((0, 1, 2**31, 2**32 - 1, rng.randint(0, 2**32 - 1))))
    if k == 5:
        return ulong(rng.choice((0, 2**63, 2**64 - 1, rng.randint(0, 2**64 - 1))))
    if k == 6:
        return byte(rng.randint(-128, 127))
    if k == 7:
        return short(rng.randint(-32768, 32767))
    if k == 8:
        return int32(rng.randint(-2**31, 2**31 - 1))
    if k == 9:
        return rng.choice((0, -1, 2**63 - 1, -2**63, rng.randint(-2**63, 2**63 - 1)))
    if k == 10:
        return rng.choice((0.0, -1.5, float("inf"), float("nan"), rng.random() * 1e300))
    if k == 11:
        return float32(rng.random())
    if k == 12:
        return timestamp(rng.randint(0, 2**40))
    if k == 13:
        return char(chr(rng.randint(0x20, 0x7E)))
    if k == 14:
        return ustr(rng, 40)
    if k == 15:
        return symbol(rstr(rng, 30))
    if k == 16:
        return rng.randbytes(rng.randint(0, 64))
    if k == 17:
        return rstr(rng, 300)
    if k == 18:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    if k == 19:
        return {symbol(rstr(rng, 20)): value(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    if k == 20:
        return {value(rng, 3): value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if k == 21:
        return Described(rng.choice((ulong(rng.randint(0, 0xFF)), symbol(rstr(rng, 20)))),
                         value(rng, depth + 1))
    return Array(None, Data.SYMBOL, *[symbol(rstr(rng, 8)) for _ in range(rng.randint(0, 4))])


def hashable(v: Any) -> bool:
    try:
        hash(v)
        return True
    except TypeError:
        return False


# ------------------------------------------------------------------------------------------------
# messages
# ------------------------------------------------------------------------------------------------


def message(rng: R, address: str | None = None, *, router: bool = False) -> bytes:
    """An encoded message with random sections; ``router``: random ``x-opt-qd.*`` annotations too."""
    m = Message()
    if rng.random() < 0.7:
        m.address = address if address is not None else ustr(rng, 30)
    if rng.random() < 0.5:
        m.id = rng.choice((rstr(rng), rng.randint(0, 2**40), rng.randbytes(8)))
    if rng.random() < 0.3:
        m.reply_to = rstr(rng, 30)
    if rng.random() < 0.3:
        m.subject = ustr(rng)
    if rng.random() < 0.3:
        m.durable = True
        m.priority = rng.randint(0, 9)
        m.ttl = rng.random() * 10
    if rng.random() < 0.4:
        m.properties = {rstr(rng, 10): value(rng, 2) for _ in range(rng.randint(0, 4))}
    ann: dict = {}
    if router or rng.random() < 0.2:
        if rng.random() < 0.7:
            ann[INGRESS] = rng.choice(("0/" + rstr(rng, 6), value(rng, 2), "0/", ""))
        if rng.random() < 0.7:
            ann[TRACE] = rng.choice(([f"0/{rstr(rng, 6)}" for _ in range(rng.randint(0, 8))],
                                     value(rng, 1), [value(rng, 2)], ["0/A"] * rng.randint(0, 40)))
        if rng.random() < 0.7:
            ann[TO] = rng.choice((rstr(rng, 30), value(rng, 2), "_topo/0/" + rstr(rng, 4) + "/x"))
        if rng.random() < 0.3:
            ann[PHASE] = rng.choice((0, 1, -1, value(rng, 2)))
    if rng.random() < 0.3:
        ann[symbol(rstr(rng, 12))] = value(rng, 2)
    if ann:
        m.annotations = {k: v for k, v in ann.items() if hashable(v)}
    k = rng.random()
    if k < 0.4:
        m.body = ustr(rng, 200)
    elif k < 0.6:
        m.body = rng.randbytes(rng.randint(0, 2000))
    elif k < 0.9:
        m.body = value(rng)
    try:
        return bytes(m.encode())
    except Exception:                       # a value Proton refuses to encode (e.g. a bad map key)
        m.body = None
        m.annotations = None
        return bytes(m.encode())


# ------------------------------------------------------------------------------------------------
# frames
# ------------------------------------------------------------------------------------------------


def perf(code: int, fields: list, channel: int = 0, payload: bytes = b"", frame_type: int = 0) -> bytes:
    body = encode_performative(code, fields) + payload
    if frame_type == 0:
        return encode_frame(body, channel)
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, channel) + body


def caps(*names: str) -> Array:
    return Array(None, Data.SYMBOL, *[symbol(n) for n in names])


def open_frame(rng: R, container: str | None, *, cost: Any = None, max_frame: int = 16384,
               idle_ms: int | None = None) -> bytes:
    props = None
    if cost is not None:
        props = {symbol("qd.inter-router-cost"): cost}
    return perf(OPEN, [container, None, uint(max_frame), ushort(rng.choice((65535, 65535, 65535, 7, 0))),
                       uint(idle_ms) if idle_ms is not None else None, None, None, None, None, props])


def begin_frame(channel: int = 0, window: int = 65535) -> bytes:
    return perf(BEGIN, [None, uint(0), uint(window), uint(window), uint(rng_handle_max())], channel)


def rng_handle_max() -> int:
    return 1023


def terminus(code: int, address: str | None, capabilities: list[str] | None = None,
             dynamic: bool = False) -> Described:
    cap = caps(*capabilities) if capabilities else None
    if code == SOURCE:
        return Described(ulong(SOURCE), [address, None, None, None, dynamic, None, None, None, None, None,
                                         cap])
    return Described(ulong(TARGET), [address, None, None, None, dynamic, None, cap])


def attach_frame(name: str, handle: int, role_receiver: bool, source: Described | None,
                 target: Described | None, *, snd_settle_mode: int | None = None,
                 channel: int = 0) -> bytes:
    return perf(ATTACH, [name, uint(handle), role_receiver,
                         ubyte(snd_settle_mode) if snd_settle_mode is not None else None, None,
                         source, target, None, None, None if role_receiver else uint(0)], channel)


def flow_frame(handle: int | None, credit: int, *, delivery_count: int = 0, drain: bool = False,
               echo: bool = False, channel: int = 0) -> bytes:
    return perf(FLOW, [uint(0), uint(65535), uint(0), uint(65535),
                       uint(handle) if handle is not None else None,
                       uint(delivery_count) if handle is not None else None,
                       uint(credit) if handle is not None else None, None, drain, echo], channel)


def transfer_frame(handle: int, delivery_id: int | None, payload: bytes, *, settled: bool = False,
                   more: bool = False, aborted: bool = False, channel: int = 0,
                   tag: bytes | None = None) -> bytes:
    if delivery_id is None:                 # a continuation frame
        fields: list = [uint(handle), None, None, None, None, more]
    else:
        fields = [uint(handle), uint(delivery_id), tag if tag is not None else b"t%d" % delivery_id,
                  uint(0), settled, more]
    if aborted:
        fields += [None, None, None, True]
    return perf(TRANSFER, fields, channel, payload)


def outcome(rng: R) -> Described:
    code = rng.choice(OUTCOME_CODES)
    if code == 0x23:
        return Described(ulong(code), [uint(rng.randint(0, 5)), ulong(rng.randint(0, 100))])
    if code == 0x25:
        return Described(ulong(code), [Described(ulong(0x1D), [symbol("amqp:x"), ustr(rng), None])])
    if code == 0x27:
        return Described(ulong(code), [rng.random() < 0.5, rng.random() < 0.5, None])
    return Described(ulong(code), [])


def disposition_frame(rng: R, first: int, last: int | None, *, role_receiver: bool = True,
                      channel: int = 0) -> bytes:
    return perf(DISPOSITION, [role_receiver, uint(first), uint(last) if last is not None else None,
                              rng.random() < 0.7, outcome(rng) if rng.random() < 0.8 else None],
                channel)


def random_performative(rng: R, channel: int | None = None) -> bytes:
    """A frame with a random (often invalid) performative: any descriptor, random fields."""
    code = rng.choice((*range(0x10, 0x19), rng.randint(0, 0xFF), 0x40, 0x41, 0x44))
    fields = [value(rng, 1) for _ in range(rng.randint(0, 12))]
    if channel is None:
        channel = rng.choice((0, 0, 0, 1, rng.randint(0, 65535)))
    payload = rng.randbytes(rng.randint(0, 64)) if rng.random() < 0.3 else b""
    try:
        return perf(code, fields, channel, payload, frame_type=rng.choice((0, 0, 0, 1, rng.randint(0, 255))))
    except Exception:
        return perf(code, [], channel)


def detach_frame(handle: int, closed: bool = True, channel: int = 0) -> bytes:
    return perf(DETACH, [uint(handle), closed], channel)


def end_frame(channel: int = 0) -> bytes:
    return perf(END, [], channel)


def close_frame() -> bytes:
    return perf(CLOSE, [])


def empty_frame(channel: int = 0) -> bytes:
    return encode_frame(b"", channel)


def sasl_init(rng: R) -> bytes:
    mech = rng.choice(("ANONYMOUS", "ANONYMOUS", "PLAIN", "EXTERNAL", "GSSAPI", rstr(rng, 40), ""))
    response = rng.choice((None, b"", b"\x00guest\x00guest", rng.randbytes(rng.randint(0, 300))))
    return perf(SASL_INIT, [symbol(mech), response, rng.choice((None, "localhost", ustr(rng, 40)))],
                frame_type=1)


# ------------------------------------------------------------------------------------------------
# mutations of encoded frames
# ------------------------------------------------------------------------------------------------


def _bitflip(rng: R, b: bytearray) -> bytearray:
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return b


def _truncate(rng: R, b: bytearray) -> bytearray:
    return b[:rng.randrange(len(b))]


def _size_field(rng: R, b: bytearray) -> bytearray:
    size = rng.choice((0, 1, 7, 8, 9, len(b) - 1, len(b) + 1, len(b) + rng.randint(2, 5000),
                       0x7FFFFFFF, 0xFFFFFFFF, rng.randint(0, 2**32 - 1)))
    b[0:4] = struct.pack(">I", size & 0xFFFFFFFF)
    return b


def _doff_type(rng: R, b: bytearray) -> bytearray:
    if rng.random() < 0.5:
        b[4] = rng.choice((0, 1, 3, 255, rng.randint(0, 255)))
    else:
        b[5] = rng.choice((1, 2, 255, rng.randint(0, 255)))
    return b


def _channel(rng: R, b: bytearray) -> bytearray:
    b[6:8] = struct.pack(">H", rng.choice((1, 2, 255, 65535, rng.randint(0, 65535))))
    return b


def _descriptor(rng: R, b: bytearray) -> bytearray:
    i = b.find(b"\x00\x53", 8)
    if i >= 0 and i + 2 < len(b):
        b[i + 2] = rng.choice((rng.randint(0, 255), 0x10, 0x14, 0x18, 0x70, 0x77, 0x28, 0x29))
    elif len(b) > 9:
        b[9] = rng.randint(0, 255)
    return b


def _huge_count(rng: R, b: bytearray) -> bytearray:
    """Make a list/map/array/binary/string constructor claim a huge size or element count."""
    spots = [i for i in range(8, len(b)) if b[i] in (0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0, 0xA0, 0xA1, 0xA3,
                                                     0xB0, 0xB1, 0xB3)]
    if not spots:
        return _bitflip(rng, b)
    i = rng.choice(spots)
    if b[i] in (0xD0, 0xD1, 0xF0, 0xB0, 0xB1, 0xB3):
        j = rng.choice((i + 1, i + 5)) if b[i] in (0xD0, 0xD1, 0xF0) else i + 1
        b[j:j + 4] = rng.choice((b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00",
                                 b"\x00\x01\x00\x00"))
    else:
        j = rng.choice((i + 1, i + 2)) if b[i] in (0xC0, 0xC1, 0xE0) else i + 1
        if j < len(b):
            b[j] = rng.choice((0xFF, 0xFE, 0, 1))
    return b


def _insert(rng: R, b: bytearray) -> bytearray:
    i = rng.randrange(len(b) + 1)
    return b[:i] + rng.randbytes(rng.randint(1, 32)) + b[i:]


def _constructor(rng: R, b: bytearray) -> bytearray:
    """Replace one type constructor byte with another (wrong type, unknown code)."""
    if len(b) <= 9:
        return _bitflip(rng, b)
    i = rng.randrange(8, len(b))
    b[i] = rng.choice((0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x50, 0x52, 0x53, 0x60, 0x70, 0x71, 0x80, 0x81,
                       0x98, 0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0,
                       0x00, 0x01, 0x02, 0x1F, 0x90, 0xFF, rng.randint(0, 255)))
    return b


MUTATORS: tuple[Callable[[R, bytearray], bytearray], ...] = (
    _bitflip, _bitflip, _truncate, _size_field, _doff_type, _channel, _descriptor, _huge_count, _insert,
    _constructor, _constructor,
)


def mutate(rng: R, data: bytes) -> bytes:
    """One to three random mutations of ``data`` (an encoded frame, message or value)."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if not b:
            return bytes(rng.randbytes(rng.randint(1, 16)))
        mutator = rng.choice(MUTATORS)
        if len(b) < 8 and mutator in (_size_field, _doff_type, _channel):
            mutator = _bitflip                  # no frame header left to corrupt
        b = mutator(rng, b)
    return bytes(b)


def mutate_body(rng: R, data: bytes) -> bytes:
    """Mutations that keep a message's length plausible: for payloads inside valid frames."""
    b = bytearray(data)
    if not b:
        return rng.randbytes(rng.randint(1, 16))
    k = rng.random()
    if k < 0.4:
        return bytes(_bitflip(rng, b))
    if k < 0.55:
        return bytes(b[:rng.randrange(len(b))])
    if k < 0.8:
        i = rng.randrange(len(b))
        b[i] = rng.choice((0x00, 0x40, 0x45, 0x53, 0xA1, 0xB1, 0xC0, 0xC1, 0xD0, 0xD1, 0xFF,
                           rng.randint(0, 255)))
        return bytes(b)
    if k < 0.9:
        return bytes(_huge_count(rng, bytearray(b"\x00" * 8) + b)[8:])
    return bytes(_insert(rng, b))


# ------------------------------------------------------------------------------------------------
# control messages (router.linkstate)
# ------------------------------------------------------------------------------------------------

OPCODES = ("HELLO", "RA", "LSR", "LSU", "MAU", "MAR")
CONTROL_ADDRESSES = ("_local/qdhello", "_topo/0/all/qdrouter", "_topo/0/all/qdrouter.ma")


def control_body(rng: R, opcode: str, sender: str, peers: list[str], instance: int | None = None) -> dict:
    """A well-formed control body of ``opcode`` from ``sender`` (``instance``: random if None)."""
    base = {"id": sender, "pv": 1, "area": "0",
            "instance": rng.randint(0, 2**40) if instance is None else instance}
    if opcode == "HELLO":
        return {**base, "seen": rng.sample(peers, rng.randint(0, len(peers)))}
    if opcode == "RA":
        return {**base, "ls_seq": rng.randint(0, 2**31), "mobile_seq": rng.randint(0, 2**31)}
    if opcode == "LSR":
        return base
    if opcode == "LSU":
        seq = rng.randint(0, 1000)
        return {**base, "ls_seq": seq, "ls": {"id": sender, "area": "0", "ls_seq": seq,
                                               "peers": {p: rng.randint(1, 10) for p in peers}}}
    if opcode == "MAU":
        addrs = [rstr(rng, 20) for _ in range(rng.randint(0, 6))]
        if rng.random() < 0.5:
            return {**base, "mobile_seq": rng.randint(0, 100), "exist": addrs}
        return {**base, "mobile_seq": rng.randint(0, 100), "add": addrs, "del": [rstr(rng, 20)]}
    return {**base, "have_seq": rng.randint(0, 100)}


def _break_body(rng: R, body: dict) -> Any:
    """Make a control body malformed in one of many ways."""
    k = rng.randint(0, 11)
    if k == 0:
        return value(rng)                                   # not a map at all
    body = dict(body)
    key = rng.choice(list(body))
    if k == 1:
        del body[key]                                       # a key missing
    elif k == 2:
        body[key] = value(rng)                              # a key of a wrong type
    elif k == 3:
        body["pv"] = rng.choice((2, 0, -1, "1", 1.0, None, 2**70))
    elif k == 4:
        body["id"] = rng.choice(("", "a/b", None, 7, "x" * 5000, ustr(rng, 20)))
    elif k == 5:
        body["instance"] = rng.choice((-1, "1", None, 2**70, 1.5))
    elif k == 6:
        body["area"] = rng.choice(("1", 0, None))
    elif k == 7:
        body[rstr(rng, 8)] = value(rng)                     # an unknown key (allowed)
    elif k == 8:
        for f in ("seen", "add", "del", "exist", "hints"):
            if rng.random() < 0.5:
                body[f] = rng.choice(([value(rng, 2)], [rstr(rng, 5)] * rng.randint(0, 3000), "abc", 5))
    elif k == 9:
        body["ls"] = rng.choice((value(rng), {"id": body.get("id"), "peers": {"": 0}},
                                 {"id": body.get("id"), "ls_seq": 1, "peers": {body.get("id"): 1}},
                                 {"id": "other", "ls_seq": 1, "peers": {}}))
    elif k == 10:
        for f in ("ls_seq", "mobile_seq", "have_seq"):
            body[f] = rng.choice((-5, "x", None, 2**80, True, 0.5))
    else:
        keys = [value(rng, 3) for _ in range(rng.randint(0, 5))]
        return {k if hashable(k) else "k": value(rng) for k in keys}
    return body


def control_message(rng: R, sender: str, peers: list[str], node_id: str,
                    instance: int | None = None) -> bytes:
    """An encoded control message as the adapter reads them (router.node.mesh.decode_control), often
    malformed: bad bodies, opcodes, addresses and traces; sometimes well formed."""
    opcode: Any = rng.choice(OPCODES)
    body: Any = control_body(rng, opcode, sender, peers, instance)
    broken = rng.random() < 0.75
    if broken:
        body = _break_body(rng, body)
    to: Any = rng.choice((*CONTROL_ADDRESSES, f"_topo/0/{node_id}/qdrouter", f"_topo/0/{node_id}/qdrouter.ma",
                          f"_topo/0/{rstr(rng, 6)}/qdrouter", None, "amqp:/_topo/0/all/qdrouter"))
    if rng.random() < 0.15:
        to = rng.choice((ustr(rng, 60), "_topo/0/", "_topo/0//", "_topo/0/all"))
    props: Any = {"opcode": opcode}
    if rng.random() < 0.15:
        props = rng.choice(({}, {"opcode": value(rng)}, {"opcode": rstr(rng, 8)}, None,
                            {"opcode": opcode, rstr(rng, 5): value(rng, 2)}))
    trace: Any = [f"0/{sender}"]
    if rng.random() < 0.2:
        trace = rng.choice(([], value(rng), [value(rng, 2)], [f"0/{node_id}"], ["0/x"] * rng.randint(0, 500),
                            [f"0/{rstr(rng, 4)}" for _ in range(rng.randint(0, 10))]))
    m = Message(address=to, body=body)
    if isinstance(props, dict):
        m.properties = {k: v for k, v in props.items() if isinstance(k, str)}
    if hashable(trace) or isinstance(trace, list):
        m.annotations = {TRACE: trace}
    try:
        data = bytes(m.encode())
    except Exception:
        data = bytes(Message(address=to, body=None, properties={"opcode": opcode}).encode())
    if rng.random() < 0.15:
        data = mutate_body(rng, data)
    return data
