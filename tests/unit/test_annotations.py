"""Tests for router.amqp.annotations, checked against python-qpid-proton's message decoding."""

from __future__ import annotations

import itertools
import timeit
import tracemalloc
from typing import Any

import pytest
from proton import UNDESCRIBED, Array, Data, Message, symbol, ubyte, uint, ulong
from proton import Described as PDescribed

from router.amqp.annotations import (
    AnnotationLayout,
    RouterAnnotations,
    read_router_annotations,
    rewrite,
    rewrite_prefix,
    strip,
    trace_nodes,
    with_hop,
)
from router.amqp.codec import (
    IncompleteError,
    MalformedError,
    decode_value,
    scan_message,
    skip_value,
)

# ---------------------------------------------------------------------------------------------
# message construction
# ---------------------------------------------------------------------------------------------


def enc(obj: Any) -> bytes:
    data = Data()
    data.put_object(obj)
    return data.encode()


def section(code: int, value: Any) -> bytes:
    return enc(PDescribed(ulong(code), value))


HEADER = section(0x70, [True, ubyte(7), uint(1000), False, uint(2)])
DELIVERY_ANN = section(0x71, {symbol("x-opt-da"): "d", symbol("x-opt-qd.not-ma"): 5})
PROPERTIES = section(
    0x73, ["id-1", b"user", "queue/a", "subj", "reply/here", ulong(5), symbol("text/plain")]
)
APP_PROPS = section(0x74, {"k": 1, "s": "v", "f": 1.5})
FOOTER = section(0x78, {symbol("x-opt-footer"): "f"})

USER = [
    (symbol("user-sym"), symbol("v")),
    (symbol("user-int"), 42),
    (ulong(9), "ulong-key"),
    (symbol("user-nested"), {symbol("a"): [1, "b", {"c": None}]}),
    (symbol("user-desc"), PDescribed(symbol("my:desc"), 7)),
    (symbol("user-array"), Array(UNDESCRIBED, Data.INT, 1, 2, 3)),
]
ROUTER = [
    (symbol("x-opt-qd.ingress"), "0/X"),
    (symbol("x-opt-qd.trace"), ["0/X", "0/Y"]),
    (symbol("x-opt-qd.to"), "addr/1"),
    (symbol("x-opt-qd.phase"), 1),
]
ROUTER_ANN = RouterAnnotations("0/X", ["0/X", "0/Y"], "addr/1", 1)
STREAM = (symbol("x-opt-qd.stream"), True)  # a router key this module does not read

# name -> (message-annotations section or b"", router annotations it carries)
MA_VARIANTS: dict[str, tuple[bytes, RouterAnnotations]] = {
    "none": (b"", RouterAnnotations()),
    "user": (section(0x72, dict(USER)), RouterAnnotations()),
    "router": (section(0x72, dict(ROUTER)), ROUTER_ANN),
    "mixed": (
        section(0x72, dict([ROUTER[3], USER[0], USER[1], ROUTER[0], ROUTER[1], USER[2], USER[3],
                            USER[4], STREAM, USER[5], ROUTER[2]])),
        ROUTER_ANN,
    ),
    "null": (section(0x72, None), RouterAnnotations()),
    "empty": (section(0x72, {}), RouterAnnotations()),
    "big": (section(0x72, {symbol(f"user-{i}"): "x" * 40 for i in range(10)}), RouterAnnotations()),
    "big-mixed": (
        section(0x72, {**{symbol(f"user-{i}"): "x" * 40 for i in range(10)}, **dict(ROUTER)}),
        ROUTER_ANN,
    ),
}

BODIES: dict[str, bytes] = {
    "data": section(0x75, b"\x00\x01binary body"),
    "data-empty": section(0x75, b""),
    "sequence": section(0x76, [1, "two", 3.0]),
    "value-str": section(0x77, "hello"),
    "value-int": section(0x77, 12345),
    "value-map": section(0x77, {"a": [1, 2], "b": None}),
    "value-null": section(0x77, None),
    "none": b"",
}


def build(
    ma: bytes = b"",
    body: bytes = BODIES["value-str"],
    header: bool = True,
    da: bool = True,
    props: bool = True,
    app: bool = True,
    footer: bool = False,
) -> bytes:
    parts = [HEADER if header else b"", DELIVERY_ANN if da else b"", ma, PROPERTIES if props else b"",
             APP_PROPS if app else b"", body, FOOTER if footer else b""]
    return b"".join(parts)


def all_shapes() -> list[dict[str, bool]]:
    names = ("header", "da", "props", "app", "footer")
    return [dict(zip(names, flags, strict=True)) for flags in itertools.product((False, True), repeat=5)]


# ---------------------------------------------------------------------------------------------
# checking helpers
# ---------------------------------------------------------------------------------------------


def is_router_key(key: Any) -> bool:
    return isinstance(key, str) and key.startswith("x-opt-qd.")


def decoded(buf: bytes) -> dict[str, Any]:
    """Everything proton decodes from ``buf``, message annotations split into user / router."""
    msg = Message()
    msg.decode(buf)
    ann = dict(msg.annotations or {})
    body = msg.body
    if isinstance(body, memoryview):
        body = body.tobytes()
    return {
        "durable": msg.durable,
        "priority": msg.priority,
        "ttl": msg.ttl,
        "first_acquirer": msg.first_acquirer,
        "delivery_count": msg.delivery_count,
        "id": msg.id,
        "user_id": msg.user_id,
        "address": msg.address,
        "subject": msg.subject,
        "reply_to": msg.reply_to,
        "correlation_id": msg.correlation_id,
        "content_type": msg.content_type,
        "properties": msg.properties,
        "instructions": dict(msg.instructions or {}),
        "body": body,
        "user_ann": [(k, v) for k, v in ann.items() if not is_router_key(k)],
        "router_ann": {str(k): v for k, v in ann.items() if is_router_key(k)},
    }


def expected_router(ann: RouterAnnotations | None) -> dict[str, Any]:
    if ann is None:
        return {}
    out: dict[str, Any] = {}
    if ann.ingress is not None:
        out["x-opt-qd.ingress"] = ann.ingress
    if ann.trace:
        out["x-opt-qd.trace"] = ann.trace
    if ann.to is not None:
        out["x-opt-qd.to"] = ann.to
    if ann.phase:
        out["x-opt-qd.phase"] = ann.phase
    return out


def raw_entries(buf: bytes, span: tuple[int, int] | None) -> list[bytes]:
    """The encoded (key + value) bytes of each non-router entry of the annotations at ``span``."""
    if span is None:
        return []
    pos = skip_value(buf, span[0] + 1)  # past the descriptor
    code = buf[pos]
    if code == 0x40:
        return []
    pos += 3 if code == 0xC1 else 9
    out = []
    while pos < span[1]:
        key, vpos = decode_value(buf, pos)
        end = skip_value(buf, vpos)
        if not is_router_key(key):
            out.append(buf[pos:end])
        pos = end
    return out


def span_bytes(buf: bytes, span: tuple[int, int] | None) -> bytes | None:
    return None if span is None else buf[span[0] : span[1]]


def check(old: bytes, new: bytes, ann: RouterAnnotations | None) -> None:
    """``new`` is ``old`` with router annotations ``ann``, everything else unchanged."""
    a = scan_message(old, complete=True)
    b = scan_message(new, complete=True)  # also checks the section order
    for name in ("header", "delivery_annotations", "properties", "application_properties"):
        assert span_bytes(new, getattr(b, name)) == span_bytes(old, getattr(a, name)), name
    assert new[b.body_start :] == old[a.body_start :]
    assert raw_entries(new, b.message_annotations) == raw_entries(old, a.message_annotations)
    got, want = decoded(new), decoded(old)
    assert got.pop("router_ann") == expected_router(ann)
    want.pop("router_ann")
    assert got == want
    back = read_router_annotations(new)
    assert back == (ann if ann is not None else RouterAnnotations())


# ---------------------------------------------------------------------------------------------
# round trips over every section combination
# ---------------------------------------------------------------------------------------------

NEW_ANN = [
    RouterAnnotations("0/A", ["0/A"]),
    RouterAnnotations("0/A", ["0/A", "0/B"], "svc/x", 2),
    RouterAnnotations(None, [], "only-to"),
    RouterAnnotations(None, [], None, 1),
]


@pytest.mark.parametrize("variant", list(MA_VARIANTS))
@pytest.mark.parametrize("body", list(BODIES))
def test_read_rewrite_strip(variant: str, body: str) -> None:
    ma, carried = MA_VARIANTS[variant]
    for shape in all_shapes():
        msg = build(ma, BODIES[body], **shape)
        info = scan_message(msg, complete=True)
        assert read_router_annotations(msg) == carried
        assert read_router_annotations(msg, info) == carried
        for ann in NEW_ANN:
            out = rewrite(msg, info, ann)
            check(msg, out, ann)
            assert rewrite(msg, None, ann) == out
            # replacing them again, and hopping on
            hop = with_hop(ann, "C")
            check(msg, rewrite(out, None, hop), hop)
            assert decoded(strip(out)) == decoded(strip(msg))
        stripped = strip(msg)
        check(msg, stripped, None)
        assert rewrite(msg, info, None) == stripped
        assert rewrite(msg, info, RouterAnnotations()) == stripped
        if carried.is_empty():
            assert stripped is msg
            assert strip(msg, info) is msg
        else:
            assert stripped is not msg


def test_section_presence_rules() -> None:
    plain = build()
    assert scan_message(plain).message_annotations is None
    # created only when there is something to put in it ...
    assert rewrite(plain, None, None) is plain
    assert rewrite(plain, None, RouterAnnotations()) is plain
    added = rewrite(plain, None, RouterAnnotations("0/A", ["0/A"]))
    info = scan_message(added)
    assert info.message_annotations is not None
    # ... right after the delivery annotations, before the properties
    assert info.message_annotations[0] == info.delivery_annotations[1]
    assert info.properties[0] == info.message_annotations[1]
    for shape in ({"da": False}, {"da": False, "header": False}, {"header": False}):
        msg = build(**shape)
        info = scan_message(rewrite(msg, None, RouterAnnotations(to="t")))
        before = info.delivery_annotations or info.header
        assert info.message_annotations[0] == (before[1] if before else 0)
    # a section holding only router keys is removed by a strip
    only = build(MA_VARIANTS["router"][0])
    assert scan_message(strip(only)).message_annotations is None
    assert strip(only) == plain
    # an existing section without router keys is left alone (even an empty map or null)
    for variant in ("empty", "null", "user"):
        msg = build(MA_VARIANTS[variant][0])
        assert strip(msg) is msg
        assert rewrite(msg, None, None) is msg


def test_user_entries_keep_their_encoding() -> None:
    # map32 and a sym32 key / str32 value, as some clients send: copied as they are
    key = b"\xb3\x00\x00\x00\x04user"
    value = b"\xb1\x00\x00\x00\x01v"
    entries = key + value
    ma = b"\x00\x53\x72\xd1" + (len(entries) + 4).to_bytes(4, "big") + b"\x00\x00\x00\x02" + entries
    msg = build(ma)
    out = rewrite(msg, None, RouterAnnotations("0/A", ["0/A"]))
    assert entries in out
    info = scan_message(out)
    assert out[info.message_annotations[1] - len(entries) : info.message_annotations[1]] == entries
    assert out[info.message_annotations[0] + 3] == 0xC1  # re-encoded compactly as map8
    assert decoded(out)["user_ann"] == [(symbol("user"), "v")]
    check(msg, out, RouterAnnotations("0/A", ["0/A"]))


def test_router_keys_as_strings_or_sym32_are_router_keys() -> None:
    entries = (
        b"\xa1\x0bx-opt-qd.to\xa1\x01t"  # str8 key
        b"\xb3\x00\x00\x00\x10x-opt-qd.ingress\xa1\x030/Z"  # sym32 key
        b"\xa3\x01k\x54\x05"
    )
    ma = b"\x00\x53\x72\xc1" + bytes((len(entries) + 1, 6)) + entries
    msg = build(ma)
    assert read_router_annotations(msg) == RouterAnnotations("0/Z", [], "t")
    out = strip(msg)
    assert out.endswith(PROPERTIES + APP_PROPS + BODIES["value-str"])
    assert read_router_annotations(out) == RouterAnnotations()
    assert decoded(out)["user_ann"] == [(symbol("k"), 5)]


def test_symbolic_section_descriptor() -> None:
    ma = enc(PDescribed(symbol("amqp:message-annotations:map"), dict([USER[0], *ROUTER])))
    msg = build(ma)
    assert read_router_annotations(msg) == ROUTER_ANN
    out = rewrite(msg, None, RouterAnnotations("0/Q", ["0/Q"]))
    assert out.startswith(HEADER + DELIVERY_ANN + ma[:31])  # the descriptor is kept
    assert read_router_annotations(out) == RouterAnnotations("0/Q", ["0/Q"])
    assert raw_entries(out, scan_message(out).message_annotations) == [enc(USER[0][0]) + enc(USER[0][1])]


def test_value_mentioning_the_prefix_is_not_a_router_key() -> None:
    msg = build(section(0x72, {symbol("k"): "x-opt-qd.trace"}))
    assert strip(msg) is msg
    assert read_router_annotations(msg) == RouterAnnotations()


def test_buffer_types() -> None:
    msg = build(MA_VARIANTS["mixed"][0], BODIES["data"])
    ann = RouterAnnotations("0/A", ["0/A"])
    want = rewrite(msg, None, ann)
    for buf in (bytearray(msg), memoryview(msg), memoryview(bytearray(msg))):
        assert bytes(rewrite(buf, None, ann)) == want
        assert bytes(strip(buf)) == strip(msg)
        assert read_router_annotations(buf) == ROUTER_ANN
    plain = memoryview(build(MA_VARIANTS["user"][0]))
    assert strip(plain) is plain


def test_layout_reads_and_rewrites_from_one_walk() -> None:
    for variant, (ma, carried) in MA_VARIANTS.items():
        msg = build(ma, BODIES["data"])
        info = scan_message(msg)
        layout = AnnotationLayout(msg, info)
        assert layout.has_router_keys == (variant in ("router", "mixed", "big-mixed"))
        assert layout.read() == carried
        hop = with_hop(layout.read(), "N")
        assert layout.rewrite(hop) == rewrite(msg, info, hop)
        assert layout.strip() == strip(msg, info)
        assert layout.rewrite(None) == strip(msg)
        assert AnnotationLayout(msg).read() == carried
        if not layout.has_router_keys:
            assert layout.strip() is msg


# ---------------------------------------------------------------------------------------------
# encodings
# ---------------------------------------------------------------------------------------------


def test_compact_encodings() -> None:
    msg = build()
    out = rewrite(msg, None, RouterAnnotations("0/A", ["0/A"], "t", -3))
    ma = span_bytes(out, scan_message(out).message_annotations)
    assert ma[:4] == b"\x00\x53\x72\xc1" and ma[5] == 8
    assert b"\xa3\x10x-opt-qd.ingress\xa1\x030/A" in ma
    assert b"\xa3\x0ex-opt-qd.trace\xc0\x06\x01\xa1\x030/A" in ma
    assert b"\xa3\x0bx-opt-qd.to\xa1\x01t" in ma
    assert b"\xa3\x0ex-opt-qd.phase\x54\xfd" in ma
    assert rewrite(msg, None, RouterAnnotations(phase=1000)).endswith(
        b"x-opt-qd.phase\x71\x00\x00\x03\xe8" + build(b"")[len(HEADER + DELIVERY_ANN) :]
    )
    with pytest.raises(ValueError):
        rewrite(msg, None, RouterAnnotations(phase=1 << 31))


@pytest.mark.parametrize(
    ("ann", "map_code"),
    [
        (RouterAnnotations("0/" + "n" * 300, ["0/" + "n" * 300]), 0xD1),  # str32, list32 by size
        (RouterAnnotations("0/A", [f"0/node-{i}" for i in range(300)]), 0xD1),  # list32 by count
        (RouterAnnotations("0/\u00e9\u4e2d", ["0/\u00e9\u4e2d"], "to/\u00fc", -(1 << 31)), 0xC1),
    ],
)
def test_large_and_unicode_values(ann: RouterAnnotations, map_code: int) -> None:
    for variant in ("none", "user", "mixed"):
        msg = build(MA_VARIANTS[variant][0])
        out = rewrite(msg, None, ann)
        check(msg, out, ann)
        ma = span_bytes(out, scan_message(out).message_annotations)
        assert ma[3] == map_code


# ---------------------------------------------------------------------------------------------
# mesh helpers
# ---------------------------------------------------------------------------------------------


def test_with_hop_and_trace_nodes() -> None:
    first = with_hop(None, "A")
    assert first == RouterAnnotations("0/A", ["0/A"])
    second = with_hop(RouterAnnotations(to="x", phase=1), "A")
    assert second == RouterAnnotations("0/A", ["0/A"], "x", 1)
    third = with_hop(first, "B")
    assert third == RouterAnnotations("0/A", ["0/A", "0/B"])
    assert first.trace == ["0/A"]  # not modified
    assert trace_nodes(third) == ["A", "B"]
    assert trace_nodes(RouterAnnotations(trace=["plain", "1/C"])) == ["plain", "C"]
    assert RouterAnnotations().is_empty() and not first.is_empty()
    with pytest.raises(AttributeError):
        first.other = 1  # type: ignore[attr-defined]  # slotted


def test_mesh_path() -> None:
    """Client -> A -> B -> C -> client: annotations grow hop by hop and vanish at the edge."""
    user = b"".join(enc(k) + enc(v) for k, v in USER[:2])
    client = build(ma_raw(0xC1, user, 4), BODIES["data"])
    wire = rewrite(client, None, with_hop(RouterAnnotations(to="svc"), "A"))
    for node in ("B", "C"):
        wire = rewrite(wire, None, with_hop(read_router_annotations(wire), node))
    assert read_router_annotations(wire) == RouterAnnotations("0/A", ["0/A", "0/B", "0/C"], "svc")
    assert strip(wire) == client


# ---------------------------------------------------------------------------------------------
# large messages and prefixes
# ---------------------------------------------------------------------------------------------

MB = 1 << 20


def big_message() -> bytes:
    return build(MA_VARIANTS["mixed"][0], section(0x75, bytes(range(256)) * (MB // 256)), footer=True)


def test_large_body_copied_once() -> None:
    msg = big_message()
    info = scan_message(msg)
    ann = RouterAnnotations("0/A", ["0/A", "0/B"], "svc", 1)
    out = rewrite(msg, info, ann)
    check(msg, out, ann)
    for fn in (lambda: rewrite(msg, info, ann), lambda: strip(msg, info)):
        fn()
        tracemalloc.start()
        try:
            fn()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert MB <= peak < 1.25 * MB, peak  # the result, and no second copy of the body
    copy_time = min(timeit.repeat(lambda: msg[10:], number=5, repeat=7)) / 5
    rewrite_time = min(timeit.repeat(lambda: rewrite(msg, info, ann), number=5, repeat=7)) / 5
    assert rewrite_time < 3 * copy_time + 50e-6, (rewrite_time, copy_time)


@pytest.mark.parametrize("variant", ["none", "user", "router", "mixed"])
def test_prefix_rewrite(variant: str) -> None:
    msg = build(MA_VARIANTS[variant][0], section(0x75, b"z" * 100_000), footer=True)
    body_start = scan_message(msg).body_start
    for ann in (None, RouterAnnotations("0/A", ["0/A"], "svc", 3)):
        whole = rewrite(msg, None, ann)
        full_info = scan_message(msg)
        for cut in (body_start, body_start + 1, body_start + 3, body_start + 7, 16384, 65536, len(msg)):
            prefix = msg[:cut]
            assert bytes(rewrite_prefix(prefix, full_info, ann)) + msg[cut:] == whole
            assert bytes(strip(prefix, full_info)) + msg[cut:] == strip(msg)
            assert read_router_annotations(prefix, full_info) == MA_VARIANTS[variant][1]
            if cut < body_start + 3:  # scan_message needs the body's section descriptor
                with pytest.raises(IncompleteError):
                    scan_message(prefix)
                continue
            info = scan_message(prefix)
            assert bytes(rewrite_prefix(prefix, None, ann)) + msg[cut:] == whole
            assert bytes(rewrite_prefix(prefix, info, ann)) + msg[cut:] == whole
            assert bytes(strip(prefix, info)) + msg[cut:] == strip(msg)
            assert read_router_annotations(prefix, info) == MA_VARIANTS[variant][1]
        for cut in (0, 5, body_start - 1, body_start):
            with pytest.raises(IncompleteError):
                rewrite_prefix(msg[:cut], None, ann)
    with pytest.raises(IncompleteError):  # an info that does not fit the prefix
        rewrite_prefix(msg[: body_start - 1], scan_message(msg), None)


def test_prefix_before_annotations_is_not_complete() -> None:
    """A prefix ending before the annotations must not get a second annotations section."""
    msg = build(MA_VARIANTS["user"][0])
    cut = len(HEADER + DELIVERY_ANN)
    with pytest.raises(IncompleteError):
        rewrite_prefix(msg[:cut], None, RouterAnnotations(to="x"))


# ---------------------------------------------------------------------------------------------
# malformed input
# ---------------------------------------------------------------------------------------------


def ma_raw(code: int, entries: bytes, count: int) -> bytes:
    if code == 0xC1:
        return b"\x00\x53\x72\xc1" + bytes((len(entries) + 1, count)) + entries
    return b"\x00\x53\x72\xd1" + (len(entries) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + entries


TO_ENTRY = b"\xa3\x0bx-opt-qd.to\xa1\x01t"

# Malformed entries up to the last router key (where the walk must go).
MALFORMED_SECTIONS = {
    "odd-count": ma_raw(0xC1, b"\xa3\x01k\x54\x01" + TO_ENTRY, 3),
    "count-too-big": ma_raw(0xC1, b"\xa3\x01k\x54\x01" + TO_ENTRY, 6),
    "count-too-small": ma_raw(0xC1, b"\xa3\x01k\x54\x01" + TO_ENTRY + b"\xa3\x01j\x54\x02", 2),
    "key-overruns": ma_raw(0xC1, b"\xa3\x20x-opt-qd.to\xa1\x01t", 2),
    "key-overruns-32": ma_raw(0xC1, b"\xb3\x00\x01\x00\x00x-opt-qd.to\xa1\x01t", 2),
    "value-overruns": ma_raw(0xC1, b"\xa3\x0bx-opt-qd.to\xa1\x09t", 2),
    "value-unknown-constructor": ma_raw(0xC1, b"\xa3\x0bx-opt-qd.to\x02\x01", 2),
    "key-unknown-constructor": ma_raw(0xC1, b"\x02\x01" + TO_ENTRY, 4),
    "key-described-truncated": ma_raw(0xC1, b"\x00\xa3\x05ab" + TO_ENTRY, 4),
    "map32-count": ma_raw(0xD1, TO_ENTRY + b"\xa3\x01k\x54\x01", 0xFFFFFFF0),
    "router-value-overruns": ma_raw(0xC1, b"\xa3\x0ex-opt-qd.trace\xa1\x09v", 2),
}


@pytest.mark.parametrize("name", list(MALFORMED_SECTIONS))
def test_malformed_annotations(name: str) -> None:
    msg = build(MALFORMED_SECTIONS[name])
    info = scan_message(msg)  # the section's own size is consistent: only its entries are bad
    with pytest.raises(MalformedError):
        read_router_annotations(msg, info)
    with pytest.raises(MalformedError):
        rewrite(msg, info, RouterAnnotations("0/A", ["0/A"]))
    with pytest.raises(MalformedError):
        strip(msg, info)


def test_entries_after_the_last_router_key_are_not_walked() -> None:
    """Documented limit: a broken tail without ``x-opt-qd.`` is copied as it is, not diagnosed."""
    tail = b"\xa3\x01k\x54\x01\xa3\x05j"  # the second entry is cut short
    msg = build(ma_raw(0xC1, TO_ENTRY + tail, 4))
    out = strip(msg)
    assert tail in out
    ann = RouterAnnotations("0/A", ["0/A"])
    assert tail in rewrite(build(ma_raw(0xC1, tail, 4)), None, ann)
    assert strip(build(ma_raw(0xC1, tail, 4))) == build(ma_raw(0xC1, tail, 4))


@pytest.mark.parametrize(
    "entries",
    [
        b"\xa3\x0ex-opt-qd.trace\x54\x01",  # not a list
        b"\xa3\x0ex-opt-qd.trace\xc0\x03\x02\x54\x01",  # list of ints
        b"\xa3\x0ex-opt-qd.phase\xa1\x011",  # phase a string
        b"\xa3\x0ex-opt-qd.phase\x41",  # phase a boolean
        b"\xa3\x10x-opt-qd.ingress\x54\x01",  # ingress an int
        b"\xa3\x0bx-opt-qd.to\xa0\x01t",  # to a binary
        b"\xa3\x0bx-opt-qd.to\xa1\x02\xff\xfe",  # invalid UTF-8
    ],
)
def test_router_values_of_the_wrong_type(entries: bytes) -> None:
    msg = build(ma_raw(0xC1, entries, 2))
    with pytest.raises(MalformedError):
        read_router_annotations(msg)
    out = strip(msg)  # stripping never needs the values
    assert scan_message(out).message_annotations is None


def test_null_router_values_read_as_absent() -> None:
    keys = ("x-opt-qd.ingress", "x-opt-qd.trace", "x-opt-qd.to", "x-opt-qd.phase")
    entries = b"".join(enc(symbol(k)) + b"\x40" for k in keys)
    assert read_router_annotations(build(ma_raw(0xC1, entries, 8))) == RouterAnnotations()


def test_malformed_messages_and_infos() -> None:
    msg = build(MA_VARIANTS["mixed"][0])
    info = scan_message(msg)
    for bad in (msg[:10], b"\x01\x02", b"\x00\x53\x72\x54\x01" + BODIES["value-str"]):
        for fn in (read_router_annotations, strip, lambda b: rewrite(b, None, None)):
            with pytest.raises(MalformedError):
                fn(bad)
    wrong = scan_message(msg)
    wrong.message_annotations = (0, 10)  # the header, not message annotations
    with pytest.raises(MalformedError):
        rewrite(msg, wrong, None)
    shifted = scan_message(msg)
    shifted.message_annotations = (info.message_annotations[0], info.message_annotations[1] - 1)
    with pytest.raises(MalformedError):
        read_router_annotations(msg, shifted)
    past = scan_message(msg)
    past.message_annotations = (info.message_annotations[0], len(msg) + 5)
    with pytest.raises(MalformedError):
        rewrite(msg, past, RouterAnnotations(to="x"))


# ---------------------------------------------------------------------------------------------
# cost
# ---------------------------------------------------------------------------------------------


def rpc_message() -> bytes:
    msg = Message(
        id="req-000123", address="service/rpc", reply_to="amqp:/_topo/0/A/temp.abcdefgh",
        correlation_id="corr-000123", content_type="application/json",
        body=b'{"method": "get", "params": {"key": "v1"}}',
    )
    msg.annotations = {symbol("x-opt-user-a"): "alpha", symbol("x-opt-user-b"): 7}
    msg.properties = {"tenant": "t1"}
    return msg.encode()


def test_benchmark_rewrite_small(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints the per-message costs on the inter-router hot path (best of 5)."""
    msg = rpc_message()
    assert 190 <= len(msg) <= 240
    info = scan_message(msg)
    ann = with_hop(RouterAnnotations(to="service/rpc"), "A")
    wire = rewrite(msg, info, ann)
    check(msg, wire, ann)
    wire_info = scan_message(wire)

    def hop() -> None:  # what a transit router does: read, then rewrite with its own hop
        layout = AnnotationLayout(wire, wire_info)
        layout.rewrite(with_hop(layout.read(), "B"))

    n = 2000
    cases = {
        "rewrite (add)": lambda: rewrite(msg, info, ann),
        "rewrite (replace)": lambda: rewrite(wire, wire_info, ann),
        "read": lambda: read_router_annotations(wire, wire_info),
        "layout+read+with_hop+rewrite": hop,
        "strip (router keys)": lambda: strip(wire, wire_info),
        "strip (none)": lambda: strip(msg, info),
    }
    results = {name: min(timeit.repeat(fn, number=n, repeat=5)) / n for name, fn in cases.items()}
    with capsys.disabled():
        print(f"\n{len(msg)}-byte RPC message: " + ", ".join(
            f"{k} {v * 1e6:.2f} us" for k, v in results.items()))
    assert results["rewrite (add)"] < 100e-6  # generous: only catches pathologies
