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
} pn;

#define HP_FUNCTIONS 18

static int ev_delivery, ev_link_flow, ev_transport;
static uint64_t *tag_counter;          /* the node's delivery-tag counter (shared with its Python code) */

#define ACCEPTED 0x24u
#define MODIFIED 0x27u

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
 * its link; for a link-flow event out[1] = the link. Returns the event type, 0 when there is none. */
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
            out[1] = d;
            out[2] = pn.delivery_link(d);
        } else if (t == ev_link_flow) {
            out[1] = pn.event_link(ev);
        }
        return t;
    }
}

/* Receive a complete transfer into `buf` (at most `cap` bytes) and advance the link past it.
 * Returns (size << 1) | pre-settled, or, having read nothing unless said: -1 not readable, -2 partial
 * (a message still arriving), -3 aborted (and pre-settled), -4 larger than `cap`, -5 empty (read and
 * advanced past). */
static int64_t hp_take(void *d, void *link, char *buf, size_t cap)
{
    if (!pn.delivery_readable(d)) return -1;
    if (pn.delivery_partial(d)) return -2;
    bool settled = pn.delivery_settled(d);
    if (settled && pn.delivery_aborted(d)) return -3;
    size_t n = pn.delivery_pending(d);
    if (n > cap) return -4;
    ssize_t got = pn.link_recv(link, buf, n);
    pn.link_advance(link);
    if (got < 0) return -5;
    return ((int64_t)got << 1) | (settled ? 1 : 0);
}

/* Send `n` bytes as one complete new delivery on `link` (a fresh tag); returns the delivery. */
static void *hp_send(void *link, const char *data, size_t n)
{
    ++*tag_counter;
    hp_bytes_t tag = {sizeof(uint64_t), (const char *)tag_counter};
    void *od = pn.delivery(link, tag);
    pn.link_send(link, data, n);
    pn.link_advance(link);
    return od;
}

/* Send data[0:cut_from] + insert[0:m] + data[cut_to:n] as one complete new delivery on `link` (a message
 * with a section inserted or replaced, without joining it first); returns the delivery. Cut points beyond
 * the data are clamped to it. */
static void *hp_send_spliced(void *link, const char *data, size_t n, size_t cut_from, size_t cut_to,
                             const char *insert, size_t m)
{
    if (cut_to > n) cut_to = n;
    if (cut_from > cut_to) cut_from = cut_to;
    ++*tag_counter;
    hp_bytes_t tag = {sizeof(uint64_t), (const char *)tag_counter};
    void *od = pn.delivery(link, tag);
    if (cut_from) pn.link_send(link, data, cut_from);
    if (m) pn.link_send(link, insert, m);
    if (n > cut_to) pn.link_send(link, data + cut_to, n - cut_to);
    pn.link_advance(link);
    return od;
}

/* The outcome a consumer gave one of our deliveries: its terminal state, ACCEPTED when it settled without
 * one, 0 when there is nothing to pass on yet. */
static uint64_t hp_outcome(void *od)
{
    uint64_t state = pn.delivery_remote_state(od);
    if (state >= ACCEPTED && state <= MODIFIED) return state;
    return pn.delivery_settled(od) ? ACCEPTED : 0;
}

/* Give `d` the outcome `state` (unless 0) and settle it; then settle `out` (unless NULL), the copy that went
 * out for it. */
static void hp_settle_pair(void *d, uint64_t state, void *out)
{
    if (state) pn.delivery_update(d, state);
    pn.delivery_settle(d);
    if (out) pn.delivery_settle(out);
}
