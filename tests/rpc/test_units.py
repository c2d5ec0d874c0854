"""router.rpc pieces without a node: reply demultiplexing, the credit window, the outcome rules, the
message layouts."""

from __future__ import annotations

import random
import threading

import pytest
from proton import Delivery, Message

from router.rpc import RpcError, messages
from router.rpc.credit import CreditWindow
from router.rpc.demux import MessageIds, PendingCalls, Waiter
from router.rpc.outcomes import Action, backoff, decide

# ------------------------------------------------------------------------------------------ demux


def test_replies_reach_their_own_waiter_whatever_the_order():
    pending = PendingCalls()
    ids = MessageIds("test")
    results: dict[str, object] = {}
    keys = [ids.next() for _ in range(200)]
    waiters = {k: pending.add(k) for k in keys}

    def caller(key: str) -> None:
        assert waiters[key].wait(10)
        results[key] = waiters[key].result()

    threads = [threading.Thread(target=caller, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    shuffled = keys[:]
    random.shuffle(shuffled)
    for k in shuffled:                       # the "loop thread": replies in random order
        assert pending.resolve(k, f"reply to {k}")
    for t in threads:
        t.join(10)
    assert results == {k: f"reply to {k}" for k in keys}
    assert len(pending) == 0 and pending.late_replies == 0


def test_late_or_unknown_replies_are_counted_and_dropped():
    pending = PendingCalls()
    w = pending.add("a:1")
    pending.discard("a:1")                   # the caller gave up
    assert not pending.resolve("a:1", "too late")
    assert not pending.resolve("someone-else:7", "never asked")
    assert pending.late_replies == 2
    assert not w.done


def test_first_completion_wins_and_fail_all():
    pending = PendingCalls()
    w1, w2 = pending.add(1), pending.add(2)
    assert pending.fail(1, TimeoutError("deadline"))
    assert not pending.resolve(1, "reply after the deadline")   # already gone
    assert pending.fail_all(ConnectionError("lost")) == 1
    with pytest.raises(TimeoutError):
        w1.result()
    with pytest.raises(ConnectionError):
        w2.result()
    with pytest.raises(KeyError):
        pending.add(3) and pending.add(3)


def test_waiter_is_one_shot():
    w = Waiter()
    assert not w.wait(0.01)
    assert w.set_result(1)
    assert not w.set_exception(RuntimeError())
    assert w.result() == 1


def test_message_ids_are_unique_across_threads():
    ids = MessageIds()
    got: list[str] = []
    lock = threading.Lock()

    def make() -> None:
        mine = [ids.next() for _ in range(1000)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 8000
    assert MessageIds().prefix != MessageIds().prefix


# ------------------------------------------------------------------------------------------ credit


class FakeReceiver:
    def __init__(self) -> None:
        self.credit = 0
        self.flows: list[int] = []

    def flow(self, n: int) -> None:
        self.credit += n
        self.flows.append(n)

    def deliver(self) -> None:
        assert self.credit > 0, "delivery without credit"
        self.credit -= 1


def test_server_window_refills_at_half_and_bounds_what_is_held():
    link, w = FakeReceiver(), CreditWindow(100)
    w.open(link)
    assert link.flows == [100]
    for _ in range(100):                     # 100 requests arrive, none settled yet
        link.deliver()
        w.on_delivery(link)
    assert link.credit == 0 and w.blocked == 1 and link.flows == [100]
    for _ in range(49):                      # settling 49 frees less than half: no FLOW yet
        w.on_settled(link)
    assert link.flows == [100]
    w.on_settled(link)                       # the 50th: top up by 50
    assert link.flows == [100, 50]
    assert link.credit + w.unsettled == 100


def test_reply_window_refills_at_half():
    link, w = FakeReceiver(), CreditWindow(200)
    w.open(link)
    for _ in range(99):
        link.deliver()
        w.on_delivery(link, settled=True)    # replies are settled on arrival
    assert link.flows == [200]
    link.deliver()
    w.on_delivery(link, settled=True)
    assert link.flows == [200, 100] and link.credit == 200


def test_frozen_window_grants_nothing():
    link, w = FakeReceiver(), CreditWindow(10)
    w.open(link)
    for _ in range(10):
        link.deliver()
        w.on_delivery(link)
    w.freeze()
    for _ in range(10):
        w.on_settled(link)
    assert link.flows == [10] and link.credit == 0


# ------------------------------------------------------------------------------------------ outcomes


@pytest.mark.parametrize("state, failed, undeliverable, retry_modified, action", [
    (Delivery.ACCEPTED, False, False, False, Action.DONE),
    (Delivery.REJECTED, False, False, True, Action.FAIL),
    (Delivery.RELEASED, False, False, False, Action.RETRY),
    (Delivery.MODIFIED, False, True, False, Action.RETRY),      # not processed: try elsewhere
    (Delivery.MODIFIED, True, False, False, Action.FAIL),       # may have been processed
    (Delivery.MODIFIED, True, True, False, Action.FAIL),
    (Delivery.MODIFIED, True, False, True, Action.RETRY),       # caller asked for at-least-once
])
def test_outcome_rules(state, failed, undeliverable, retry_modified, action):
    decision = decide(state, failed, undeliverable, retry_modified)
    assert decision is not None and decision.action is action


def test_non_terminal_state_is_no_decision():
    assert decide(Delivery.RECEIVED) is None


def test_backoff_doubles_and_is_capped():
    assert [backoff(n, 0.01, 0.05) for n in range(1, 6)] == [0.01, 0.02, 0.04, 0.05, 0.05]


# ------------------------------------------------------------------------------------------ messages


def test_reply_and_error_reply_layout():
    req = Message(id="c:1", reply_to="amqp:/_topo/0/A/temp.x", body="hi")
    ok = messages.reply(req, messages.Reply("hello", {"served-by": "A"}))
    assert (ok.address, ok.correlation_id, ok.body, ok.properties) == \
        ("amqp:/_topo/0/A/temp.x", "c:1", "hello", {"served-by": "A"})
    assert messages.unpack_reply(ok) == "hello"
    err = messages.error_reply(req, ValueError("bad input"))
    assert err.properties["error"] == "ValueError: bad input" and err.correlation_id == "c:1"
    with pytest.raises(RpcError) as info:
        messages.unpack_reply(err)
    assert info.value.exc_type == "ValueError" and info.value.remote_message == "bad input"


def _decoded(data: bytes) -> Message:
    msg = Message()
    msg.decode(data)
    return msg


def _norm(value: object) -> object:
    """A value with its types spelled out (memoryviews, which Proton returns for binary, as bytes)."""
    if isinstance(value, memoryview):
        return ("binary", bytes(value))
    if isinstance(value, dict):
        return ("map", sorted(((repr(_norm(k)), _norm(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_norm(v) for v in value])
    return (type(value).__name__, value)


def _fields(msg: Message) -> tuple:
    return (_norm(msg.body), msg.id, msg.correlation_id, msg.address, msg.reply_to, _norm(msg.properties),
            msg.durable, msg.priority, msg.ttl, msg.first_acquirer, msg.delivery_count)


BODIES = ["x" * 64, "", "é" * 300, "y" * 70_000, b"bin", 5, -3, 2**63 - 1, 1.5, True, None, [1, "a", None],
          (1, 2), {"a": 1, "b": [1, {"c": b"d"}]}, {7: "x"}, {}]


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("properties", [None, {"k": "v", "n": 3, "l": [1.5, None]}])
def test_fast_encoding_decodes_like_protons(body, properties):
    """encode_request / encode_reply (router.amqp for plain values) give the receiver the same message as
    python-qpid-proton's Message.encode."""
    fast = messages.encode_request("svc/x", body, "c:1", "amqp:/_topo/0/A/temp.x", properties)
    slow = messages.request("svc/x", body, "c:1", "amqp:/_topo/0/A/temp.x", properties).encode()
    assert _fields(_decoded(fast)) == _fields(_decoded(slow))
    req = _decoded(slow)
    result = messages.Reply(body, properties or {})
    assert _fields(_decoded(messages.encode_reply(req, result))) == \
        _fields(_decoded(messages.reply(req, result).encode()))


def test_proton_types_and_odd_values_still_go_through_proton():
    from proton import symbol, ulong

    for body in (symbol("s"), ulong(3), [symbol("s")], {"k": ulong(1)}):
        fast = messages.encode_request("svc/x", body, "c:1", None)
        slow = messages.request("svc/x", body, "c:1", None).encode()
        assert _fields(_decoded(fast)) == _fields(_decoded(slow))
    for bad in (2**64 - 1, object()):       # Proton cannot encode these: the same error as before
        with pytest.raises((OverflowError, KeyError, TypeError)):
            messages.encode_request("svc/x", bad, "c:1", None)


def test_notification_round_trip():
    msg = messages.notification("n/t.info", "compute.start", {"id": 3}, "info", "host-1")
    decoded = Message()
    decoded.decode(msg.encode())
    n = messages.parse_notification(decoded)
    assert (n.event_type, n.payload, n.priority) == ("compute.start", {"id": 3}, "info")
    assert n.publisher_id == "host-1"
    assert n.properties["event_type"] == "compute.start"


# ------------------------------------------------------------------------------------------ client core


class _FakeLink:
    def __init__(self, name: str) -> None:
        self.name = name
        self.is_receiver = True
        self.credit = 200
        self.flows: list[int] = []

    def flow(self, n: int) -> None:
        self.credit += n
        self.flows.append(n)


class _FakeDelivery:
    """Stands for a pn_delivery_t*: the core hands it to ``wire.settle`` with the state it chose."""

    def __init__(self) -> None:
        self.settled = False
        self.state: int | None = None


class _FakeEvent:
    def __init__(self, link: _FakeLink, message: Message) -> None:
        self.link = link
        self.delivery = _FakeDelivery()
        self.data = bytes(message.encode())


def test_client_core_routes_replies_by_correlation_id():
    """The loop-thread half of RpcClient, fed replies by hand: each reaches the waiter filed under its
    correlation-id, unknown ones are accepted and counted, and the call's deadline timer is dropped."""
    from router.rpc.client import _ClientCore
    from router.rpc.sending import SendOp

    pending = PendingCalls()
    core = _ClientCore("amqp://127.0.0.1:1", "unit", 200, pending, max_links=4)
    link = _FakeLink("replies")
    core.reply_receiver = link
    waiters = {mid: pending.add(mid) for mid in ("p:1", "p:2", "p:3")}
    cancelled = []

    class FakeTimer:
        def __init__(self, mid: str) -> None:
            self.mid = mid

        def cancel(self) -> None:
            cancelled.append(self.mid)

    for mid in waiters:
        op = SendOp(b"", "svc", 0.0, on_done=lambda op, err: None, key=mid, state="done")
        op.timer = FakeTimer(mid)
        core.calls[mid] = op
    events = [_FakeEvent(link, Message(body=f"r{n}", correlation_id=f"p:{n}")) for n in (3, 1)]
    events.append(_FakeEvent(link, Message(body="stray", correlation_id="other:9")))

    def settle(delivery: _FakeDelivery, state: int | None, lazy: bool = False) -> None:
        delivery.state, delivery.settled = state, True

    core.wire.settle = settle

    def end_of_turn() -> None:          # what the loop does once it releases the engine: wake callers
        deferred, core.loop._deferred = core.loop._deferred, []
        core.loop._run_deferred(deferred)

    for ev in events:
        core.on_message(ev.link, ev.delivery, ev.data, False)
    assert not any(w.done for w in waiters.values())       # nobody woken while the engine is held
    end_of_turn()
    assert all(ev.delivery.settled and ev.delivery.state == Delivery.ACCEPTED for ev in events)
    assert waiters["p:3"].result().body == "r3" and waiters["p:1"].result().body == "r1"
    assert not waiters["p:2"].done and set(core.calls) == {"p:2"}
    assert sorted(cancelled) == ["p:1", "p:3"]
    assert pending.late_replies == 1 and core.replies == 3
    # a reply on some other receiver is not a reply: released, never matched
    other = _FakeEvent(_FakeLink("not-the-reply-link"), Message(body="x", correlation_id="p:2"))
    core.on_message(other.link, other.delivery, other.data, False)
    end_of_turn()
    assert other.delivery.state == Delivery.RELEASED and not waiters["p:2"].done
    assert core.loop.stop()                  # never started: just closes its wake-up pipe
