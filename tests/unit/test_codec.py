"""Tests for router.amqp.codec, checked against python-qpid-proton's encodings."""

from __future__ import annotations

import random
import struct
import uuid
from typing import Any

import pytest
from proton import (
    UNDESCRIBED,
    Array,
    Data,
    Message,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
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
from proton import Described as PDescribed

from router.amqp.codec import (
    Described,
    FlowEchoDetector,
    IncompleteError,
    MalformedError,
    MessageInfo,
    Symbol,
    decode_section,
    decode_value,
    message_annotations,
    scan_message,
    skip_value,
)

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def enc(*objs: Any) -> bytes:
    """Encode Python/proton objects with proton.Data."""
    data = Data()
    for obj in objs:
        data.put_object(obj)
    return data.encode()


def proton_decode(buf: bytes) -> Any:
    """Decode with proton and normalise (while ``data`` is alive: binaries are views into it)."""
    data = Data()
    data.decode(buf)
    data.rewind()
    data.next()
    return norm(data.get_object())


def norm(obj: Any) -> Any:
    """Map a proton-decoded object onto the representation codec.decode_value uses."""
    if isinstance(obj, PDescribed):
        return Described(norm(obj.descriptor), norm(obj.value))
    if isinstance(obj, Array):
        items = [norm(e) for e in obj.elements]
        if obj.descriptor is not UNDESCRIBED:
            items = [Described(norm(obj.descriptor), e) for e in items]
        return items
    if isinstance(obj, dict):
        return {norm(k): norm(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [norm(e) for e in obj]
    if isinstance(obj, symbol):
        return Symbol(obj)
    if isinstance(obj, decimal32):
        return (int(obj) & 0xFFFFFFFF).to_bytes(4, "big")
    if isinstance(obj, decimal64):
        return (int(obj) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")
    if isinstance(obj, decimal128):
        return bytes(obj)
    if isinstance(obj, float32):
        return struct.unpack(">f", struct.pack(">f", obj))[0]
    if isinstance(obj, memoryview):  # proton returns binaries as memoryviews
        return obj.tobytes()
    for base in (bool, int, float, str, bytes):  # drop proton's subclasses (ubyte, char, ...)
        if isinstance(obj, base):
            return base(obj)
    return obj


def same(a: Any, b: Any) -> bool:
    """Deep equality that also checks str/Symbol and bool/int distinctions."""
    if type(a) in (bool, Symbol) or type(b) in (bool, Symbol):
        return type(a) is type(b) and a == b
    if isinstance(a, Described) and isinstance(b, Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a == b and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def section(code: int, value: Any) -> bytes:
    return enc(PDescribed(ulong(code), value))


# ---------------------------------------------------------------------------------------------
# decode_value / skip_value
# ---------------------------------------------------------------------------------------------

U = uuid.UUID("12345678-1234-5678-9abc-def012345678")

ROUND_TRIP_CASES: list[tuple[str, Any]] = [
    ("null", None),
    ("true", True),
    ("false", False),
    ("ubyte", ubyte(0)),
    ("ubyte-max", ubyte(255)),
    ("ushort", ushort(65535)),
    ("uint0", uint(0)),
    ("smalluint", uint(7)),
    ("uint", uint(0xFFFFFFFF)),
    ("ulong0", ulong(0)),
    ("smallulong", ulong(200)),
    ("ulong", ulong(0xFFFFFFFFFFFFFFFF)),
    ("byte", byte(-128)),
    ("short", short(-32768)),
    ("smallint", int32(-5)),
    ("int", int32(-(2**31))),
    ("smalllong", -7),
    ("long", 2**62),
    ("long-min", -(2**63)),
    ("float", float32(1.5)),
    ("float-inexact", float32(0.1)),
    ("double", 3.141592653589793),
    ("decimal32", decimal32(0x22500001)),
    ("decimal64", decimal64(0x2238000000000001)),
    ("decimal128", decimal128(bytes(range(16)))),
    ("char", char("x")),
    ("char-astral", char("\U0001f600")),
    ("timestamp", timestamp(1_700_000_000_123)),
    ("timestamp-negative", timestamp(-1000)),
    ("uuid", U),
    ("vbin8", b"\x00\x01binary"),
    ("vbin8-empty", b""),
    ("vbin32", bytes(range(256)) * 2),
    ("str8", "héllo wörld"),
    ("str8-empty", ""),
    ("str32", "x" * 300 + "€"),
    ("sym8", symbol("amqp:foo")),
    ("sym32", symbol("s" * 256)),
    ("list0", []),
    ("list", [1, "two", None, True, [3.0, b"x"]]),
    ("list-large", list(range(100))),
    ("map-empty", {}),
    ("map", {symbol("a"): 1, "b": [1, 2], ulong(3): {"nested": None}}),
    ("map-large", {f"k{i}": i for i in range(100)}),
    ("array-int", Array(UNDESCRIBED, Data.INT, 1, -2, 3)),
    ("array-empty", Array(UNDESCRIBED, Data.INT)),
    ("array-bool", Array(UNDESCRIBED, Data.BOOL, True, False, True)),
    ("array-str", Array(UNDESCRIBED, Data.STRING, "a", "bc")),
    ("array-sym", Array(UNDESCRIBED, Data.SYMBOL, symbol("x"), symbol("yz"))),
    ("array-ulong", Array(UNDESCRIBED, Data.ULONG, ulong(1), ulong(2**40))),
    ("array-double", Array(UNDESCRIBED, Data.DOUBLE, 1.5, -2.25)),
    ("array-uuid", Array(UNDESCRIBED, Data.UUID, U, U)),
    ("array-binary", Array(UNDESCRIBED, Data.BINARY, b"a", b"")),
    ("array-described", Array(symbol("desc"), Data.STRING, "a", "b")),
    ("array-described-ulong", Array(ulong(0x1234), Data.INT, 5, 6)),
    ("described-ulong", PDescribed(ulong(0x13), [1, 2])),
    ("described-symbol", PDescribed(symbol("amqp:foo"), {"k": "v"})),
    ("described-nested", PDescribed(ulong(1), PDescribed(ulong(2), "x"))),
    ("described-in-list", [PDescribed(ulong(0x70), []), 1]),
]


@pytest.mark.parametrize(("name", "obj"), ROUND_TRIP_CASES, ids=[c[0] for c in ROUND_TRIP_CASES])
def test_decode_value_matches_proton(name: str, obj: Any) -> None:
    buf = enc(obj)
    expected = proton_decode(buf)
    value, end = decode_value(buf, 0)
    assert end == len(buf)
    assert same(value, expected), (name, buf.hex(), value, expected)
    assert skip_value(buf, 0) == len(buf)
    # At an offset, in a memoryview, followed by more data.
    padded = b"\xff\xfe" + buf + b"\x40"
    value2, end2 = decode_value(memoryview(padded), 2)
    assert end2 == 2 + len(buf) and same(value2, expected)
    assert skip_value(memoryview(padded), 2) == 2 + len(buf)


def test_symbol_and_string_types() -> None:
    sym, _ = decode_value(enc(symbol("abc")), 0)
    text, _ = decode_value(enc("abc"), 0)
    assert type(sym) is Symbol and sym == "abc" and repr(sym) == "Symbol('abc')"
    assert type(text) is str


# Hand-made encodings for forms proton does not choose itself.
HANDMADE_CASES: list[tuple[str, bytes, Any]] = [
    ("boolean-true", b"\x56\x01", True),
    ("boolean-false", b"\x56\x00", False),
    ("list8", b"\xc0\x05\x03\x41\x40\x52\x07", [True, None, 7]),
    ("list8-empty", b"\xc0\x01\x00", []),
    ("list32-empty", b"\xd0\x00\x00\x00\x04\x00\x00\x00\x00", []),
    ("map8", b"\xc1\x07\x02\xa3\x01k\xa1\x01v", {Symbol("k"): "v"}),
    ("array8", b"\xe0\x04\x02\x50\x01\x02", [1, 2]),
    ("array8-str8", b"\xe0\x06\x02\xa1\x01a\x01b", ["a", "b"]),
    ("array8-lists", b"\xe0\x07\x02\xc0\x01\x00\x02\x01\x43", [[], [0]]),
    ("array8-null", b"\xe0\x02\x03\x40", [None, None, None]),
    ("array-of-arrays", b"\xe0\x0b\x02\xe0\x03\x01\x50\x07\x04\x02\x50\x08\x09", [[7], [8, 9]]),
    ("vbin32-short", b"\xb0\x00\x00\x00\x02hi", b"hi"),
    ("str32-short", b"\xb1\x00\x00\x00\x02hi", "hi"),
    ("sym32-short", b"\xb3\x00\x00\x00\x02hi", Symbol("hi")),
    ("smallint-negative", b"\x54\xff", -1),
    ("smalllong-negative", b"\x55\x80", -128),
    ("uint-full-small", b"\x70\x00\x00\x00\x01", 1),
    ("ulong-full-small", b"\x80" + bytes(7) + b"\x05", 5),
    ("map-unhashable-key", b"\xc1\x05\x02\x45\xa1\x01v", [([], "v")]),
    ("described-descriptor-described", b"\x00\x00\x53\x01\x53\x02\x40", Described(Described(1, 2), None)),
]


@pytest.mark.parametrize(("name", "buf", "expected"), HANDMADE_CASES, ids=[c[0] for c in HANDMADE_CASES])
def test_decode_handmade(name: str, buf: bytes, expected: Any) -> None:
    value, end = decode_value(buf, 0)
    assert end == len(buf)
    assert same(value, expected), (name, value, expected)
    assert skip_value(buf, 0) == len(buf)
    # proton agrees where it can decode the form at all
    if name not in ("map-unhashable-key", "described-descriptor-described"):
        assert same(proton_decode(buf), expected)


def test_decode_sequence_of_values() -> None:
    buf = enc(1, "two", symbol("three"), [4])
    pos = 0
    out = []
    while pos < len(buf):
        assert skip_value(buf, pos) == decode_value(buf, pos)[1]
        value, pos = decode_value(buf, pos)
        out.append(value)
    assert out == [1, "two", "three", [4]]


@pytest.mark.parametrize(("name", "obj"), ROUND_TRIP_CASES, ids=[c[0] for c in ROUND_TRIP_CASES])
def test_truncated_values_raise_incomplete(name: str, obj: Any) -> None:
    buf = enc(obj)
    for cut in range(len(buf)):
        with pytest.raises(IncompleteError):
            decode_value(buf[:cut], 0)
        with pytest.raises(IncompleteError):
            skip_value(buf[:cut], 0)


@pytest.mark.parametrize(
    "buf",
    [
        b"\x01",  # unknown constructor
        b"\x57",
        b"\xff",
        b"\xc0\x00\x00",  # list8 size below its count field
        b"\xc0\x02\x05\x40",  # count larger than the size allows
        b"\xc0\x03\x01\x40\x40",  # size larger than the items
        b"\xc1\x02\x01\x40",  # map with an odd count
        b"\xe0\x02\x01\x00",  # array element constructor 0x00 without descriptor room
        b"\xe0\x02\x01\x01",  # unknown array element constructor
        b"\xa1\x02\xff\xfe",  # invalid UTF-8
        b"\x73\x00\x11\x00\x00",  # char out of range
        b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40",  # 4e9 null elements
        b"\xd0\x00\x00\x00\x02\x00\x00\x00\x00",  # list32 size below its count field
        b"\xc1\x00\x00",  # map8 size below its count field
        b"\xd1\x00\x00\x00\x02\x00\x00\x00\x00",  # map32 size below its count field
        b"\xe0\x01\x00",  # array8 size below count + constructor
        b"\xf0\x00\x00\x00\x04\x00\x00\x00\x00\x40",  # array32 size below count + constructor
        b"\xe0\x04\x01\x50\x01\x02",  # array size larger than its elements
        b"\xe0\x03\x02\x50\x01\x02",  # array count larger than its size allows
    ],
)
def test_malformed_values(buf: bytes) -> None:
    with pytest.raises(MalformedError):
        decode_value(buf, 0)


def test_unknown_constructor_is_not_incomplete() -> None:
    with pytest.raises(MalformedError) as info:
        decode_value(b"\x01", 0)
    assert not isinstance(info.value, IncompleteError)
    with pytest.raises(MalformedError) as info:
        skip_value(b"\x00\x53\x01\x02", 0)
    assert not isinstance(info.value, IncompleteError)


def test_deep_nesting_is_malformed_not_recursion_error() -> None:
    buf = b"\x00" * 100_000 + b"\x40\x40"
    with pytest.raises(MalformedError):
        decode_value(buf, 0)
    assert skip_value(b"\x00" * 100_000 + b"\x40" * 100_001, 0) == 200_001  # skip is iterative


def test_skip_value_does_not_look_inside() -> None:
    # skip_value trusts size fields: a list whose items are garbage is still stepped over.
    buf = b"\xc0\x03\x02\x01\x02" + b"\x40"
    assert skip_value(buf, 0) == 5
    with pytest.raises(MalformedError):
        decode_value(buf, 0)


def test_memoryview_of_signed_bytes() -> None:
    buf = enc([-1, "x"])
    assert decode_value(memoryview(buf).cast("b"), 0) == ([-1, "x"], len(buf))
    assert skip_value(memoryview(buf).cast("b"), 0) == len(buf)
    msg = Message(address="a", body=1).encode()
    assert scan_message(memoryview(msg).cast("b")).to == "a"


def test_negative_position() -> None:
    with pytest.raises(MalformedError):
        decode_value(b"\x40", -1)
    with pytest.raises(MalformedError):
        skip_value(b"\x40", -1)


# ---------------------------------------------------------------------------------------------
# scan_message
# ---------------------------------------------------------------------------------------------


def spans_decode(buf: bytes, info: MessageInfo) -> dict[str, Any]:
    out = {}
    for name in (
        "header",
        "delivery_annotations",
        "message_annotations",
        "properties",
        "application_properties",
    ):
        span = getattr(info, name)
        if span is not None:
            out[name] = decode_section(buf, span)
    return out


def check_against_proton(buf: bytes, info: MessageInfo) -> None:
    """The spans tile the pre-body part and agree with what proton decodes."""
    msg = Message()
    msg.decode(buf)
    assert info.to == msg.address
    spans = [
        s
        for s in (
            info.header,
            info.delivery_annotations,
            info.message_annotations,
            info.properties,
            info.application_properties,
        )
        if s is not None
    ]
    pos = 0
    for start, end in spans:
        assert start == pos
        pos = end
    assert pos == info.body_start
    if info.message_annotations is not None:
        assert message_annotations(buf, info.message_annotations) == (msg.annotations or {})
    else:
        assert not msg.annotations
    if info.application_properties is not None:
        assert decode_section(buf, info.application_properties) == (msg.properties or {})


MESSAGES: list[tuple[str, Message]] = [
    ("plain", Message(body="hello")),
    ("address", Message(address="queue/a", body="hello")),
    ("address-long", Message(address="q" * 300, body="x")),
    ("address-unicode", Message(address="qü€", body="x")),
    ("header", Message(durable=True, priority=7, ttl=5000, body="x")),
    ("header-first-acquirer", Message(first_acquirer=True, delivery_count=3, address="a", body="x")),
    ("delivery-annotations", Message(instructions={symbol("x-opt-i"): 1}, address="a", body=1)),
    ("message-annotations", Message(annotations={symbol("x-opt-trace"): ["r1", "r2"]}, address="a", body=1)),
    ("app-properties", Message(properties={"k": "v", "n": 5}, address="t", body=b"bin")),
    (
        "everything",
        Message(
            id="id-1",
            user_id=b"user",
            address="dest",
            subject="subj",
            reply_to="rep",
            correlation_id=uuid.UUID(int=5),
            content_type=symbol("text/plain"),
            durable=True,
            instructions={symbol("x-i"): 1},
            annotations={symbol("x-a"): "v", ulong(5): 6},
            properties={"p": 1.5},
            body="body",
        ),
    ),
    ("id-ulong", Message(id=ulong(77), address="a", body="x")),
    ("id-uuid", Message(id=uuid.UUID(int=9), user_id=b"u" * 300, address="a", body="x")),
    ("body-data", Message(body=b"\x00\x53\x77data", inferred=True, address="a")),
    ("body-value-binary", Message(body=b"raw", address="a")),
    ("body-sequence", Message(body=[1, 2, 3], inferred=True, address="a")),
    ("body-value-list", Message(body=[1, 2, 3], address="a")),
    ("body-value-map", Message(body={"a": 1}, address="a")),
    ("body-large", Message(body=b"z" * 1_000_000, address="big")),
]


@pytest.mark.parametrize(("name", "msg"), MESSAGES, ids=[m[0] for m in MESSAGES])
def test_scan_proton_messages(name: str, msg: Message) -> None:
    buf = msg.encode()
    info = scan_message(buf)
    check_against_proton(buf, info)
    assert scan_message(memoryview(buf)).to == info.to
    body_code = buf[info.body_start + 2]
    assert buf[info.body_start : info.body_start + 2] == b"\x00\x53"
    assert body_code in (0x75, 0x76, 0x77)
    if name == "body-data":
        assert body_code == 0x75
    if name == "body-sequence":
        assert body_code == 0x76
    # Only the part before the body and the body's descriptor are needed.
    head = buf[: info.body_start + 3]
    info2 = scan_message(head)
    assert (info2.to, info2.body_start, info2.properties) == (info.to, info.body_start, info.properties)


def test_scan_reports_all_sections() -> None:
    msg = Message(
        address="dest",
        durable=True,
        instructions={symbol("x-i"): 1},
        annotations={symbol("x-a"): "v"},
        properties={"p": 1},
        body="body",
    )
    buf = msg.encode()
    info = scan_message(buf)
    assert info.to == "dest"
    assert None not in (
        info.header,
        info.delivery_annotations,
        info.message_annotations,
        info.properties,
        info.application_properties,
    )
    decoded = spans_decode(buf, info)
    assert decoded["header"][0] is True
    assert decoded["delivery_annotations"] == {"x-i": 1}
    assert decoded["message_annotations"] == {"x-a": "v"}
    assert decoded["properties"][2] == "dest"
    assert decoded["application_properties"] == {"p": 1}
    assert decode_value(buf[info.header[0] : info.header[1]], 0) == (Described(0x70, [True]), 7)


def test_scan_without_header_and_properties() -> None:
    buf = section(0x72, {symbol("x-a"): 1}) + section(0x77, "body")
    info = scan_message(buf)
    assert info.header is None and info.properties is None and info.to is None
    assert info.message_annotations == (0, len(section(0x72, {symbol("x-a"): 1})))
    assert message_annotations(buf, info.message_annotations) == {"x-a": 1}
    assert message_annotations(buf, None) == {}


def test_scan_body_only() -> None:
    buf = section(0x75, b"payload")
    info = scan_message(buf)
    assert info.body_start == 0 and info.to is None


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ([], None),
        ([None], None),
        ([None, None], None),
        (["id"], None),
        ([None, None, None], None),
        ([None, None, "addr"], "addr"),
        (["id", b"user", symbol("sym-addr")], "sym-addr"),
        ([ulong(5), None, "a" * 1000, "subject", "reply"], "a" * 1000),
        ([[1, 2, {"nested": "x"}], b"u" * 400, symbol("s" * 300)], "s" * 300),
    ],
)
def test_scan_to_forms(props: list[Any], expected: str | None) -> None:
    buf = section(0x70, [True]) + section(0x73, props) + section(0x77, None)
    info = scan_message(buf)
    assert info.to == expected
    assert type(info.to) in (str, type(None))
    assert decode_section(buf, info.properties) == norm(props)


@pytest.mark.parametrize(
    "props",
    [
        b"\xc0\x07\x03\x40\x40\xa1\x02q1",  # list8 / str8
        b"\xd0\x00\x00\x00\x0a\x00\x00\x00\x03\x40\x40\xa3\x02q1",  # list32 / sym8
        b"\xc0\x0a\x03\x40\x40\xb1\x00\x00\x00\x02q1",  # str32
        b"\xc0\x0a\x03\x40\x40\xb3\x00\x00\x00\x02q1",  # sym32
    ],
)
def test_scan_to_encodings(props: bytes) -> None:
    buf = b"\x00\x53\x73" + props + section(0x77, 1)
    assert scan_message(buf).to == "q1"


def test_scan_descriptor_forms() -> None:
    props = enc(["id", None, "addr"])
    ulong_form = b"\x00\x80" + (0x73).to_bytes(8, "big") + props
    header_sym = enc(PDescribed(symbol("amqp:header:list"), [True]))
    ma_sym = enc(PDescribed(symbol("amqp:message-annotations:map"), {symbol("x"): 1}))
    body_sym = enc(PDescribed(symbol("amqp:amqp-value:*"), "v"))
    buf = header_sym + ma_sym + ulong_form + body_sym
    info = scan_message(buf)
    assert info.to == "addr"
    assert info.header == (0, len(header_sym))
    assert info.message_annotations == (len(header_sym), len(header_sym) + len(ma_sym))
    assert info.properties == (len(header_sym) + len(ma_sym), len(buf) - len(body_sym))
    assert info.body_start == len(buf) - len(body_sym)
    assert message_annotations(buf, info.message_annotations) == {"x": 1}
    buf2 = b"\x00\x80" + (0x75).to_bytes(8, "big") + enc(b"data")
    assert scan_message(buf2).body_start == 0


def test_scan_footer_without_body_and_complete_flag() -> None:
    pre = section(0x70, [True]) + section(0x73, [None, None, "a"])
    info = scan_message(pre + section(0x78, {symbol("f"): 1}))
    assert info.body_start == len(pre)
    # Proton encodes a message with no body as header + properties only.
    buf = Message(address="a").encode()
    with pytest.raises(IncompleteError):
        scan_message(buf)
    info = scan_message(buf, complete=True)
    assert info.body_start == len(buf) and info.to == "a"
    assert scan_message(b"", complete=True).body_start == 0


@pytest.mark.parametrize(("name", "msg"), MESSAGES[:12], ids=[m[0] for m in MESSAGES[:12]])
def test_scan_truncated_raises_incomplete(name: str, msg: Message) -> None:
    buf = msg.encode()
    info = scan_message(buf)
    for cut in range(info.body_start + 3):  # the body's descriptor tells where the body starts
        with pytest.raises(IncompleteError):
            scan_message(buf[:cut])
    for cut in range(info.body_start + 3, len(buf) + 1):
        assert scan_message(buf[:cut]).body_start == info.body_start


@pytest.mark.parametrize(
    "buf",
    [
        b"\x40",  # not a described section
        b"\xa1\x01x",
        b"\x00\x53\x14\x45",  # descriptor outside 0x70..0x78
        b"\x00\x53\x6f\x45",
        b"\x00\xa3\x08amqp:foo\x45",  # unknown symbolic descriptor
        b"\x00\x41\x45",  # boolean descriptor
        b"\x00\x53\x73\x45\x00\x53\x70\x45\x00\x53\x77\x40",  # header after properties
        b"\x00\x53\x70\x45\x00\x53\x70\x45\x00\x53\x77\x40",  # header twice
        b"\x00\x53\x70\xa1\x01x\x00\x53\x77\x40",  # header is not a list
        b"\x00\x53\x72\x45\x00\x53\x77\x40",  # message annotations are not a map
        b"\x00\x53\x73\xc0\x05\x03\x40\x40\x54\x01\x00\x53\x77\x40",  # to is an int
        b"\x00\x53\x73\xc0\x05\x03\x40\x40\xa1\x05abcde\x00\x53\x77\x40",  # to overruns the list
        b"\x00\x53\x73\xc0\x04\x03\x40\xa0\x10\x00\x53\x77\x40" + bytes(20),  # user-id overruns
        b"\x00\x53\x73\xc0\x06\x03\x40\x40\xa1\x02\xff\xfe\x00\x53\x77\x40",  # to is bad UTF-8
        b"\x00\x53\x73\xc0\x00\x00\x00\x53\x77\x40",  # list8 size 0
        b"\x00\x53\x73\xc0\x03\x03\x40\x40\x00\x53\x77\x40",  # count 3, room for 2 fields
        b"\x00" * 100_000,  # descriptor nested too deeply
    ],
)
def test_scan_malformed(buf: bytes) -> None:
    with pytest.raises(MalformedError) as info:
        scan_message(buf)
    assert not isinstance(info.value, IncompleteError)


def test_message_info_repr() -> None:
    info = scan_message(Message(address="a", body=1).encode())
    assert repr(info).startswith("MessageInfo(to='a', header=(0, ")


def test_message_annotations_errors() -> None:
    buf = section(0x72, {symbol("x"): 1}) + section(0x77, 1)
    info = scan_message(buf)
    start, end = info.message_annotations
    with pytest.raises(MalformedError):
        message_annotations(buf, (start, end + 1))
    null_ma = b"\x00\x53\x72\x40"
    assert message_annotations(null_ma, (0, 4)) == {}
    list_ma = b"\x00\x53\x72\x45"
    with pytest.raises(MalformedError):
        message_annotations(list_ma, (0, 4))


# ---------------------------------------------------------------------------------------------
# garbage
# ---------------------------------------------------------------------------------------------


def test_random_garbage_only_raises_malformed() -> None:
    rng = random.Random(20240531)
    seeds = [m.encode()[:2000] for _, m in MESSAGES] + [enc(obj) for _, obj in ROUND_TRIP_CASES]
    for case in range(2000):
        if case % 2:
            buf = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 80)))
        else:  # mutate a valid encoding
            b = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 4)):
                if b:
                    b[rng.randrange(len(b))] = rng.getrandbits(8)
            if b and rng.random() < 0.3:
                del b[rng.randrange(len(b)) :]
            buf = bytes(b)
        pos = rng.randrange(0, 3) if buf else 0
        try:
            value, end = decode_value(buf, pos)
        except MalformedError:
            end = None
        else:
            assert pos < end <= len(buf)
            assert skip_value(buf, pos) == end  # decodable => skippable to the same place
        try:
            end2 = skip_value(buf, pos)
        except MalformedError:
            pass
        else:
            assert pos < end2 <= len(buf)
        try:
            info = scan_message(buf)
        except MalformedError:
            pass
        else:
            assert 0 <= info.body_start < len(buf)
            if info.message_annotations is not None:
                try:
                    message_annotations(buf, info.message_annotations)
                except MalformedError:
                    pass
        det = FlowEchoDetector(all_forms=True)
        det.feed(buf)
        det.feed(buf[::-1])


# ---------------------------------------------------------------------------------------------
# FlowEchoDetector
# ---------------------------------------------------------------------------------------------


def frame(channel: int, performative: bytes, payload: bytes = b"") -> bytes:
    body = performative + payload
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def flow(
    channel: int,
    handle: int | None,
    echo: bool | None,
    descriptor: Any = None,
    properties: dict[Any, Any] | None = None,
) -> bytes:
    fields: list[Any] = [uint(10), uint(100), uint(20), uint(200)]
    if handle is not None or echo is not None:
        fields += [None if handle is None else uint(handle), uint(0), uint(50), uint(0), False, echo]
    if properties is not None:
        fields.append(properties)
    return frame(channel, enc(PDescribed(ulong(0x13) if descriptor is None else descriptor, fields)))


def transfer(channel: int, handle: int, delivery_id: int, body: Any = "payload") -> bytes:
    perf = enc(
        PDescribed(
            ulong(0x14), [uint(handle), uint(delivery_id), delivery_id.to_bytes(4, "big"), uint(0), False]
        )
    )
    return frame(channel, perf, Message(address="q", body=body).encode())


def test_flow_frame_is_valid_proton_encoding() -> None:
    f = flow(3, 7, True)
    size, doff, ftype, channel = struct.unpack_from(">IBBH", f)
    assert (size, doff, ftype, channel) == (len(f), 2, 0, 3)
    perf = proton_decode(f[8:])
    assert perf.descriptor == 0x13 and perf.value[4] == 7 and perf.value[9] is True


def test_finds_echo_flows() -> None:
    det = FlowEchoDetector()
    assert det.feed(flow(1, 5, True)) == [(1, 5)]
    assert det.feed(flow(0, None, True)) == [(0, None)]  # session-level flow
    assert det.feed(flow(2, 3, False)) == []
    assert det.feed(flow(2, 3, None)) == []  # echo absent
    assert det.feed(flow(2, None, None)) == []  # only the mandatory fields
    assert det.feed(transfer(1, 5, 0)) == []
    assert det.feed(flow(65535, 0xFFFFFFFF, True, properties={symbol("k"): 1})) == [(65535, 0xFFFFFFFF)]


def test_descriptor_forms() -> None:
    det = FlowEchoDetector(all_forms=True)
    sym = flow(4, 1, True, descriptor=symbol("amqp:flow:list"))
    assert det.feed(sym) == [(4, 1)]
    small = flow(5, 2, True)
    perf = small[8:]
    assert perf.startswith(b"\x00\x53\x13")
    ulong_form = frame(5, b"\x00\x80" + (0x13).to_bytes(8, "big") + perf[3:])
    assert det.feed(ulong_form) == [(5, 2)]
    assert det.feed(small) == [(5, 2)]
    # By default only the smallulong form is looked for.
    assert FlowEchoDetector().feed(sym + ulong_form + small) == [(5, 2)]


@pytest.mark.parametrize(
    "perf",
    [
        enc(PDescribed(ulong(0x13), [uint(1), uint(2), uint(3), uint(4), uint(5)] + [None] * 4 + [True]))
        + b"\x40",  # trailing payload: FLOW frames have none
        b"\x00\x53\x13\xc0\x0e\x0a\x40\x43\x43\x43\x43\x40\x40\x40\x40\x41\x01\x01\x01",  # bad list
        b"\x00\x53\x13\xa1\x0a" + b"x" * 10,  # not a list
        enc(PDescribed(ulong(0x13), [None] * 9 + [True])),  # mandatory fields null
        enc(PDescribed(ulong(0x13), [uint(1), uint(2), uint(3), uint(4), "h"] + [None] * 4 + [True])),
        enc(PDescribed(ulong(0x13), [uint(1), uint(2), uint(3), uint(4), uint(5)] + [None] * 4 + [1])),
    ],
)
def test_rejects_invalid_flow_frames(perf: bytes) -> None:
    assert FlowEchoDetector().feed(frame(1, perf)) == []
    good = enc(PDescribed(ulong(0x13), [uint(1), uint(2), uint(3), uint(4), uint(5)] + [None] * 4 + [True]))
    assert FlowEchoDetector().feed(frame(1, good)) == [(1, 5)]


def test_rejects_wrong_frame_header() -> None:
    f = bytearray(flow(1, 1, True))
    for index, value in ((4, 3), (5, 1), (3, 8), (0, 1)):  # doff, SASL type, size too small / large
        bad = bytearray(f)
        bad[index] = value
        assert FlowEchoDetector().feed(bytes(bad)) == []


def test_oversized_flow_is_dropped() -> None:
    det = FlowEchoDetector(max_frame=512)
    big = flow(1, 1, True, properties={"k": "v" * 600})
    assert det.feed(big) == []
    assert FlowEchoDetector(max_frame=4096).feed(big) == [(1, 1)]


def test_ignores_descriptor_bytes_in_payloads() -> None:
    det = FlowEchoDetector()
    # The FLOW descriptor inside a message body without a matching frame header.
    tr = transfer(0, 0, 1, body=b"\x00\x53\x13\xc0\x10\x0a" + b"\x41" * 20)
    assert det.feed(tr) == []
    # A payload carrying a whole encoded echo FLOW frame is the documented false positive.
    assert FlowEchoDetector().feed(transfer(0, 0, 1, body=flow(9, 9, True))) == [(9, 9)]


def make_stream(all_forms: bool) -> tuple[bytes, list[tuple[int, int | None]]]:
    ulong_perf = b"\x00\x80" + (0x13).to_bytes(8, "big") + flow(0, 11, True)[11:]
    parts = [
        b"AMQP\x00\x01\x00\x00",
        transfer(0, 0, 0),
        flow(0, 0, True),
        transfer(1, 2, 1, body=b"\x00\x53\x13" * 10),
        flow(1, 2, False),
        transfer(0, 0, 2, body="y" * 700),
        flow(2, None, True),
        flow(3, 4, True),
        transfer(0, 0, 3),
        flow(6, 7, True, descriptor=symbol("amqp:flow:list")),
        frame(8, ulong_perf),
        flow(7, 8, True),
    ]
    if all_forms:
        return b"".join(parts), [(0, 0), (2, None), (3, 4), (6, 7), (8, 11), (7, 8)]
    return b"".join(parts), [(0, 0), (2, None), (3, 4), (7, 8)]


@pytest.mark.parametrize("all_forms", [False, True])
def test_stream_in_one_chunk(all_forms: bool) -> None:
    stream, expected = make_stream(all_forms)
    assert FlowEchoDetector(all_forms=all_forms).feed(stream) == expected


@pytest.mark.parametrize("all_forms", [False, True])
def test_stream_split_at_every_position(all_forms: bool) -> None:
    stream, expected = make_stream(all_forms)
    for cut in range(len(stream) + 1):
        det = FlowEchoDetector(all_forms=all_forms)
        got = det.feed(stream[:cut]) + det.feed(stream[cut:])
        assert got == expected, cut


def test_stream_split_at_every_pair_of_positions_near_flows() -> None:
    a = flow(1, 1, True)
    b = flow(2, None, True)
    stream = transfer(0, 0, 0) + a + b
    start = len(stream) - len(a) - len(b) - 12
    for i in range(start, len(stream) + 1):
        for j in range(i, len(stream) + 1):
            det = FlowEchoDetector(all_forms=True)
            got = det.feed(stream[:i]) + det.feed(stream[i:j]) + det.feed(stream[j:])
            assert got == [(1, 1), (2, None)], (i, j)


@pytest.mark.parametrize("all_forms", [False, True])
def test_stream_byte_by_byte(all_forms: bool) -> None:
    stream, expected = make_stream(all_forms)
    det = FlowEchoDetector(all_forms=all_forms)
    got = []
    for i in range(len(stream)):
        got += det.feed(stream[i : i + 1])
    assert got == expected


@pytest.mark.parametrize("all_forms", [False, True])
def test_random_chunking(all_forms: bool) -> None:
    stream, expected = make_stream(all_forms)
    rng = random.Random(7)
    for _ in range(200):
        det = FlowEchoDetector(all_forms=all_forms)
        got: list[tuple[int, int | None]] = []
        pos = 0
        while pos < len(stream):
            n = rng.randrange(1, 200)
            got += det.feed(memoryview(stream)[pos : pos + n])
            pos += n
        assert got == expected


def test_many_transfers_no_false_positive() -> None:
    chunk = b"".join(transfer(i % 4, i % 3, i) for i in range(2000))
    assert FlowEchoDetector().feed(chunk) == []
    assert FlowEchoDetector(all_forms=True).feed(chunk) == []
