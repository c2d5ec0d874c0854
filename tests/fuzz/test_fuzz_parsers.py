"""In-process fuzzing of every parser a node runs on bytes from the network, against its contract.

The node catches exactly the exceptions these functions document (router/node/engine.py,
router/node/mesh.py, router/node/server.py); anything else escaping one of them closes a whole
connection with amqp:internal-error (an inter-router one: every message on it) or, for the echo
detector, escapes the read callback. So the contracts are checked here on many random and mutated
inputs:

* router.amqp.codec ``decode_value``, ``skip_value``, ``scan_message``: only ``MalformedError``;
* router.amqp.annotations ``router_view``: None or a view; ``AnnotationLayout`` (+ read / rewrite /
  strip), ``read_router_annotations``, ``annotate_ingress``: only ``MalformedError``;
* router.amqp.codec ``FlowEchoDetector.feed``: never raises, on any byte stream cut anywhere;
* router.node.mesh ``decode_control``: only ``ControlMessageError``;
* router.linkstate ``LinkStateEngine.handle`` and ``tick``: never raise, whatever the message map.

Seeded: ``FUZZ_SEED`` (default: random) and ``FUZZ_CASES`` (default 6000 per test) set them; the
seed is printed, and a failure message names the input.
"""

from __future__ import annotations

import os
import random
import time
from functools import partial

import pytest
from proton import Message, symbol

from router.amqp.annotations import (
    AnnotationLayout,
    RouterAnnotations,
    annotate_ingress,
    read_router_annotations,
    router_view,
    with_hop,
)
from router.amqp.codec import FlowEchoDetector, MalformedError, decode_value, scan_message, skip_value
from router.linkstate import ControlMessageError, LinkStateConfig, LinkStateEngine
from router.node.mesh import decode_control, encode_control
from tests.support import frame_gen as gen

CASES = int(os.environ.get("FUZZ_CASES", "6000"))


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"FUZZ_SEED={seed}")
    return random.Random(seed)


def _messages(rng: random.Random, n: int, router: bool):
    """Valid messages, some with router annotations in the form a peer writes them, and mutants."""
    for i in range(n):
        data = gen.message(rng, router=router)
        if router and rng.random() < 0.5:
            try:                                      # the exact form an ingress node writes
                data = bytes(annotate_ingress(data, with_hop(RouterAnnotations(to=gen.rstr(rng, 20)), "A")))
            except MalformedError:
                pass
        yield i, data if rng.random() < 0.2 else gen.mutate_body(rng, data)


def _only_malformed(case: int, data: bytes, *calls) -> object:
    """Run each call; MalformedError is fine, any other exception fails the test. Returns the last
    result (None if it raised)."""
    out = None
    for call in calls:
        try:
            out = call()
        except MalformedError:
            out = None
        except Exception as exc:
            pytest.fail(f"case {case}: {getattr(call, '__name__', call)}: {type(exc).__name__}: {exc} "
                        f"on {data!r}")
    return out


def test_codec_raises_only_malformed(rng):
    for i, data in _messages(rng, CASES, router=False):
        _only_malformed(i, data, partial(decode_value, data), partial(skip_value, data),
                        partial(scan_message, data, complete=True), partial(scan_message, data))


def test_annotations_raise_only_malformed(rng):
    hop = with_hop(RouterAnnotations(to="x"), "B")
    for i, data in _messages(rng, CASES, router=True):
        try:
            view = router_view(data)
        except Exception as exc:
            pytest.fail(f"case {i}: router_view raised {type(exc).__name__}: {exc} on {data!r}")
        if view is not None:
            _only_malformed(i, data, view.read, partial(view.rewrite, with_hop(view.ann, "B")), view.strip,
                            partial(getattr, view, "info"))
        _only_malformed(i, data, partial(read_router_annotations, data), partial(annotate_ingress, data, hop))
        layout = _only_malformed(i, data, partial(AnnotationLayout, data))
        if layout is not None:
            _only_malformed(i, data, layout.read, partial(layout.rewrite, hop), layout.strip)


def test_flow_echo_detector_never_raises(rng):
    """Streams of valid, random and mutated frames, fed in chunks cut at random places."""
    for i in range(CASES // 20):
        frames = []
        for _ in range(rng.randint(1, 30)):
            k = rng.random()
            if k < 0.4:
                f = gen.flow_frame(rng.choice((None, 0, 1)), rng.randint(0, 100), echo=rng.random() < 0.5)
            elif k < 0.7:
                f = gen.random_performative(rng)
            else:
                f = gen.transfer_frame(0, i, gen.message(rng))
            frames.append(gen.mutate(rng, f) if rng.random() < 0.3 else f)
        stream = b"".join(frames)
        det = FlowEchoDetector(max_frame=rng.choice((512, 16384)), all_forms=rng.random() < 0.5)
        pos = 0
        while pos < len(stream):
            step = rng.randint(1, 600)
            try:
                det.feed(stream[pos:pos + step])
            except Exception as exc:
                pytest.fail(f"case {i}: {type(exc).__name__}: {exc} at offset {pos} of {stream!r}")
            pos += step


def test_control_messages_decode_or_raise_control_error(rng):
    for i in range(CASES):
        data = gen.control_message(rng, rng.choice(("B", gen.rstr(rng, 6))), ["A", "B"], "A")
        if rng.random() < 0.3:
            data = gen.mutate_body(rng, data)
        try:
            decode_control(data)
        except ControlMessageError:
            pass
        except Exception as exc:
            pytest.fail(f"case {i}: {type(exc).__name__}: {exc} on {data!r}")


def test_link_state_engine_never_raises_and_stays_bounded(rng):
    """Decoded control messages (most malformed) from two links into one engine, with ticks."""
    engine = LinkStateEngine("A", 7, LinkStateConfig(hello_interval=0.2, hello_max_age=0.6))
    links = ("link-1", "link-2")
    now = 100.0
    for link in links:
        engine.link_up(link, 1, now)
    handled = 0
    for i in range(CASES):
        now += 0.001
        data = gen.control_message(rng, rng.choice(("B", "C", f"fuzz-{rng.randint(0, 10**6)}")),
                                   ["A", "B", "C"], "A")
        try:
            message = decode_control(data)
        except ControlMessageError:
            continue
        handled += 1
        try:
            engine.handle(message, now, rng.choice(links))
            if i % 50 == 0:
                engine.tick(now)
        except Exception as exc:
            pytest.fail(f"case {i}: {type(exc).__name__}: {exc} on {message!r}")
    # long after: the fuzz nodes are forgotten and the caches keyed by peer input stay bounded
    for _ in range(80):
        now += 1.0
        engine.tick(now)
    assert handled > CASES // 4, f"only {handled} of {CASES} control messages decoded: the generator is off"
    assert len(engine._scopes) <= 1024
    assert len(engine._warn._suppressed) <= 1024
    assert len(engine._flood_parent) <= 3, engine._flood_parent


def test_encode_control_round_trips():
    """The generator's well-formed messages read back as sent (so the fuzz covers the real form)."""
    rng = random.Random(5)
    for op in gen.OPCODES:
        body = gen.control_body(rng, op, "B", ["A", "B"])
        msg = {"to": "_topo/0/all/qdrouter", "opcode": op, "body": body, "trace": ["B"]}
        assert decode_control(encode_control(msg)) == msg
    m = Message(address="x", body={"id": "B"})
    assert decode_control(bytes(m.encode()))["opcode"] is None


def test_control_messages_keep_their_shape():
    """encode_control (our codec) reads in python-qpid-proton as the former proton.Message encoding
    did, and that encoding still decodes: same address, opcode, trace annotation (symbol key), body."""
    rng = random.Random(7)
    for op in gen.OPCODES:
        body = gen.control_body(rng, op, "B", ["A", "B"])
        msg = {"to": "_topo/0/all/qdrouter", "opcode": op, "body": body, "trace": ["B", "C"]}
        old = Message(address=msg["to"], properties={"opcode": op}, body=body)
        old.annotations = {symbol("x-opt-qd.trace"): ["0/B", "0/C"]}
        new = Message()
        new.decode(encode_control(msg))
        for field in ("address", "properties", "annotations", "body"):
            assert getattr(new, field) == getattr(old, field), (op, field)
        assert [type(k) for k in new.annotations] == [symbol]
        assert decode_control(bytes(old.encode())) == msg


def _control_bytes(trace: object = ("0/B",)) -> bytes:
    m = Message(address="_topo/0/all/qdrouter", properties={"opcode": "RA"}, body={"id": "B"})
    m.annotations = {symbol("x-opt-qd.trace"): list(trace) if isinstance(trace, tuple) else trace}
    return bytes(m.encode())


@pytest.mark.parametrize("data, reason", [
    (_control_bytes().replace(b"\x00\x53\x74\xd1", b"\x00\x53\x74\xd0"),
     "application properties and message annotations must be maps"),
    (_control_bytes().replace(b"\x00\x53\x72\xd1", b"\x00\x53\x72\xd0"),
     "application properties and message annotations must be maps"),
    (_control_bytes().replace(b"_topo", b"\xff\xfeopo"), "undecodable control message: 'utf-8' codec"),
    (_control_bytes(trace="0/B"), "x-opt-qd.trace must be a list"),
    (_control_bytes() + b"\x00\x53\x77\x40", "undecodable control message: a second amqp-value section"),
    (_control_bytes()[:-3], "undecodable control message: truncated"),
    (b"", "undecodable control message: empty message"),
])
def test_decode_control_names_the_problem(data, reason):
    with pytest.raises(ControlMessageError) as info:
        decode_control(data)
    assert str(info.value).startswith(reason), str(info.value)


def test_parser_fuzz_is_fast_enough():
    """A guard on the cost of the generators: the fuzz tests above must stay cheap."""
    rng = random.Random(1)
    t0 = time.process_time()
    for _ in range(500):
        gen.mutate_body(rng, gen.message(rng, router=True))
    assert time.process_time() - t0 < 2.0
