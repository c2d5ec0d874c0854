"""The gateway encodes 0-9-1 properties itself (router.gateway.mapping.Outgoing): the bytes must be
exactly what pika encodes for the same properties, with and without the sequence-number header."""

from __future__ import annotations

import uuid

import pytest
from proton import Message, symbol

from router.gateway.mapping import TAG_HEADER, MappingError, from_091, to_091

MESSAGES = [
    Message(body=b"x" * 256, inferred=True),
    Message(body=b"x" * 256, inferred=True, id=7, address="a/b"),
    Message(body='{"oslo": 1}', id="msg-1", correlation_id="c-1", reply_to="r",
            content_type="application/json", content_encoding="utf-8", ttl=30.0, priority=6, durable=True,
            subject="s",
            properties={"k": "v", "n": 7, "f": 1.5, "s": symbol("sym"), "u": uuid.uuid4(), "l": [1, 2]}),
    Message(body=b"\x00", id=uuid.uuid4(), correlation_id=12345, address="to/here", inferred=True,
            creation_time=1700000000.0),
    Message(body=[1, "two"], id=b"\x01\x02", creation_time=1700000000.5, group_id="g"),
    Message(body=None),
]


@pytest.mark.parametrize("message", MESSAGES, ids=range(len(MESSAGES)))
@pytest.mark.parametrize("persistent", [False, True])
def test_encoded_properties_are_pikas(message: Message, persistent: bool) -> None:
    out = to_091(bytes(message.encode()), persistent, address="a/b")
    for seq in (None, 42):
        props = out.basic_properties(seq)
        assert b"".join(props.encode()) == out.properties(seq)
        assert (props.headers or {}).get(TAG_HEADER) == seq
    assert out.basic_properties(None).delivery_mode == (2 if persistent or message.durable else 1)


def test_to_is_carried_only_when_it_is_not_the_bridged_address() -> None:
    same = to_091(bytes(Message(body=b"m", address="a/b", inferred=True).encode()), address="a/b")
    other = to_091(bytes(Message(body=b"m", address="c/d", inferred=True).encode()), address="a/b")
    same, other = same.basic_properties(), other.basic_properties()
    assert same.headers is None
    assert other.headers == {"x-amqp1-to": "c/d"}
    back = Message()
    back.decode(from_091(same, b"", "a/b"))
    assert back.address == "a/b"
    back.decode(from_091(other, b"", "a/b"))
    assert back.address == "c/d"


def test_unreadable_or_uncarriable_messages_raise_mapping_error() -> None:
    with pytest.raises(MappingError):
        to_091(b"\x00\x53\x73\xc0\xff")                       # truncated properties
    with pytest.raises(MappingError):
        to_091(bytes(Message(body=b"m", reply_to="r" * 300).encode()))   # no 0-9-1 shortstr for it
