/* The forwarding hot path's Proton calls, a few at a time (issue 21).
 *
 * Every call from Python into Proton through cffi releases and re-takes the GIL and converts its arguments:
 * ~350 instructions of overhead around calls that often do a few dozen. A forwarded message took ~30 such
 * calls. Each function here makes several Proton calls in one crossing, in the order the Python code made
 * them; the decisions stay in Python.
 *
 * Proton is reached through function pointers that router/adapter/hotpath.py takes from python-qpid-proton's
 * own compiled binding (cproton_ffi) and checks against the signatures below, so this file needs no Proton
 * headers and always calls the Proton the node runs with. All objects are opaque (void *).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef struct { size_t size; const char *start; } hp_bytes_t;    /* pn_bytes_t, pn_delivery_tag_t */

static struct {
    void *(*collector_peek)(void *);
    bool (*collector_pop)(void *);
    int (*event_type)(void *);
    void *(*event_delivery)(void *);
    void *(*event_link)(void *);
    void *(*delivery_link)(void *);
    bool (*delivery_readable)(void *);
    bool (*delivery_partial)(void *);
    bool (*delivery_settled)(void *);
    bool (*delivery_aborted)(void *);
    size_t (*delivery_pending)(void *);
    ssize_t (*link_recv)(void *, char *, size_t);
    bool (*link_advance)(void *);
    void *(*delivery)(void *, hp_bytes_t);
    ssize_t (*link_send)(void *, const char *, size_t);
    uint64_t (*delivery_remote_state)(void *);
    void (*delivery_update)(void *, uint64_t);
    void (*delivery_settle)(void *);
    bool (*link_is_sender)(void *);
} pn;

#define HP_FUNCTIONS 19
#define SETTLED 0x1000                  /* hp_next: SETTLED + outcome, a consumer's outcome arrived */

static int ev_delivery, ev_link_flow, ev_transport;
static uint64_t *tag_counter;          /* the node's delivery-tag counter (shared with its Python code) */

#define ACCEPTED 0x24u
#define MODIFIED 0x27u

/* The outcome a consumer gave one of our deliveries: its terminal state, ACCEPTED when it settled without
 * one, 0 when there is nothing to pass on yet. */
static uint64_t hp_outcome(void *od)
{
    uint64_t state = pn.delivery_remote_state(od);
    if (state >= ACCEPTED && state <= MODIFIED) return state;
    return pn.delivery_settled(od) ? ACCEPTED : 0;
}

/* Take the Proton functions (in the order of the struct above), the event types handled here, and the
 * counter outbound delivery tags are drawn from. Returns the number of functions expected. */
static int hp_init(void **fns, int n, int delivery, int link_flow, int transport, uint64_t *tags)
{
    if (n != HP_FUNCTIONS) return HP_FUNCTIONS;
    void **slots = (void **)&pn;
    for (int i = 0; i < n; i++) slots[i] = fns[i];
    ev_delivery = delivery;
    ev_link_flow = link_flow;
    ev_transport = transport;
    tag_counter = tags;
    return HP_FUNCTIONS;
}

/* The next event to handle: pops the current one first when `pop`, and pops transport events (the node
 * needs nothing from them). out[0] = the event; for a delivery event out[1] = the delivery and out[2] =
 * its link; for a link-flow event out[1] = the link. Returns the event type, 0 when there is none; for a
 * delivery event on a sending link whose delivery has a terminal outcome (hp_outcome), SETTLED + it. */
static int hp_next(void *coll, int pop, void **out)
{
    if (pop) pn.collector_pop(coll);
    for (;;) {
        void *ev = pn.collector_peek(coll);
        if (!ev) return 0;
        int t = pn.event_type(ev);
        if (t == ev_transport) {
            pn.collector_pop(coll);
            continue;
        }
        out[0] = ev;
        if (t == ev_delivery) {
            void *d = pn.event_delivery(ev);
            void *link = pn.delivery_link(d);
            out[1] = d;
            out[2] = link;
            if (pn.link_is_sender(link)) {
                uint64_t outcome = hp_outcome(d);
                if (outcome) return SETTLED + (int)outcome;
            }
        } else if (t == ev_link_flow) {
            out[1] = pn.event_link(ev);
        }
        return t;
    }
}

/* What the node reads transfers into, and the stream of messages from peers it compares them with.
 * Passing these once instead of with every call saves the argument conversions cffi makes per call
 * (~100 instructions each; a transit hop made 13 of them). */
typedef struct hp_reader {
    char *buf;              /* the read buffer (the node's, kept alive by it) */
    size_t cap;             /* its size */
    size_t n;               /* the size of the last transfer taken */
    char *prefix;           /* the stream: the start of its last message, up to the end of its annotations */
    size_t plen;            /* 0: none */
    char *head[2];          /* what replaces the prefix toward a peer (0) or a client (1) */
    size_t hlen[2];
    size_t room;            /* bytes allocated at prefix (the prefix and both heads) */
} hp_reader_t;

static hp_reader_t *hp_reader_new(void)
{
    return calloc(1, sizeof(hp_reader_t));
}

static void hp_reader_free(hp_reader_t *r)
{
    if (r) free(r->prefix);
    free(r);
}

/* The read buffer (again when it grows). */
static void hp_reader_buffer(hp_reader_t *r, char *buf, size_t cap)
{
    r->buf = buf;
    r->cap = cap;
}

/* Follow a new stream: messages that start with prefix[0:plen] are sent on with it replaced by to_peer or
 * to_client (hp_send_stream). The bytes are copied. Returns 0, or -1 when there is no memory for them (no
 * stream then, as with plen 0: nothing compares equal). */
static int hp_reader_stream(hp_reader_t *r, const char *prefix, size_t plen, const char *to_peer, size_t lp,
                            const char *to_client, size_t lc)
{
    size_t need = plen + lp + lc;
    r->plen = 0;
    if (plen == 0) return 0;            /* no stream: nothing compares equal */
    if (need > r->room) {
        char *room = realloc(r->prefix, need);
        if (!room) return -1;
        r->prefix = room;
        r->room = need;
    }
    memcpy(r->prefix, prefix, plen);
    r->head[0] = r->prefix + plen;
    memcpy(r->head[0], to_peer, lp);
    r->hlen[0] = lp;
    r->head[1] = r->head[0] + lp;
    memcpy(r->head[1], to_client, lc);
    r->hlen[1] = lc;
    r->plen = plen;
    return 0;
}

/* Receive a complete transfer into the reader's buffer and advance the link past it.
 * Returns (size << 1) | pre-settled, or, having read nothing unless said: -1 not readable, -2 partial
 * (a message still arriving), -3 aborted (and pre-settled), -4 larger than the buffer, -5 empty (read and
 * advanced past). */
static int64_t hp_take(void *d, void *link, hp_reader_t *r)
{
    if (!pn.delivery_readable(d)) return -1;
    if (pn.delivery_partial(d)) return -2;
    bool settled = pn.delivery_settled(d);
    if (settled && pn.delivery_aborted(d)) return -3;
    size_t n = pn.delivery_pending(d);
    if (n > r->cap) return -4;
    ssize_t got = pn.link_recv(link, r->buf, n);
    pn.link_advance(link);
    if (got < 0) return -5;
    r->n = (size_t)got;
    return ((int64_t)got << 1) | (settled ? 1 : 0);
}

/* hp_take for a transfer from a peer node, also saying whether it starts with the stream's prefix:
 * (size << 2) | (it does) << 1 | pre-settled, or hp_take's negative codes. */
static int64_t hp_take_peer(void *d, void *link, hp_reader_t *r)
{
    int64_t got = hp_take(d, link, r);
    if (got < 0) return got;
    size_t n = r->n, plen = r->plen;
    int same = plen > 0 && n >= plen && memcmp(r->buf, r->prefix, plen) == 0;
    return (int64_t)n << 2 | same << 1 | (got & 1);
}

/* A new delivery on `link` with a fresh tag. */
static void *new_delivery(void *link)
{
    ++*tag_counter;
    hp_bytes_t tag = {sizeof(uint64_t), (const char *)tag_counter};
    return pn.delivery(link, tag);
}

/* Send `n` bytes as one complete new delivery on `link` (a fresh tag); returns the delivery. */
static void *hp_send(void *link, const char *data, size_t n)
{
    void *od = new_delivery(link);
    pn.link_send(link, data, n);
    pn.link_advance(link);
    return od;
}

/* Send the last transfer taken with the stream's prefix replaced by its head toward a client (`to_client`)
 * or a peer, as one complete new delivery on `link`; returns the delivery. */
static void *hp_send_stream(void *link, hp_reader_t *r, int to_client)
{
    size_t n = r->n, cut = r->plen < n ? r->plen : n;
    int k = to_client ? 1 : 0;
    void *od = new_delivery(link);
    if (r->hlen[k]) pn.link_send(link, r->head[k], r->hlen[k]);
    if (n > cut) pn.link_send(link, r->buf + cut, n - cut);
    pn.link_advance(link);
    return od;
}

/* Send the last transfer taken with insert[0:m] inserted at `at` (clamped to its end), as one complete new
 * delivery on `link` (an ingress adding its annotations without joining the message first); returns the
 * delivery. */
static void *hp_send_inserted(void *link, hp_reader_t *r, size_t at, const char *insert, size_t m)
{
    size_t n = r->n;
    if (at > n) at = n;
    void *od = new_delivery(link);
    if (at) pn.link_send(link, r->buf, at);
    if (m) pn.link_send(link, insert, m);
    if (n > at) pn.link_send(link, r->buf + at, n - at);
    pn.link_advance(link);
    return od;
}

/* Give `d` the outcome `state` (unless 0) and settle it; then settle `out` (unless NULL), the copy that went
 * out for it. */
static void hp_settle_pair(void *d, uint64_t state, void *out)
{
    if (state) pn.delivery_update(d, state);
    pn.delivery_settle(d);
    if (out) pn.delivery_settle(out);
}

/* ---- properties.to of an anonymous-relay message ------------------------------------------------------ */

static uint32_t be32(const unsigned char *b) { return (uint32_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]; }

/* The size of the encoded value at b[p] (its constructor and data) for the forms a message-id or user-id
 * takes, 0 for any other form or one that runs past `end`. */
static size_t field_size(const unsigned char *b, size_t p, size_t end)
{
    size_t size;
    if (p >= end) return 0;
    switch (b[p]) {
    case 0x40: case 0x41: case 0x42: case 0x43: case 0x44: size = 1; break;          /* null, bool, 0 */
    case 0x50: case 0x51: case 0x52: case 0x53: case 0x54: case 0x55: size = 2; break;
    case 0x60: case 0x61: size = 3; break;
    case 0x70: case 0x71: case 0x72: size = 5; break;
    case 0x80: case 0x81: case 0x82: case 0x83: size = 9; break;
    case 0x98: size = 17; break;                                                        /* uuid */
    case 0xa0: case 0xa1: case 0xa3:
        if (p + 1 >= end) return 0;
        size = 2 + (size_t)b[p + 1];
        break;
    case 0xb0: case 0xb1: case 0xb3:
        if (p + 5 > end) return 0;
        size = 5 + (size_t)be32(b + p + 1);
        break;
    default: return 0;
    }
    return p + size <= end ? size : 0;
}

/* Where the `to` of the properties section is in the encoded message b[0:n], for the usual forms only:
 * sections with small-ulong descriptors, lists and maps with their sizes, a message-id and a user-id of the
 * forms above, a `to` string or symbol. Returns (offset << 32) | length of the address's bytes, or -1 for
 * anything else (no properties, a null `to`, other encodings, data that ends early): the caller then reads
 * the message the general way, which explains what is wrong with it. */
static int64_t hp_find_to(const char *data, size_t n)
{
    const unsigned char *b = (const unsigned char *)data;
    size_t p = 0;
    while (p + 4 <= n) {
        if (b[p] != 0x00 || b[p + 1] != 0x53) return -1;
        unsigned code = b[p + 2];
        if (code < 0x70 || code > 0x73) return -1;      /* no properties before the body */
        p += 3;
        unsigned c = b[p];
        size_t size, count, q, end;
        if (c == 0xc0 || c == 0xc1) {                   /* list8, map8 */
            if (p + 3 > n) return -1;
            size = b[p + 1];
            count = b[p + 2];
            q = p + 3;
            end = p + 2 + size;
        } else if (c == 0xd0 || c == 0xd1) {            /* list32, map32 */
            if (p + 9 > n) return -1;
            size = be32(b + p + 1);
            count = be32(b + p + 5);
            q = p + 9;
            end = p + 5 + size;
        } else if (c == 0x45 && code == 0x70) {         /* an empty header */
            p += 1;
            continue;
        } else {
            return -1;
        }
        if (end > n || q > end) return -1;
        if ((code == 0x70 || code == 0x73) != (c == 0xc0 || c == 0xd0)) return -1;   /* lists, else maps */
        if (code < 0x73) {                              /* header, annotations: stepped over */
            p = end;
            continue;
        }
        if (count < 3) return -1;
        for (int i = 0; i < 2; i++) {                   /* message-id, user-id */
            size_t f = field_size(b, q, end);
            if (!f) return -1;
            q += f;
        }
        size_t start, len;
        if (q + 2 <= end && (b[q] == 0xa1 || b[q] == 0xa3)) {
            start = q + 2;
            len = b[q + 1];
        } else if (q + 5 <= end && (b[q] == 0xb1 || b[q] == 0xb3)) {
            start = q + 5;
            len = be32(b + q + 1);
        } else {
            return -1;
        }
        if (start + len > end || len == 0) return -1;
        return (int64_t)start << 32 | (int64_t)len;
    }
    return -1;
}
