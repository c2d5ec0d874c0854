"""Control-message codecs: round trips, validation, version handling."""

from __future__ import annotations

import pytest

from router.linkstate.messages import (
    ControlMessageError,
    Hello,
    LinkState,
    LinkStateRequest,
    LinkStateUpdate,
    MobileAddressRequest,
    MobileAddressUpdate,
    RouterAdvertisement,
    UnsupportedVersionError,
    parse,
)

HEAD = {"id": "R1", "pv": 1, "area": "0", "instance": 1700000000}

MESSAGES = [
    Hello("R1", 5, ("R2", "R3")),
    RouterAdvertisement("R1", 5, ls_seq=3, mobile_seq=7),
    LinkStateRequest("R1", 5),
    LinkStateUpdate("R1", 5, LinkState("R1", 4, {"R2": 1, "R3": 5})),
    MobileAddressUpdate("R1", 5, 8, add=("M0a", "M0b"), delete=("M0c",), hints=(2, 3)),
    MobileAddressUpdate("R1", 5, 8, exist=("M0a",), hints=(1,)),
    MobileAddressUpdate("R1", 5, 9, add=(), delete=("M0a",)),
    MobileAddressRequest("R1", 5, have_seq=2),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message):
    body = message.to_map()
    assert body["id"] == "R1" and body["pv"] == 1 and body["area"] == "0" and body["instance"] == 5
    assert parse(message.opcode, body) == message


def test_body_keys_match_the_protocol():
    assert set(MESSAGES[1].to_map()) == {"id", "pv", "area", "instance", "ls_seq", "mobile_seq"}
    lsu = MESSAGES[3].to_map()
    assert lsu["ls"] == {"id": "R1", "area": "0", "ls_seq": 4, "peers": {"R2": 1, "R3": 5}}
    assert lsu["ls_seq"] == 4
    assert set(MESSAGES[4].to_map()) == {"id", "pv", "area", "instance", "mobile_seq", "add", "del", "hints"}
    assert "add" not in MESSAGES[5].to_map() and MESSAGES[5].to_map()["exist"] == ["M0a"]


@pytest.mark.parametrize(("opcode", "body", "reason"), [
    ("RA", {**HEAD, "ls_seq": 1}, "missing 'mobile_seq'"),
    ("RA", {**HEAD, "ls_seq": True, "mobile_seq": 0}, "'ls_seq' must be an integer"),
    ("RA", {**HEAD, "ls_seq": -1, "mobile_seq": 0}, "'ls_seq' must be an integer >= 0"),
    ("RA", {**HEAD, "instance": "x", "ls_seq": 1, "mobile_seq": 0}, "'instance'"),
    ("HELLO", {**HEAD, "seen": "R2"}, "'seen' must be a list"),
    ("HELLO", {**HEAD, "seen": [1]}, "'seen' must be a list"),
    ("HELLO", {**HEAD, "id": "", "seen": []}, "'id'"),
    ("HELLO", {**HEAD, "id": "a/b", "seen": []}, "'id'"),
    ("HELLO", {**HEAD, "area": "1", "seen": []}, "area"),
    ("HELLO", {**HEAD, "pv": "1", "seen": []}, "'pv' must be an integer"),
    ("HELLO", {**HEAD, "pv": 0, "seen": []}, "protocol version 0"),
    ("HELLO", ["not a map"], "body must be a map"),
    ("LSU", {**HEAD, "ls_seq": 2}, "missing 'ls'"),
    ("LSU", {**HEAD, "ls_seq": 2, "ls": {"id": "R9", "ls_seq": 2, "peers": {}}}, "differs from the sender"),
    ("LSU", {**HEAD, "ls_seq": 2, "ls": {"id": "R1", "ls_seq": 3, "peers": {}}}, "differs from 'ls_seq'"),
    ("LSU", {**HEAD, "ls_seq": 2, "ls": {"id": "R1", "ls_seq": 2, "peers": {"R2": 0}}}, "cost of peer"),
    ("LSU", {**HEAD, "ls_seq": 2, "ls": {"id": "R1", "ls_seq": 2, "peers": {"R1": 1}}}, "lists itself"),
    ("LSU", {**HEAD, "ls_seq": 2, "ls": {"id": "R1", "ls_seq": 2, "peers": ["R2"]}}, "'ls.peers'"),
    ("MAU", {**HEAD, "mobile_seq": 1, "exist": ["M0a"], "add": []}, "'exist' together with 'add'/'del'"),
    ("MAU", {**HEAD, "mobile_seq": 1, "exist": [], "del": []}, "'exist' together with 'add'/'del'"),
    ("MAU", {**HEAD, "mobile_seq": 1, "add": ["M0a"]}, "lacks 'add' or 'del'"),
    ("MAU", {**HEAD, "mobile_seq": 1, "del": ["M0a"]}, "lacks 'add' or 'del'"),
    ("MAU", {**HEAD, "mobile_seq": 1}, "lacks 'add' or 'del'"),
    ("MAU", {**HEAD, "mobile_seq": 1, "add": [1], "del": []}, "'add' must be a list of strings"),
    ("MAU", {**HEAD, "mobile_seq": 1, "add": [], "del": [], "hints": ["x"]}, "'hints'"),
    ("MAR", {**HEAD}, "missing 'have_seq'"),
    ("BOGUS", {**HEAD}, "unknown opcode"),
    (None, {**HEAD}, "unknown opcode"),
    ("RA", {**HEAD, "id": "R" * 256, "ls_seq": 1, "mobile_seq": 0}, "1 to 255 characters"),
    ("LSU", {**HEAD, "ls_seq": 2, "ls": {"id": "R1", "ls_seq": 2, "peers": {"R" * 5000: 1}}}, "1 to 255"),
])
def test_malformed_bodies_raise_control_message_error(opcode, body, reason):
    with pytest.raises(ControlMessageError, match=reason.replace("(", r"\(")) as err:
        parse(opcode, body)
    assert not isinstance(err.value, UnsupportedVersionError)
    if isinstance(body, dict) and body.get("id") == "R1":
        assert err.value.sender == "R1"  # so the caller can log once per sender


@pytest.mark.parametrize("opcode", ["HELLO", "RA", "LSU", "MAU", "NEWOPCODE"])
def test_newer_version_is_a_distinct_error_checked_before_the_rest(opcode):
    body = {"id": "R7", "pv": 2, "area": "0", "instance": 1, "whatever": "new shape"}
    with pytest.raises(UnsupportedVersionError) as err:
        parse(opcode, body)
    assert err.value.sender == "R7" and err.value.version == 2


def test_hints_of_another_length_are_ignored_not_fatal():
    mau = parse("MAU", {**HEAD, "mobile_seq": 1, "add": ["M0a", "M0b"], "del": [], "hints": [2]})
    assert mau.hints is None
    assert mau.hinted() == {"M0a": None, "M0b": None}
    mau = parse("MAU", {**HEAD, "mobile_seq": 1, "exist": ["M0a"], "hints": [3]})
    assert mau.hinted() == {"M0a": 3} and mau.is_absolute


def test_area_defaults_and_symbols_are_accepted():
    class Symbol(str):
        pass

    body = {"id": Symbol("R1"), "pv": 1, "instance": 1, "seen": [Symbol("R2")]}  # no area: "0"
    hello = parse(Symbol("HELLO"), body)
    assert hello.id == "R1" and type(hello.id) is str and hello.seen == ("R2",)


def test_building_an_inconsistent_mau_raises():
    with pytest.raises(ControlMessageError):
        MobileAddressUpdate("R1", 1, 1, add=("a",), delete=(), exist=("b",))
    with pytest.raises(ControlMessageError):
        MobileAddressUpdate("R1", 1, 1, add=("a",))


def test_a_long_id_is_cut_short_in_the_error():
    with pytest.raises(ControlMessageError) as err:
        parse("RA", {**HEAD, "id": "X" * 5000, "ls_seq": 1, "mobile_seq": 0})
    assert len(str(err.value)) < 250 and "(5002 characters)" in str(err.value)
