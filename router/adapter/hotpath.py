"""The forwarding hot path's grouped Proton calls (hotpath.c, compiled by `make` into `_hotpath`).

Each cffi call into Proton releases and re-takes the GIL (~350 instructions) besides converting its
arguments, and a forwarded message took ~30 of them. The functions here make several Proton calls in one
crossing (see hotpath.c for what each does):

- `next_event(collector, pop, out)`: pop the current event, skip transport events, return the next type
  with the event, its delivery and the delivery's link (or the flow's link) in `out`; a delivery event
  on a sending link that brought a terminal outcome is `SETTLED + outcome`;
- `reader(buf, cap)`: what transfers are read into (`buf`, which the caller keeps alive; `set_buffer` when
  it grows) and the stream of messages from peers they are compared with (`set_stream`): passed once
  rather than as arguments of every call, since cffi converts each argument of each call;
- `take(d, link, reader)`: receive a complete transfer and advance past it: `(size << 1) | presettled`
  or a negative code (`NOT_READABLE`, `PARTIAL`, `ABORTED`, `TOO_LARGE`, `EMPTY`);
- `take_peer(d, link, reader)`: `take` for a transfer from a peer node that also says whether it starts
  with the stream's prefix: `(size << 2) | (it does) << 1 | presettled`, or the same codes;
- `set_stream(reader, prefix, plen, to_peer, lp, to_client, lc)`: the stream to compare with, and what
  replaces its prefix toward a peer or a client (copied);
- `send(link, data, n)`: one complete new delivery with a fresh tag;
- `send_stream(link, reader, to_client)`: the last transfer taken, its stream's prefix replaced;
- `send_inserted(link, reader, at, insert, m)`: the last transfer taken with `insert[:m]` inserted at
  `at` (an ingress's annotations, without joining the message first);
- `find_to(data, n)`: where an encoded message's properties.to is, `(offset << 32) | length`, for the usual
  encodings; -1 for anything else (the caller reads the message the general way);
- `outcome(od)`: a consumer's terminal outcome, ACCEPTED if it settled without one, else 0;
- `settle_pair(d, state, out)`: give `d` an outcome (unless 0), settle it, then settle `out` (unless NULL).

Proton is called through the function pointers of python-qpid-proton's own binding (`cproton_ffi`), whose
signatures are checked here against what hotpath.c declares: a Proton whose API differs stops the node at
import with a clear error rather than misbehaving. Objects pass as `void *`: cffi accepts any pointer
there, and what comes back compares and hashes equal to Proton's typed pointers to the same object.
"""

from __future__ import annotations

from pathlib import Path

from cproton_ffi import ffi as proton_ffi
from cproton_ffi import lib as proton

from router.adapter.hotpath_build import source_hash

try:
    from router.adapter._hotpath import ffi, lib
except ImportError as exc:               # pragma: no cover - the build is part of `make`
    raise ImportError("router/adapter/hotpath.c is not compiled: run `make` (or "
                      "`python router/adapter/hotpath_build.py`)") from exc

# the Proton functions hotpath.c calls, in its order, with the signatures it calls them with
FUNCTIONS = (
    ("pn_collector_peek", "struct pn_event_t *(*)(struct pn_collector_t *)"),
    ("pn_collector_pop", "_Bool(*)(struct pn_collector_t *)"),
    ("pn_event_type", "pn_event_type_t(*)(struct pn_event_t *)"),
    ("pn_event_delivery", "struct pn_delivery_t *(*)(struct pn_event_t *)"),
    ("pn_event_link", "struct pn_link_t *(*)(struct pn_event_t *)"),
    ("pn_delivery_link", "struct pn_link_t *(*)(struct pn_delivery_t *)"),
    ("pn_delivery_readable", "_Bool(*)(struct pn_delivery_t *)"),
    ("pn_delivery_partial", "_Bool(*)(struct pn_delivery_t *)"),
    ("pn_delivery_settled", "_Bool(*)(struct pn_delivery_t *)"),
    ("pn_delivery_aborted", "_Bool(*)(struct pn_delivery_t *)"),
    ("pn_delivery_pending", "size_t(*)(struct pn_delivery_t *)"),
    ("pn_link_recv", "ssize_t(*)(struct pn_link_t *, char *, size_t)"),
    ("pn_link_advance", "_Bool(*)(struct pn_link_t *)"),
    ("pn_delivery", "struct pn_delivery_t *(*)(struct pn_link_t *, struct pn_bytes_t)"),
    ("pn_link_send", "ssize_t(*)(struct pn_link_t *, char *, size_t)"),
    ("pn_delivery_remote_state", "uint64_t(*)(struct pn_delivery_t *)"),
    ("pn_delivery_update", "void(*)(struct pn_delivery_t *, uint64_t)"),
    ("pn_delivery_settle", "void(*)(struct pn_delivery_t *)"),
    ("pn_link_is_sender", "_Bool(*)(struct pn_link_t *)"),
)

NOT_READABLE, PARTIAL, ABORTED, TOO_LARGE, EMPTY = -1, -2, -3, -4, -5
SETTLED = 0x1000        # next_event: SETTLED + outcome for a consumer's terminal outcome on a sending link
NULL = ffi.NULL

# Outbound delivery tags, unique in the process (every node's Deliveries draws from it: two nodes may run
# in one process in tests), shared with the Python code that makes deliveries itself (`TAG` over it).
TAG_COUNTER = proton_ffi.new("uint64_t *")
TAG = proton_ffi.new("pn_bytes_t *", (8, proton_ffi.cast("char *", TAG_COUNTER)))[0]


SOURCE = Path(__file__).with_name("hotpath.c")


def _check(source: Path = SOURCE) -> None:
    """Refuse a stale build, or a Proton whose functions differ from what hotpath.c declares."""
    built = proton_ffi.string(lib.hp_source()).decode()
    if source.exists() and built != source_hash(source.read_text()):
        raise ImportError("router/adapter/_hotpath is older than hotpath.c: run `make`")
    for name, signature in FUNCTIONS:
        found = proton_ffi.typeof(proton_ffi.addressof(proton, name)).cname
        if found != signature:
            raise ImportError(f"Proton's {name} is {found}, hotpath.c calls {signature}")
    if (proton_ffi.sizeof("pn_event_type_t") != 4 or proton_ffi.sizeof("pn_bytes_t") != 16
            or proton_ffi.offsetof("pn_bytes_t", "start") != 8):
        raise ImportError("Proton's pn_event_type_t or pn_bytes_t is not laid out as hotpath.c expects")


def _init() -> None:
    _check()
    table = ffi.new("void *[]", [proton_ffi.cast("void *", proton_ffi.addressof(proton, name))
                                 for name, _ in FUNCTIONS])
    expected = lib.hp_init(table, len(FUNCTIONS), proton.PN_DELIVERY, proton.PN_LINK_FLOW,
                           proton.PN_TRANSPORT, ffi.cast("uint64_t *", TAG_COUNTER))
    if expected != len(FUNCTIONS):
        raise ImportError(f"hotpath.c takes {expected} Proton functions, hotpath.py gives {len(FUNCTIONS)}")


def reader(buf: object, cap: int) -> object:
    """A reader over the buffer `buf` of `cap` bytes, freed with its last reference."""
    r = lib.hp_reader_new()
    if r == NULL:
        raise MemoryError("hotpath reader")
    r = ffi.gc(r, lib.hp_reader_free)
    lib.hp_reader_buffer(r, buf, cap)
    return r


_init()
next_event = lib.hp_next
set_buffer = lib.hp_reader_buffer
set_stream = lib.hp_reader_stream
take = lib.hp_take
take_peer = lib.hp_take_peer
send = lib.hp_send
send_stream = lib.hp_send_stream
send_inserted = lib.hp_send_inserted
outcome = lib.hp_outcome
settle_pair = lib.hp_settle_pair
find_to = lib.hp_find_to
