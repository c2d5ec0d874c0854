"""The node's unit of work, shared by every event loop that drives an Engine.

After input arrives (or a timer fires): handle every Proton event, give producers the credit the core
decided, and write every connection that has output; if writing made room for paused large messages,
move them on and write again. The loop only says how to watch a socket for writability.

With a memory budget (router.forwarding.budget), each connection written reports what it still buffers:
its transport's output, its sessions' outgoing bytes (not yet framed) and incoming bytes (a paused
streamed message's, not yet read). Producers the budget released get their credit in the same pump.
"""

from __future__ import annotations

from collections.abc import Callable

from cproton_ffi.lib import pn_session_incoming_bytes, pn_session_outgoing_bytes

from router.adapter.connection import BLOCKED, DONE, Connection

WriteInterest = Callable[[Connection, bool], None]   # (connection, watch for writable?)


def pump(engine: object, write_interest: WriteInterest) -> None:
    """Process events, apply credit and flush output (once per read or timer)."""
    engine.process()
    engine.mesh_links.sync_routes()
    engine.apply_credit()
    flush_dirty(engine, write_interest)
    if engine.streams.paused:
        engine.resume_streams()
        engine.apply_credit()
        flush_dirty(engine, write_interest)
    budget = engine.budget
    if budget is not None and budget.released:
        engine.apply_credit()               # writing freed room: the producers held for it go on
        flush_dirty(engine, write_interest)


def buffered_bytes(conn: Connection) -> int:
    """Bytes `conn` holds in the node: transport output not yet written, session bytes not yet framed
    (the peer's window is closed) and received bytes not yet read (a paused streamed message)."""
    n = conn.out_pending
    for ssn in conn.sessions:
        n += pn_session_outgoing_bytes(ssn) + pn_session_incoming_bytes(ssn)
    return n


def flush_dirty(engine: object, write_interest: WriteInterest) -> None:
    """Write every connection with output, inter-router ones first (HELLOs and link-state never wait
    behind a client's output); watch full sockets; tear down finished connections."""
    dirty = engine.dirty                # shared with the engine's parts: emptied, not replaced
    if not dirty:
        return
    conns = tuple(dirty)
    dirty.clear()
    if len(conns) > 2:                  # (a pump with one producer and one consumer has nothing to order)
        conns = tuple(c for c in conns if c.router is not None) + tuple(c for c in conns if c.router is None)
    budget = engine.budget
    for conn in conns:
        if not conn.alive:
            continue
        state = conn.flush()
        if budget is not None:
            budget.report(conn, buffered_bytes(conn))
        blocked = state == BLOCKED
        if blocked != conn.want_write:
            conn.want_write = blocked
            write_interest(conn, blocked)
        if state == DONE and conn.finished():
            engine.kill(conn)
