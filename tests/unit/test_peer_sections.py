"""PeerSections: what a transit or egress node sends agrees with the general AnnotationLayout, message
after message, whatever the table and the last-message shortcut hold."""

from __future__ import annotations

import pytest
from proton import Message, symbol

from router.amqp.annotations import AnnotationLayout, RouterAnnotations, annotate_ingress, rewrite, with_hop
from router.amqp.peersections import IngressSections, PeerSections, insertion_point


def message(header: bool, delivery_ann: bool, user_ann: dict | None, body=b"payload", mid="m1") -> bytes:
    m = Message(body=body, address="svc/x", id=mid)
    if header:
        m.durable = True
        m.priority = 7
    if delivery_ann:
        m.instructions = {symbol("x-opt-da"): 1}
    if user_ann:
        m.annotations = user_ann
    return bytes(m.encode())


ANNS = [RouterAnnotations("0/A", ["0/A"], "svc/x"),
        RouterAnnotations("0/A", ["0/A", "0/B"], "_topo/0/D/temp.abc"),
        RouterAnnotations("0/" + "é" * 20, ["0/" + "é" * 20], "svc/ünï")]
USER = {symbol("x-opt-app.k"): "v", symbol("x-opt-n"): 3}


def general(data: bytes, node: str) -> tuple[RouterAnnotations, bytes, bytes]:
    """What the general path makes of `data` at node `node`: annotations, to a peer, to a client."""
    layout = AnnotationLayout(data)
    ann = layout.read()
    return ann, bytes(layout.rewrite(with_hop(ann, node))), bytes(layout.strip())


def sent(data: bytes, found: tuple, to_peer: bool) -> bytes:
    end, peer, client, _ = found
    return (peer if to_peer else client) + data[end:]


@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("delivery_ann", [False, True])
@pytest.mark.parametrize("user_ann", [None, USER])
def test_agrees_with_the_general_path(header, delivery_ann, user_ann) -> None:
    table = PeerSections("Z")
    # interleaved streams: bodies and ids change, sections repeat, the last-message shortcut comes and goes
    for i in range(12):
        ann = ANNS[i % 3 if i < 6 else i // 4 % 3]
        body = b"x" * (i * 700)           # up to 7,700 bytes: large ones are joined from views
        data = bytes(rewrite(message(header, delivery_ann, user_ann, body, f"id-{i}"), None, ann))
        found = table.find(data)
        assert found is not None
        want_ann, want_peer, want_client = general(data, "Z")
        s = found[3]
        assert s.ann == want_ann == ann and s.key == ann.to and s.hops == len(ann.trace)
        assert sent(data, found, True) == want_peer
        assert sent(data, found, False) == want_client
        out = Message()
        out.decode(sent(data, found, False))
        assert out.body == body and out.annotations == (user_ann or None)


@pytest.mark.parametrize("ann", [
    RouterAnnotations("0/A", ["0/A"], None),            # no `to`: routed by the message's own
    RouterAnnotations("0/A", ["0/A"], "svc/x", 3),      # a phase: the general path
])
def test_other_forms_take_the_general_path(ann) -> None:
    table = PeerSections("Z")
    data = bytes(rewrite(message(True, False, None), None, ann))
    assert table.find(data) is None
    assert table.find(message(True, False, None)) is None           # no annotations at all
    assert table.find(b"") is None and table.find(b"\x00\x53\x72\xc1") is None


def test_a_changed_section_is_never_taken_for_the_last_one() -> None:
    table = PeerSections("Z")
    first = bytes(rewrite(message(True, False, None), None, ANNS[0]))
    other = bytes(rewrite(message(True, False, None), None, RouterAnnotations("0/A", ["0/A"], "svc/y")))
    assert table.find(first)[3].key == "svc/x"
    assert table.find(other)[3].key == "svc/y"
    assert table.find(first)[3].key == "svc/x"
    for cut in range(len(first)):                 # a truncated message is never read as the last one
        found = table.find(first[:cut])
        assert found is None or found[0] <= cut


@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("delivery_ann", [False, True])
@pytest.mark.parametrize("body", [b"payload", b"z" * 5000])
def test_ingress_section_agrees_with_annotate_ingress(header, delivery_ann, body) -> None:
    sections = IngressSections("Z")
    for key in ("svc/x", "_topo/0/D/temp.abc", "svc/ünï", "svc/x"):
        data = message(header, delivery_ann, None, body)
        at = insertion_point(data)
        assert at >= 0
        assert data[:at] + sections.section(key) + data[at:] == annotate_ingress(
            data, RouterAnnotations("0/Z", ["0/Z"], key))


def test_messages_with_annotations_take_the_general_path() -> None:
    assert insertion_point(message(True, True, USER)) == -1
    assert insertion_point(message(False, False, USER)) == -1
    assert insertion_point(b"") == 0            # (an empty transfer never gets here: rejected before)


def test_forget_unused_keeps_what_is_used_and_drops_the_rest() -> None:
    """`forget_unused` (every node.forget_after): a section used since the call before is kept (the same
    object, not read again), one unused for two calls is gone; what is sent does not change."""
    table = PeerSections("Z")
    used, left = (annotate_ingress(message(False, False, None, mid=f"m{i}"), ann) for i, ann in
                  enumerate(ANNS[:2]))
    first = table.find(used)[3]
    table.find(left)
    assert len(table) == 2
    table.forget_unused()
    table.last = None                       # not the last-message shortcut: the table itself
    assert table.find(used)[3] is first     # used in this period: moved back, not learned again
    table.forget_unused()
    assert len(table) == 1                  # `left` was not used for a whole period
    table.last = None
    assert table.find(used)[3] is first
    table.forget_unused()
    table.forget_unused()
    assert len(table) == 0
    table.last = None
    again = table.find(left)
    assert sent(left, again, True) == general(left, "Z")[1]


def test_ingress_sections_forget_unused() -> None:
    sections = IngressSections("Z")
    kept, dropped = sections["svc/kept"], sections["_topo/0/C/temp.gone"]
    sections.forget_unused()
    assert sections["svc/kept"] is kept and sections.size() == 2
    sections.forget_unused()
    assert sections.size() == 1 and "_topo/0/C/temp.gone" not in sections
    assert sections["_topo/0/C/temp.gone"] == dropped     # made again, the same bytes
