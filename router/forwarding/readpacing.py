"""How many bytes a client connection may read at once: bulk input handled in paced turns (sans-IO).

A read's bytes are all decoded and handled before the loop serves anyone else, so one read carrying a
thousand ATTACHes (an attach storm: ~100 KB) held the node for 40-60 ms and its other clients saw a p99
of 38-63 ms (issue 33). The node's read budget (router.node.server) already makes *heavy* connections
take turns; this decides the size of their reads so that no single read is long either:

* a new client connection starts at START_READ bytes (its handshake and a few ATTACHes);
* a read that cost more CPU than ``target`` (``node.heavy_read``) makes the next one the size that
  would have cost ``target`` at the same cost per byte (at least MIN_READ);
* a read that filled its size at less than ``target`` doubles it, up to ``ceiling`` (the I/O chunk), so
  that a connection streaming large messages reaches full-size reads after a few of them.

Peers (inter-router connections) are not paced: their input is the mesh's and is never held back.
"""

from __future__ import annotations

MIN_READ = 2 * 1024
START_READ = 16 * 1024


def next_read_size(size: int, nbytes: int, cpu: float, target: float, ceiling: int) -> int:
    """The size of a connection's next read after one of ``nbytes`` (read at most ``size``) cost ``cpu``
    seconds to handle; ``target``: the CPU one read should take at most; ``ceiling``: the largest read."""
    if nbytes <= 0:
        return size
    if cpu > target:
        return max(MIN_READ, min(ceiling, int(nbytes * target / cpu)))
    if nbytes >= size:
        return min(ceiling, 2 * size)
    return size
