"""Address keys in qdrouterd's form: a class letter, for mobile addresses a phase digit, then the address.

qdstat reads a ``router.address`` name and a link's ``owningAddr`` as such a key (its columns ``class``,
``addr``, ``phs``). This node's routing keys map to them so:

* ``_topo/0/<this node>/<rest>`` (the node's own agent, reply addresses of its clients): ``L<rest>``,
  class ``local``, as qdrouterd keys ``$management`` and ``temp.…``;
* ``_topo/0/<other node>/<rest>``: ``R<node>/<rest>``, class ``router`` (qdrouterd routes such an address
  by the router's own key ``R<node>``);
* any other address: ``M0<address>``, class ``mobile``, phase 0 (this node has no phases).
"""

from __future__ import annotations

TOPO = "_topo/0/"


def qdr_key(key: str | None, node_id: str) -> str | None:
    """The qdrouterd key of the routing key `key` at node `node_id` (None stays None)."""
    if key is None:
        return None
    if key.startswith(TOPO):
        node, sep, rest = key[len(TOPO):].partition("/")
        if sep:
            return f"L{rest}" if node == node_id else f"R{node}/{rest}"
    return f"M0{key}"


def routing_key(qdr: str, node_id: str) -> str | None:
    """The routing key of a qdrouterd key (the inverse of `qdr_key`), or None when it is not one."""
    if qdr.startswith("M0") and len(qdr) > 2:
        return qdr[2:]
    if qdr.startswith("L") and len(qdr) > 1:
        return f"{TOPO}{node_id}/{qdr[1:]}"
    if qdr.startswith("R") and "/" in qdr:
        return f"{TOPO}{qdr[1:]}"
    return None
