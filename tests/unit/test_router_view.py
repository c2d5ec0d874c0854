"""router_view: the fast reader of ingress-annotated messages agrees with the general AnnotationLayout."""

from __future__ import annotations

import pytest
from proton import Message, symbol

from router.amqp.annotations import (
    AnnotationLayout,
    RouterAnnotations,
    annotate_ingress,
    rewrite,
    router_view,
    with_hop,
)
from router.amqp.codec import MalformedError


def message(header: bool, delivery_ann: bool, user_ann: dict | None, body=b"payload") -> bytes:
    m = Message(body=body, address="svc/x", id="m1")
    if header:
        m.durable = True
        m.priority = 7
        m.ttl = 5.0
    if delivery_ann:
        m.instructions = {symbol("x-opt-da"): 1}
    if user_ann:
        m.annotations = user_ann
    return bytes(m.encode())


CASES = [
    (h, da, ua, ann)
    for h in (False, True)
    for da in (False, True)
    for ua in (None, {symbol("x-opt-app.k"): "v", symbol("x-opt-n"): 3})
    for ann in (RouterAnnotations("0/A", ["0/A"], "svc/x"),
                RouterAnnotations("0/A", ["0/A", "0/B", "0/C"], "_topo/0/D/temp.abc"),
                RouterAnnotations("0/" + "é" * 20, ["0/" + "é" * 20], "svc/ünï"))
]


@pytest.mark.parametrize("header,delivery_ann,user_ann,ann", CASES)
def test_view_matches_the_general_path(header, delivery_ann, user_ann, ann) -> None:
    data = rewrite(message(header, delivery_ann, user_ann), None, ann)
    view = router_view(data)
    layout = AnnotationLayout(data)
    assert view is not None
    assert view.ann == layout.read() == ann
    hop = with_hop(ann, "Z")
    assert view.rewrite(hop) == layout.rewrite(hop)
    assert view.strip() == layout.strip()
    assert view.info.to == "svc/x"
    stripped = Message()
    stripped.decode(view.strip())
    assert stripped.body == b"payload" and stripped.annotations == (user_ann or None)


@pytest.mark.parametrize("ann", [
    RouterAnnotations("0/A", ["0/A"], None),            # no `to`
    RouterAnnotations(None, ["0/A"], "svc/x"),          # no ingress
    RouterAnnotations("0/A", [], "svc/x"),              # no trace
    RouterAnnotations("0/A", ["0/A"], "svc/x", 2),      # a phase
    RouterAnnotations("0/A", ["0/" + "n" * 300], "svc/x"),   # str32 in the trace
])
def test_other_forms_take_the_general_path(ann) -> None:
    data = rewrite(message(False, False, None), None, ann)
    assert router_view(data) is None
    assert AnnotationLayout(data).read() == ann


def test_no_annotations_garbage_and_truncation_give_none() -> None:
    plain = message(True, False, None)
    assert router_view(plain) is None
    assert router_view(b"") is None and router_view(b"\x00\x53\x72\xc1") is None
    full = rewrite(plain, None, RouterAnnotations("0/A", ["0/A"], "svc/x"))
    section_end = router_view(full)._end
    for cut in range(section_end):              # cut inside the annotations: never a view
        assert router_view(full[:cut]) is None, cut


def test_a_router_key_among_the_user_entries_takes_the_general_path() -> None:
    data = rewrite(message(False, False, None), None, RouterAnnotations("0/A", ["0/A"], "svc/x"))
    m = Message()
    m.decode(data)
    m.annotations[symbol("x-opt-qd.stream")] = 1
    assert router_view(bytes(m.encode())) is None


@pytest.mark.parametrize("header,delivery_ann,user_ann", [(h, da, ua) for h, da, ua, _ in CASES[::3]])
def test_annotate_ingress_equals_rewrite(header, delivery_ann, user_ann) -> None:
    data = message(header, delivery_ann, user_ann)
    ann = RouterAnnotations("0/A", ["0/A"], "svc/x")
    assert annotate_ingress(data, ann) == rewrite(data, None, ann)


def test_annotate_ingress_drops_a_clients_router_keys_and_rejects_garbage() -> None:
    m = Message(body=b"x", annotations={symbol("x-opt-qd.trace"): ["0/Z"], symbol("k"): 1})
    out = annotate_ingress(bytes(m.encode()), RouterAnnotations("0/A", ["0/A"], "svc/x"))
    assert AnnotationLayout(out).read() == RouterAnnotations("0/A", ["0/A"], "svc/x")
    for bad in (b"\x00\x53\x70", b"\x00\x53\x70\xc0\x09"):
        with pytest.raises(MalformedError):
            annotate_ingress(bad, RouterAnnotations("0/A", ["0/A"], "svc/x"))


def test_repeated_sections_come_from_the_cache_and_stay_unchanged() -> None:
    ann = RouterAnnotations("0/A", ["0/A"], "svc/cached")
    first = rewrite(message(False, False, None, body=b"one"), None, ann)
    second = rewrite(message(True, False, None, body=b"two"), None, ann)   # same section, other offset
    v1 = router_view(first)
    copy = v1.read()
    copy.trace.append("0/X")                      # a caller's copy: the cached annotations keep theirs
    v2 = router_view(second)
    assert v2.ann == ann and v2.ann is v1.ann
    assert v2.strip() == AnnotationLayout(second).strip()
    assert v2.rewrite(with_hop(v2.ann, "B")) == AnnotationLayout(second).rewrite(with_hop(ann, "B"))
