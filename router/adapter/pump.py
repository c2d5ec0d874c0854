"""The node's unit of work, shared by every event loop that drives an Engine.

After input arrives (or a timer fires): handle every Proton event, give producers the credit the core
decided, and write every connection that has output; if writing made room for paused large messages,
move them on and write again. The loop only says how to watch a socket for writability.
"""

from __future__ import annotations

from collections.abc import Callable

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
    for conn in conns:
        if not conn.alive:
            continue
        state = conn.flush()
        blocked = state == BLOCKED
        if blocked != conn.want_write:
            conn.want_write = blocked
            write_interest(conn, blocked)
        if state == DONE and conn.finished():
            engine.kill(conn)
