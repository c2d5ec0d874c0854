"""router.amqp.encode and router.amqp.message against python-qpid-proton, in both directions.

Values: each row of VALUES is read back by ``proton.Data`` as the Proton value of the row (type
included), Proton's encoding of that value decodes to ours, and the first byte is the compact
constructor AMQP has for it (the 8/32-bit forms at their 255/256 boundaries). Messages:
``encode_message`` read by ``proton.Message`` and ``proton.Message.encode`` read by
``decode_message``. Rejections: every rule of ``decode_message`` broken once.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from proton import Data, Message, symbol, timestamp, uint, ulong
from proton import Described as PDescribed

from router.amqp.codec import Described, IncompleteError, MalformedError, Symbol, decode_value
from router.amqp.encode import Timestamp, UInt, ULong, encode_value
from router.amqp.message import AmqpMessage, SectionTypeError, decode_message, encode_message

U = uuid.UUID("12345678-1234-5678-9abc-def012345678")
UNICODE = "héllo wörld ☃ 𝄞 中文"
NESTED = {"a": [1, {"b": [b"x", None, {"c": {}}]}], "d": {"e": {"f": [[], [[]], "g"]}}, "h": -1.25}

# (id, our value, the value Proton reads and writes for it, AMQP type code in proton.Data, constructor)
VALUES: list[tuple[str, Any, Any, int, int]] = [
    ("null", None, None, Data.NULL, 0x40),
    ("true", True, True, Data.BOOL, 0x41),
    ("false", False, False, Data.BOOL, 0x42),
    ("int 0", 0, 0, Data.LONG, 0x55),
    ("int 127", 127, 127, Data.LONG, 0x55),
    ("int -128", -128, -128, Data.LONG, 0x55),
    ("int 128", 128, 128, Data.LONG, 0x81),
    ("int -129", -129, -129, Data.LONG, 0x81),
    ("int max long", 2**63 - 1, 2**63 - 1, Data.LONG, 0x81),
    ("int min long", -(2**63), -(2**63), Data.LONG, 0x81),
    ("int above long", 2**63, ulong(2**63), Data.ULONG, 0x80),
    ("int max ulong", 2**64 - 1, ulong(2**64 - 1), Data.ULONG, 0x80),
    ("ulong 0", ULong(0), ulong(0), Data.ULONG, 0x44),
    ("ulong 255", ULong(255), ulong(255), Data.ULONG, 0x53),
    ("ulong 256", ULong(256), ulong(256), Data.ULONG, 0x80),
    ("ulong max", ULong(2**64 - 1), ulong(2**64 - 1), Data.ULONG, 0x80),
    ("uint 0", UInt(0), uint(0), Data.UINT, 0x43),
    ("uint 255", UInt(255), uint(255), Data.UINT, 0x52),
    ("uint max", UInt(2**32 - 1), uint(2**32 - 1), Data.UINT, 0x70),
    ("timestamp", Timestamp(1_700_000_000_123), timestamp(1_700_000_000_123), Data.TIMESTAMP, 0x83),
    ("double", 1.5, 1.5, Data.DOUBLE, 0x82),
    ("double -inf", -math.inf, -math.inf, Data.DOUBLE, 0x82),
    ("str empty", "", "", Data.STRING, 0xA1),
    ("str 255", "a" * 255, "a" * 255, Data.STRING, 0xA1),
    ("str 256", "a" * 256, "a" * 256, Data.STRING, 0xB1),
    ("str unicode", UNICODE, UNICODE, Data.STRING, 0xA1),
    ("str 128 chars 256 bytes", "é" * 128, "é" * 128, Data.STRING, 0xB1),
    ("symbol empty", Symbol(""), symbol(""), Data.SYMBOL, 0xA3),
    ("symbol 255", Symbol("s" * 255), symbol("s" * 255), Data.SYMBOL, 0xA3),
    ("symbol 256", Symbol("s" * 256), symbol("s" * 256), Data.SYMBOL, 0xB3),
    ("binary empty", b"", b"", Data.BINARY, 0xA0),
    ("binary 255", b"\xff" * 255, b"\xff" * 255, Data.BINARY, 0xA0),
    ("binary 256", b"\x00" * 256, b"\x00" * 256, Data.BINARY, 0xB0),
    ("uuid", U, U, Data.UUID, 0x98),
    ("list empty", [], [], Data.LIST, 0x45),
    ("list small", [1, "a", None, True], [1, "a", None, True], Data.LIST, 0xC0),
    ("list 254-byte body", [None] * 254, [None] * 254, Data.LIST, 0xC0),
    ("list 255-byte body", [None] * 255, [None] * 255, Data.LIST, 0xD0),
    ("list of 1000 strings", [f"addr/{i}" for i in range(1000)], [f"addr/{i}" for i in range(1000)],
     Data.LIST, 0xD0),
    ("list long string", ["x" * 300], ["x" * 300], Data.LIST, 0xD0),
    ("map empty", {}, {}, Data.MAP, 0xC1),
    ("map small", {"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}, Data.MAP, 0xC1),
    ("map 254-byte body", {"k": "x" * 249}, {"k": "x" * 249}, Data.MAP, 0xC1),
    ("map 255-byte body", {"k": "x" * 250}, {"k": "x" * 250}, Data.MAP, 0xD1),
    ("map of 200 pairs", {f"k{i}": i for i in range(200)}, {f"k{i}": i for i in range(200)},
     Data.MAP, 0xD1),
    ("map binary keys", {b"k": 1, b"": {b"n": b"v"}}, {b"k": 1, b"": {b"n": b"v"}}, Data.MAP, 0xC1),
    ("map mixed keys", {1: "a", Symbol("s"): 2, U: None, None: 0},
     {1: "a", symbol("s"): 2, U: None, None: 0}, Data.MAP, 0xC1),
    ("map unicode", {UNICODE: UNICODE}, {UNICODE: UNICODE}, Data.MAP, 0xC1),
    ("nested", NESTED, NESTED, Data.MAP, 0xC1),
    ("described", Described(Symbol("x:y"), [1, "a"]), PDescribed(symbol("x:y"), [1, "a"]),
     Data.DESCRIBED, 0x00),
    ("described code", Described(0x73, ["to"]), PDescribed(ulong(0x73), ["to"]), Data.DESCRIBED, 0x00),
]
# only ours -> Proton: Python types that Proton encodes as something else, or not at all
ENCODE_ONLY: list[tuple[str, Any, Any, int, int]] = [
    ("tuple", (1, "a"), [1, "a"], Data.LIST, 0xC0),
    ("bytearray", bytearray(b"ab"), b"ab", Data.BINARY, 0xA0),
    ("memoryview", memoryview(b"ab"), b"ab", Data.BINARY, 0xA0),
]


def _from_proton(d: Data) -> Any:
    """The current node of ``d`` as Python values, binaries as ``bytes`` (Proton's get_object gives
    memoryviews, unhashable as map keys)."""
    t = d.type()
    if t in (Data.LIST, Data.MAP):
        n = d.get_list() if t == Data.LIST else d.get_map()
        d.enter()
        items = []
        for _ in range(n):
            d.next()
            items.append(_from_proton(d))
        d.exit()
        return items if t == Data.LIST else dict(zip(items[::2], items[1::2], strict=True))
    if t == Data.DESCRIBED:
        d.enter()
        d.next()
        descriptor = _from_proton(d)
        d.next()
        value = _from_proton(d)
        d.exit()
        return PDescribed(descriptor, value)
    if t == Data.BINARY:
        return bytes(d.get_binary())
    return d.get_object()


def _proton_read(data: bytes) -> tuple[int, Any]:
    d = Data()
    assert d.decode(data) == len(data)
    d.rewind()
    d.next()
    return d.type(), _from_proton(d)


def _proton_encode(value: Any) -> bytes:
    d = Data()
    d.put_object(value)
    return d.encode()


def _same_types(ours: Any, theirs: Any) -> None:
    """Proton's str subclasses (symbol) and ours (Symbol) stand for the same AMQP type."""
    assert isinstance(ours, Symbol) == isinstance(theirs, symbol), (ours, theirs)
    if isinstance(ours, dict):
        for (k1, v1), (k2, v2) in zip(ours.items(), theirs.items(), strict=True):
            _same_types(k1, k2)
            _same_types(v1, v2)
    elif isinstance(ours, list):
        for a, b in zip(ours, theirs, strict=True):
            _same_types(a, b)


@pytest.mark.parametrize("name, ours, theirs, amqp_type, constructor", VALUES + ENCODE_ONLY,
                         ids=[row[0] for row in VALUES + ENCODE_ONLY])
def test_encode_value_reads_back_in_proton(name, ours, theirs, amqp_type, constructor):
    data = encode_value(ours)
    assert data[0] == constructor
    got_type, got = _proton_read(data)
    assert got_type == amqp_type
    assert got == theirs
    assert type(got) is type(theirs) or isinstance(theirs, dict | list | bytes)


@pytest.mark.parametrize("name, ours, theirs, amqp_type, constructor", VALUES, ids=[row[0] for row in VALUES])
def test_proton_encoding_decodes_to_our_value(name, ours, theirs, amqp_type, constructor):
    data = _proton_encode(theirs)
    value, end = decode_value(data)
    assert end == len(data)
    assert value == ours
    _same_types(value, theirs)
    # and ours decodes back to the same value
    assert decode_value(encode_value(ours)) == (ours, len(encode_value(ours)))


@pytest.mark.parametrize("value, error, text", [
    ({1, 2}, TypeError, "type set"),
    (object(), TypeError, "type object"),
    (1j, TypeError, "type complex"),
    ([1, {"k": frozenset()}], TypeError, "type frozenset"),
    (2**64, ValueError, "int 18446744073709551616 fits neither an AMQP long nor a ulong"),
    (-(2**63) - 1, ValueError, "fits neither"),
    (ULong(-1), ValueError, "ulong -1 is out of range"),
    (ULong(2**64), ValueError, "out of range"),
    (UInt(2**32), ValueError, "uint 4294967296 is out of range"),
])
def test_encode_value_refuses(value, error, text):
    with pytest.raises(error, match=text):
        encode_value(value)


# One encoding per constructor decode_value knows: each decoded value must encode again (the
# link-state engine re-floods the bodies it receives), to an equal value.
EVERY_CONSTRUCTOR = [
    "40", "41", "42", "5600", "5601", "50ff", "60ffff", "70ffffffff", "52ff", "43", "80" + "ff" * 8, "53ff",
    "44", "5180", "618000", "7180000000", "5480", "81" + "80" + "00" * 7, "5580", "723fc00000",
    "82" + "3ff8" + "00" * 6, "7401020304", "84" + "01" * 8, "94" + "02" * 16, "7300002603",
    "83" + "00" * 4 + "65" + "53f100", "98" + "12" * 16, "a003616263", "b000000001ff", "a102c3a9",
    "b100000002c3a9", "a302c3a9", "b30000000161", "45", "c0030155" + "01", "d0000000050000000140",
    "c10502a1016b40", "d1000000070000000255" + "0140", "e00402" + "52" + "0102", "e00402" + "50" + "0102",
    "f0000000070000000254" + "0102", "e0090200530f" + "a1" + "0178" + "0179",
    "00a301" + "78" + "00" + "5301" + "40",
]


@pytest.mark.parametrize("hex_bytes", EVERY_CONSTRUCTOR)
def test_every_decoded_value_encodes_again(hex_bytes):
    value, _ = decode_value(bytes.fromhex(hex_bytes))
    again, end = decode_value(encode_value(value))
    assert again == value
    assert type(again) is type(value) or type(value) is bytes and type(again) is bytes


def test_subclasses_encode_as_their_base():
    class Key(str):
        pass

    class Tag(int):
        pass

    assert encode_value(Key("a")) == encode_value("a")
    assert encode_value(Tag(300)) == encode_value(300)
    assert encode_value(Described(ULong(1), None)) == encode_value(Described(1, None)) == b"\x00\x53\x01\x40"


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

MAU_BODY = {"id": "A", "pv": 1, "area": "0", "instance": 1_700_000_000, "mobile_seq": 7,
            "add": [f"balanced/service/{i}" for i in range(1000)], "del": []}

# (id, encode_message kwargs); checked through proton.Message, which cannot read binary map keys
MESSAGES: list[tuple[str, dict[str, Any]]] = [
    ("body only", {"body": "x"}),
    ("control", {"to": "_topo/0/all/qdrouter", "application_properties": {"opcode": "RA"},
                 "message_annotations": {"x-opt-qd.trace": ["0/A", "0/B"]},
                 "body": {"id": "A", "pv": 1, "area": "0", "instance": 3, "ls_seq": 1, "mobile_seq": 0}}),
    ("big MAU", {"to": "_topo/0/all/qdrouter.ma", "application_properties": {"opcode": "MAU"},
                 "message_annotations": {"x-opt-qd.trace": []}, "body": MAU_BODY}),
    ("answer str id", {"to": "reply/1", "correlation_id": "req-1", "body": {"attributeNames": ["id"],
                       "results": [["A", 1, None, 2.5, True]]},
                       "application_properties": {"statusCode": 200, "statusDescription": "OK"}}),
    ("answer int id, no body", {"to": "r", "correlation_id": 2**40,
                                "application_properties": {"statusCode": 404, "statusDescription": "no"}}),
    ("answer max ulong id", {"to": "r", "correlation_id": 2**64 - 1, "body": 1}),
    ("answer binary id", {"to": "r", "correlation_id": b"\x00\xff\x01", "body": []}),
    ("answer uuid id", {"to": "r", "correlation_id": U, "message_id": U, "body": {}}),
    ("all properties", {"message_id": "m-1", "to": UNICODE, "subject": "s" * 300, "reply_to": "r" * 255,
                        "correlation_id": 7, "body": b"bin"}),
    ("empty maps", {"application_properties": {}, "message_annotations": {}, "body": 0}),
    ("annotation keys", {"message_annotations": {"x-opt-a": 1, 5: "five", Symbol("x-opt-b"): {"n": [1]}},
                         "body": None, "to": "t"}),
    ("nested body", {"body": NESTED, "application_properties": {"k": UNICODE, "n": -5, "f": 0.5}}),
    ("nothing", {}),
]


def _proton_message(data: bytes) -> Message:
    m = Message()
    m.decode(data)
    return m


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


@pytest.mark.parametrize("name, fields", MESSAGES, ids=[row[0] for row in MESSAGES])
def test_encode_message_reads_back_in_proton(name, fields):
    data = encode_message(**fields)
    m = _proton_message(data)
    assert m.address == fields.get("to")
    assert m.subject == fields.get("subject")
    assert m.reply_to == fields.get("reply_to")
    # Proton reads an id of a type ids cannot have (an int as long) as None: an int id must be a ulong
    assert _plain(m.id) == fields.get("message_id")
    assert _plain(m.correlation_id) == fields.get("correlation_id")
    assert m.properties == fields.get("application_properties")
    assert (m.annotations is None) == (fields.get("message_annotations") is None)
    for key, value in (fields.get("message_annotations") or {}).items():
        stored = next(k for k in m.annotations if k == key)
        assert type(stored) is (ulong if isinstance(key, int) else symbol)   # as AMQP requires
        assert m.annotations[key] == value
    assert _plain(m.body) == fields.get("body")
    # and ours reads it back the same
    got = decode_message(data)
    for field in ("to", "subject", "reply_to", "message_id", "correlation_id", "application_properties",
                  "message_annotations", "body"):
        assert getattr(got, field) == fields.get(field), field
    if "body" not in fields:
        assert got.body_type == ("amqp-value" if not fields else None)   # an empty message gets a null body


def test_encode_message_orders_sections_like_amqp():
    data = encode_message(body=1, application_properties={"a": 1}, to="t", message_annotations={"m": 1})
    starts = [i for i in range(len(data) - 2)
              if data[i:i + 2] == b"\x00\x53" and data[i + 2] in range(0x70, 0x79)]
    assert [data[i + 2] for i in starts] == [0x72, 0x73, 0x74, 0x77]


@pytest.mark.parametrize("fields, error, text", [
    ({"application_properties": {1: "x"}}, TypeError, "application property keys must be str, not int"),
    ({"message_id": 1.5}, TypeError, "message_id must be an int, str, bytes or uuid.UUID, not float"),
    ({"correlation_id": True}, TypeError, "correlation_id must be"),
    ({"correlation_id": -1}, ValueError, "ulong -1 is out of range"),
    ({"to": 5}, TypeError, "to must be a str, not int"),
    ({"body": {"k": {1, 2}}}, TypeError, "type set"),
])
def test_encode_message_refuses(fields, error, text):
    with pytest.raises(error, match=text):
        encode_message(**fields)


def _proton_encoded(**fields: Any) -> bytes:
    m = Message()
    for k, v in fields.items():
        setattr(m, k, v)
    return bytes(m.encode())


# (id, proton.Message fields, the AmqpMessage fields expected)
FROM_PROTON: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("empty", {}, {}),
    ("request", {"address": "$management", "reply_to": "reply/x", "id": "req-1",
                 "properties": {"operation": "QUERY", "type": "node"}, "body": {"attributeNames": ["id"]}},
     {"to": "$management", "reply_to": "reply/x", "message_id": "req-1",
      "application_properties": {"operation": "QUERY", "type": "node"}, "body": {"attributeNames": ["id"]},
      "body_type": "amqp-value"}),
    ("binary keys (issue 20)", {"reply_to": "r", "body": {b"attributeNames": [b"id"], "x": {b"k": 1}}},
     {"reply_to": "r", "body": {b"attributeNames": [b"id"], "x": {b"k": 1}}, "body_type": "amqp-value"}),
    ("ids", {"id": ulong(5), "correlation_id": b"\x00\x01", "user_id": b"user"},
     {"message_id": 5, "correlation_id": b"\x00\x01", "user_id": b"user"}),
    ("uuid ids", {"id": U, "correlation_id": U}, {"message_id": U, "correlation_id": U}),
    ("every property", {"id": "i", "user_id": b"u", "address": "to", "subject": "subj", "reply_to": "rt",
                        "correlation_id": "c", "content_type": "text/plain", "content_encoding": "gzip",
                        "expiry_time": 1_700_000_100.5, "creation_time": 1_700_000_000.25, "group_id": "g",
                        "group_sequence": 9, "reply_to_group_id": "rg"},
     {"message_id": "i", "user_id": b"u", "to": "to", "subject": "subj", "reply_to": "rt",
      "correlation_id": "c", "content_type": "text/plain", "content_encoding": "gzip",
      "absolute_expiry_time": 1_700_000_100_500, "creation_time": 1_700_000_000_250, "group_id": "g",
      "group_sequence": 9, "reply_to_group_id": "rg"}),
    ("header and delivery annotations", {"durable": True, "priority": 9, "ttl": 5.0, "first_acquirer": True,
                                         "delivery_count": 3, "instructions": {"x-opt-d": 1}, "body": "b"},
     {"body": "b", "body_type": "amqp-value"}),
    ("annotations", {"annotations": {"x-opt-qd.trace": ["0/A"], ulong(9): "nine"}},
     {"message_annotations": {Symbol("x-opt-qd.trace"): ["0/A"], 9: "nine"}}),
    ("unicode", {"address": UNICODE, "properties": {UNICODE: UNICODE}, "body": [UNICODE]},
     {"to": UNICODE, "application_properties": {UNICODE: UNICODE}, "body": [UNICODE],
      "body_type": "amqp-value"}),
    ("big MAU", {"address": "_topo/0/all/qdrouter.ma", "properties": {"opcode": "MAU"}, "body": MAU_BODY},
     {"to": "_topo/0/all/qdrouter.ma", "application_properties": {"opcode": "MAU"}, "body": MAU_BODY,
      "body_type": "amqp-value"}),
    ("binary body", {"body": b"\x00" * 300}, {"body": b"\x00" * 300, "body_type": "amqp-value"}),
]


@pytest.mark.parametrize("name, fields, expected", FROM_PROTON, ids=[row[0] for row in FROM_PROTON])
def test_proton_messages_decode(name, fields, expected):
    got = decode_message(_proton_encoded(**fields))
    assert got == AmqpMessage(**expected)
    if "annotations" in fields:
        assert all(type(k) in (Symbol, int) for k in got.message_annotations)
    if "correlation_id" in fields:
        assert type(got.correlation_id) is type(expected["correlation_id"])


# ---------------------------------------------------------------------------------------------
# Hand-built messages: the forms Proton does not write, and every rule broken
# ---------------------------------------------------------------------------------------------

def sec(code: int, value: Any) -> bytes:
    """A section with the usual smallulong descriptor."""
    return b"\x00\x53" + bytes((code,)) + encode_value(value)


def raw(code: int, value_bytes: bytes) -> bytes:
    return b"\x00\x53" + bytes((code,)) + value_bytes


H, DA, MA, P, AP, D, SEQ, V, F = range(0x70, 0x79)


@pytest.mark.parametrize("name, data, expected", [
    ("two data sections", sec(D, b"ab") + sec(D, b"") + sec(F, {"f": 1}),
     {"body": [b"ab", b""], "body_type": "data"}),
    ("amqp-sequence sections", sec(SEQ, [1, 2]) + sec(SEQ, []),
     {"body": [[1, 2], []], "body_type": "amqp-sequence"}),
    ("every section", sec(H, [True]) + sec(DA, {Symbol("d"): 1}) + sec(MA, {Symbol("m"): 2}) + sec(P, ["i"])
     + sec(AP, {"a": 3}) + sec(V, "v") + sec(F, {Symbol("f"): 4}),
     {"message_id": "i", "message_annotations": {"m": 2}, "application_properties": {"a": 3}, "body": "v",
      "body_type": "amqp-value"}),
    ("symbolic descriptors", encode_value(Described(Symbol("amqp:properties:list"), [None, None, "t"]))
     + encode_value(Described(Symbol("amqp:amqp-value:*"), 5)),
     {"to": "t", "body": 5, "body_type": "amqp-value"}),
    ("ulong descriptors", b"\x00\x80" + (0x74).to_bytes(8, "big") + encode_value({"k": "v"})
     + b"\x00\x80" + (0x77).to_bytes(8, "big") + encode_value(None),
     {"application_properties": {"k": "v"}, "body": None, "body_type": "amqp-value"}),
    ("null sections", raw(H, b"\x40") + raw(MA, b"\x40") + raw(P, b"\x40") + raw(AP, b"\x40") + sec(V, 1),
     {"body": 1, "body_type": "amqp-value"}),
    ("32-bit forms", raw(P, b"\xd0\x00\x00\x00\x09\x00\x00\x00\x03\x40\x40\xa1\x01t")
     + raw(AP, b"\xd1\x00\x00\x00\x09\x00\x00\x00\x02\xa1\x01k\x55\x01"),
     {"to": "t", "application_properties": {"k": 1}}),
    ("array body", raw(V, b"\xe0\x05\x03\x55\x01\x02\x03"), {"body": [1, 2, 3], "body_type": "amqp-value"}),
    ("memoryview input", memoryview(sec(P, [None, None, "t"])), {"to": "t"}),
])
def test_hand_built_messages_decode(name, data, expected):
    assert decode_message(data) == AmqpMessage(**expected)


GOOD = sec(H, [True]) + sec(MA, {Symbol("m"): 1}) + sec(P, ["id", None, "to"]) + sec(AP, {"k": "v"}) \
    + sec(V, {"body": [1, 2]})


@pytest.mark.parametrize("name, data, error, text", [
    ("empty", b"", IncompleteError, "empty message"),
    ("not a section", b"\x55\x01", MalformedError, "not a message section"),
    ("unknown descriptor code", b"\x00\x53\x10\x45", MalformedError, "not a message section descriptor"),
    ("unknown symbolic descriptor", encode_value(Described(Symbol("amqp:nope:list"), [])), MalformedError,
     "not a message section descriptor"),
    ("string descriptor", encode_value(Described("amqp:properties:list", [])), MalformedError,
     "not a message section descriptor"),
    ("properties after application-properties", sec(AP, {}) + sec(P, []), MalformedError,
     "the properties section at offset 6 comes after the application-properties section"),
    ("header after body", sec(V, 1) + sec(H, []), MalformedError, "comes after the amqp-value section"),
    ("message-annotations after properties", sec(P, []) + sec(MA, {}), MalformedError, "comes after"),
    ("delivery after message annotations", sec(MA, {}) + sec(DA, {}), MalformedError, "comes after"),
    ("footer before body", sec(F, {}) + sec(V, 1), MalformedError, "follows the footer"),
    ("two headers", sec(H, []) + sec(H, []), MalformedError, "a second header section at offset 4"),
    ("two properties", sec(P, []) + sec(P, []), MalformedError, "a second properties section"),
    ("two application-properties", sec(AP, {}) + sec(AP, {}), MalformedError,
     "a second application-properties"),
    ("two message-annotations", sec(MA, {}) + sec(MA, {}), MalformedError, "a second message-annotations"),
    ("two amqp-values", sec(V, 1) + sec(V, 2), MalformedError, "a second amqp-value section"),
    ("two footers", sec(V, 1) + sec(F, {}) + sec(F, {}), MalformedError, "a second footer section"),
    ("header again later", sec(H, []) + sec(P, []) + sec(H, []), MalformedError,
     "comes after the properties"),
    ("data then amqp-value", sec(D, b"x") + sec(V, 1), MalformedError, r"follows data section\(s\)"),
    ("amqp-sequence then data", sec(SEQ, []) + sec(D, b""), MalformedError, "follows amqp-sequence"),
    ("amqp-value then data", sec(V, 1) + sec(D, b""), MalformedError, "follows amqp-value"),
    ("garbage after body", GOOD + b"\xff\xff", MalformedError,
     "2 bytes at offset 64 after the amqp-value section are not a message section"),
    ("garbage after footer", sec(V, 1) + sec(F, {}) + b"\x40", MalformedError, "after the footer section"),
    ("section after footer", sec(F, {}) + sec(AP, {}), MalformedError, "follows the footer"),
    ("a lone zero byte after body", GOOD + b"\x00", IncompleteError, "truncated: the section descriptor"),
    ("descriptor without value", GOOD + b"\x00\x53\x78", IncompleteError,
     "the footer section at offset 64 has no value"),
    ("application-properties a list", sec(AP, [1]), SectionTypeError,
     "application-properties section at offset 0 holds a value of type list, not a map"),
    ("message-annotations a string", sec(MA, "x"), SectionTypeError, "of type str, not a map"),
    ("footer a list", sec(V, 1) + sec(F, []), SectionTypeError, "not a map"),
    ("properties a map", sec(P, {}), SectionTypeError, "of type dict, not a list"),
    ("header a string", sec(H, "x"), SectionTypeError, "not a list"),
    ("data a string", sec(D, "x"), SectionTypeError, "of type str, not binary"),
    ("amqp-sequence a map", sec(SEQ, {}), SectionTypeError, "not a list"),
    ("data null", sec(D, None), SectionTypeError, "of type null, not binary"),
    ("to an int", sec(P, [None, None, 5]), MalformedError, "properties.to cannot be of type int"),
    ("message-id a list", sec(P, [[1]]), MalformedError, "properties.message_id cannot be of type list"),
    ("message-id negative", sec(P, [-3]), MalformedError, "message_id cannot be of type int"),
    ("message-id a bool", sec(P, [True]), MalformedError, "message_id cannot be of type bool"),
    ("user-id a string", sec(P, [None, "u"]), MalformedError, "user_id cannot be of type str"),
    ("group-sequence a string", sec(P, [None] * 11 + ["x"]), MalformedError,
     "group_sequence cannot be of type str"),
    ("14 properties", sec(P, [None] * 14), MalformedError, "has 14 fields, at most 13"),
    ("header durable a string", sec(H, ["yes"]), MalformedError, "header.durable cannot be of type str"),
    ("6 header fields", sec(H, [None] * 6), MalformedError, "at most 5"),
    ("bad UTF-8 in to", raw(P, b"\xc0\x06\x03\x40\x40\xa1\x01\xff"), MalformedError,
     "^'utf-8' codec can't decode byte 0xff .*in the properties section at offset 0"),
    ("bad UTF-8 in body", raw(V, b"\xa1\x02\xc3\x28"), MalformedError, "^'utf-8' codec"),
    ("list key in body", raw(V, b"\xc1\x04\x02\x45\x55\x01"), MalformedError,
     "a map in the amqp-value section has a key of unhashable type list"),
    ("map key nested in properties value",
     raw(AP, b"\xc1\x0e\x02\xa1\x01k\xc0\x08\x01\xc1\x05\x02\xc1\x01\x00\x40"), MalformedError,
     "unhashable type dict"),
    ("list key in annotations", raw(MA, b"\xc1\x04\x02\x45\x55\x01"), MalformedError, "message-annotations"),
    ("odd map", raw(V, b"\xc1\x03\x01\x55\x01"), MalformedError, "odd number"),
    ("unknown constructor", raw(V, b"\xff"), MalformedError, "unknown constructor 0xff"),
])
def test_decode_message_refuses(name, data, error, text):
    with pytest.raises(error, match=text) as info:
        decode_message(data)
    assert info.type is error


def test_section_type_error_names_the_section():
    with pytest.raises(SectionTypeError) as info:
        decode_message(sec(P, []) + sec(AP, [1]))
    assert info.value.section == "application-properties"


def test_every_cut_inside_a_section_is_truncated():
    """A prefix ending at a section boundary is a shorter valid message; any other cut is refused."""
    sections = [sec(H, [True]), sec(MA, {Symbol("m"): [1, "x" * 300]}), sec(P, ["id", None, "to"]),
                sec(AP, {"k": "v" * 300}), sec(V, {"body": [1, 2], "b": b"y" * 256})]
    data = b"".join(sections)
    boundaries = {sum(len(s) for s in sections[:i]) for i in range(1, len(sections) + 1)}
    for cut in range(1, len(data)):
        if cut in boundaries:
            decode_message(data[:cut])
        else:
            with pytest.raises(IncompleteError, match="truncated"):
                decode_message(data[:cut])
    assert decode_message(data).body == {"body": [1, 2], "b": b"y" * 256}
