"""Sans-IO link-state control plane of the mesh (modelled on qdrouterd's Python router engine).

One :class:`LinkStateEngine` per node. The adapter passes time and events in and carries out the
:class:`Outgoing` it gets back; the engine never reads a clock or touches I/O.

Modules, one concern each: ``messages`` (HELLO/RA/LSR/LSU/MAU/MAR body maps), ``envelope`` (addresses, the
message map, ``Outgoing``), ``flood`` (duplicate suppression), ``neighbors`` (HELLO protocol), ``lsdb``
(link-state database), ``mobile`` (mobile-address sync), ``paths`` (shortest paths tie-broken by node id,
valid origins), ``engine`` (wiring), ``config`` (timers).

May import: router.defaults, router.logs and networkx; nothing of the adapter, the node or Proton.

How control messages travel between nodes (qdrouterd leaves this to its data plane; here the engine decides,
so the control plane works, and is tested, without a data plane):

* HELLO (``_local/qdhello``) goes one hop, on every up link.
* RA (``_topo/0/all/qdrouter``) and differential MAU (``_topo/0/all/qdrouter.ma``) are *flooded*: the origin
  sends them to every neighbour; a receiver processes and re-sends a message only the first time it sees it
  (key ``(origin, instance, ls_seq, mobile_seq)`` for an RA - a periodic RA repeating that key counts as new
  again after ``ra_interval_flux / 2`` - and ``(origin, instance, mobile_seq)`` for a diff MAU), to every
  neighbour except the one it came from and those already in its trace.
* LSR/LSU (``_topo/0/<id>/qdrouter``), MAR and absolute MAU (``_topo/0/<id>/qdrouter.ma``) go to one node,
  hop by hop: each node sends them to its next hop toward the target (:meth:`LinkStateEngine.handle`
  forwards a message addressed to another node; an adapter may instead ask
  :meth:`LinkStateEngine.route_control` and forward it without decoding the body). While no path to the
  target is computed yet, the next hop is the neighbour its last new flooded message came from: the
  reverse of that flood's first-arrival tree, which is loop-free and exists as soon as the flood went by.
  So a node can request the link state of every node right after its RA, instead of one ring of distance
  per path computation: a 500-node mesh converges in 3 path computations per node.
* Every message carries ``trace`` (the ids it went through, origin first; qdrouterd's ``x-opt-qd.trace``):
  a node drops a routed message whose trace already holds its id and never sends to a neighbour in it, so a
  transient routing loop cannot make a message circulate; a lost request is repeated after
  ``request_retry``.

Deviations from qdrouterd, on purpose: the reverse-path fallback above; a stub node (named by others, link
state unknown) gets back edges with the advertised cost instead of cost 1; a new HELLO sender is answered at
once (bidirectional in one round trip); an unanswered LSR/MAR is repeated after ``request_retry`` instead of
waiting for the next RA; the first LSU of a node whose RA we never saw (we joined late) is followed by a MAR,
so its addresses arrive without waiting up to 30 s for its RA; an absolute MAU older than the seq held is
ignored; a lower ``instance`` than held is a stale message, and a duplicate id if still seen ``node_grace``
after the change.
"""

from router.linkstate.config import LinkStateConfig
from router.linkstate.engine import LinkStateEngine
from router.linkstate.envelope import LinkId, Outgoing
from router.linkstate.messages import ControlMessageError, UnsupportedVersionError

__all__ = ["ControlMessageError", "LinkId", "LinkStateConfig", "LinkStateEngine", "Outgoing",
           "UnsupportedVersionError"]
