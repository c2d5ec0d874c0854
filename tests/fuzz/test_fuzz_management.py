"""Malformed management requests (docs/MANAGEMENT.md): a clear error, or dropped with a log line.

A seeded generator (FUZZ_SEED, printed) sends FUZZ_MGMT_REQUESTS (default 3000) requests to the
node's ``$management`` on a sender link targeted there: random application properties (operation,
type, identity of every type, extra keys, none), random bodies (``attributeNames`` lists of anything,
non-map bodies, nested values), random correlation and message ids, requests without ``reply_to`` or
with a ``reply_to`` nobody consumes, and mutated encodings of valid requests (undecodable, invalid
UTF-8...). Checked:

* every request is settled by the node (no request hangs);
* every request that names our reply address is answered with an integer ``statusCode`` of 200, 400
  or 404 and a non-empty ``statusDescription`` (never 500, which means an internal error);
* requests without ``reply_to`` leave a log line; the ones the agent cannot read are REJECTED, each
  with a log line (among them valid AMQP that python-qpid-proton cannot decode, e.g. a map with binary
  keys: a known limit of the agent, which reads requests with proton.Message);
* the node logs no internal error or traceback, and a good request is still answered at the end.
"""

from __future__ import annotations

import os
import random

from proton import Message

from tests.support import frame_gen as gen
from tests.support.clients import Client
from tests.support.waiting import wait_for, wait_until

REQUESTS = int(os.environ.get("FUZZ_MGMT_REQUESTS", "3000"))
TYPES = ("node", "connection", "link", "address", "router-node", "broker", "listener", "router",
         "org.apache.qpid.dispatch.router.link", "meshrouter.node")
ATTRIBUTES = ("identity", "id", "linkName", "owningAddr", "deliveryCount", "uptimeSeconds", "reachable")


def _properties(rng: random.Random) -> object:
    k = rng.random()
    if k < 0.05:
        return None
    if k < 0.1:
        return {rng.choice(("operation", "type", gen.rstr(rng, 8))): gen.value(rng)}
    props = {"operation": rng.choice(("QUERY", "READ", "GET-TYPES", "query", "read", "DELETE", "",
                                      gen.ustr(rng, 10), gen.value(rng)))}
    if rng.random() < 0.9:
        props["type"] = rng.choice((*TYPES, "", gen.ustr(rng, 20), gen.value(rng)))
    if rng.random() < 0.5:
        props[rng.choice(("identity", "name"))] = rng.choice(("1", "A", "0", gen.ustr(rng, 12),
                                                              gen.value(rng)))
    if rng.random() < 0.2:
        props[gen.rstr(rng, 10)] = gen.value(rng, 2)
    return {k: v for k, v in props.items() if gen.hashable(v)}


def _body(rng: random.Random) -> object:
    k = rng.random()
    if k < 0.4:
        return None
    if k < 0.8:
        names = [rng.choice((*ATTRIBUTES, gen.ustr(rng, 10), gen.value(rng, 2)))
                 for _ in range(rng.randint(0, 6))]
        return {rng.choice(("attributeNames", "attributeNames", gen.rstr(rng, 6))):
                rng.choice((names, names, gen.value(rng)))}
    return gen.value(rng)


def _request(rng: random.Random, i: int, reply_to: str) -> tuple[bytes, object]:
    """An encoded request and the correlation id its answer to ``reply_to`` must carry (None: no answer
    is due)."""
    m = Message(address="$management")
    m.id = f"fz-{i}"
    expect = True
    k = rng.random()
    if k < 0.08:
        expect = False                                   # no reply_to: dropped with a log line
    elif k < 0.12:
        m.reply_to = f"fuzz/nobody-{rng.randint(0, 9)}"   # nobody consumes it: the answer is released
        expect = False
    else:
        m.reply_to = reply_to
    cid: object = m.id
    if rng.random() < 0.1:
        m.correlation_id = cid = rng.choice((f"c-{gen.rstr(rng, 10)}", rng.randint(0, 2**40),
                                             rng.randbytes(6)))
    props = _properties(rng)
    body = _body(rng)
    try:
        m.properties = props
        m.body = body
        data = bytes(m.encode())
    except Exception:                                    # a value the encoder refuses: no body
        m.properties, m.body = {"operation": "QUERY"}, None
        data = bytes(m.encode())
    if rng.random() < 0.15:
        return gen.mutate_body(rng, data), None          # may not even decode any more
    return data, cid if expect else None


def test_malformed_management_requests_get_errors_or_are_dropped_with_a_log_line(node_factory):
    seed = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"FUZZ_SEED={seed} FUZZ_MGMT_REQUESTS={REQUESTS}")
    rng = random.Random(seed)
    a = node_factory("A")
    c = Client(a.url)
    replies = c.receiver(dynamic=True, credit_window=200)
    reply_to = replies.address
    tx = c.sender("$management")
    tx.wait_credit()
    due: dict[object, int] = {}              # correlation id -> index, for requests that must be answered
    trackers = []
    for i in range(REQUESTS):
        wait_for(lambda: tx.credit - tx.queued > 0 and sum(not t.settled for t in trackers) < 20,
                 what=f"credit for request {i} (seed {seed})")
        data, cid = _request(rng, i, reply_to)
        trackers.append(tx.send(data))
        if cid is not None:
            due[cid] = i
    wait_until(lambda: all(t.settled for t in trackers), 20,
               lambda: f"every request settled ({sum(not t.settled for t in trackers)} not, seed {seed})")
    # the agent rejects what python-qpid-proton cannot read (e.g. a map with binary keys, which it
    # decodes as unhashable memoryviews), with a log line: no answer is due for those
    unreadable = {c: i for c, i in due.items() if trackers[i].outcome == "REJECTED"}
    for c in unreadable:
        del due[c]
    assert set(t.outcome for t in trackers) <= {"ACCEPTED", "REJECTED"}, \
        {t.outcome for t in trackers}

    def cid_of(m: Message) -> object:
        c = m.correlation_id
        return c.tobytes() if isinstance(c, memoryview) else c      # Proton reads binary ids as views

    def answers() -> dict:
        out = {}
        for r in replies.received:
            if r.message is not None and cid_of(r.message) in due:
                out[cid_of(r.message)] = r.message
        return out

    wait_until(lambda: len(answers()) >= len(due), 20,
               lambda: f"answers to {len(due)} requests (got {len(answers())}, seed {seed}): missing "
               f"{sorted(due[c] for c in set(due) - set(answers()))[:10]}")
    bad = []
    for r in replies.received:
        m = r.message
        assert m is not None, f"undecodable answer: {r.decode_error}"
        p = m.properties or {}
        status, desc = p.get("statusCode"), p.get("statusDescription")
        if status not in (200, 400, 403, 404) or not isinstance(desc, str) or not desc:
            bad.append((m.correlation_id, status, desc))
    assert not bad, f"answers without a clear status (seed {seed}): {bad[:10]}"
    statuses = {}
    for m in answers().values():
        statuses[m.properties["statusCode"]] = statuses.get(m.properties["statusCode"], 0) + 1
    print(f"{REQUESTS} requests, {len(due)} due an answer, statuses {statuses}, "
          f"outcomes { {o: sum(t.outcome == o for t in trackers) for o in {t.outcome for t in trackers}} }")
    assert statuses.get(400, 0) > 0 and statuses.get(200, 0) > 0

    # still serving
    tx.send(Message(address="$management", id="final", reply_to=reply_to,
                    properties={"operation": "QUERY", "type": "node"}, body={"attributeNames": ["id"]}))
    final = wait_for(lambda: next((r.message for r in replies.received
                                   if r.message is not None and r.message.correlation_id == "final"), None),
                     what="the answer to a good request")
    assert final.properties["statusCode"] == 200 and final.body["results"] == [["A"]]

    log = a.stderr_path.read_text(errors="replace")
    errors = [ln[:1500] for ln in log.splitlines() if "internal error" in ln or "Traceback" in ln]
    assert not errors, f"internal errors on the node (seed {seed}):\n" + "\n".join(errors[:5])
    assert "management: request without reply_to dropped" in log
    # (the node itself rejects an empty transfer, or sections out of AMQP order, before the agent: a
    # mutation can cut a request to nothing or break its sections)
    by_node = [t for t in trackers if t.condition is not None and (
        t.condition.description == "empty message"
        or t.condition.description.startswith("malformed message: "))]
    rejected = sum(t.outcome == "REJECTED" for t in trackers) - len(by_node)
    assert log.count("management: undecodable request dropped") == rejected, \
        f"{rejected} requests rejected, not each with a log line (seed {seed})"
