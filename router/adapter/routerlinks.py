"""Inter-router connections: the links between two nodes and how they are opened and recognised.

Between neighbours there is one control link pair (terminus capability `qd.router`) and one data link pair
(`qd.router-data`), as in Qpid Dispatch Router. The connecting side (a connector) opens a session and the
four links; the listening side recognises them by capability. Control traffic has its own links, so it is
never stuck behind data.
"""

from __future__ import annotations

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_LOCAL_ACTIVE,
    PN_REMOTE_ACTIVE,
    PN_SND_SETTLED,
    PN_SYMBOL,
    pn_connection_remote_container,
    pn_connection_remote_properties,
    pn_data_enter,
    pn_data_exit,
    pn_data_put_array,
    pn_data_put_symbol,
    pn_link_open,
    pn_link_set_snd_settle_mode,
    pn_link_source,
    pn_link_state,
    pn_link_target,
    pn_receiver,
    pn_sender,
    pn_session,
    pn_session_open,
    pn_session_set_incoming_capacity,
    pn_terminus_capabilities,
)
from proton import Data

CONTROL = "qd.router"
DATA = "qd.router-data"
COST_PROPERTY = "qd.inter-router-cost"
CONTROL_CREDIT = 1000        # control messages are small and never wait for a consumer


class RouterLink:
    """One of the four links of an inter-router connection."""

    __slots__ = ("kind", "outgoing", "conn", "handle")

    def __init__(self, kind: str, outgoing: bool, conn: object, handle: object) -> None:
        self.kind = kind            # CONTROL or DATA
        self.outgoing = outgoing    # we send on it
        self.conn = conn
        self.handle = handle

    def __repr__(self) -> str:
        return f"RouterLink({self.kind}, {'out' if self.outgoing else 'in'})"


class RouterPeer:
    """What a node knows about the peer at the other end of an inter-router connection."""

    __slots__ = ("node_id", "cost", "control_in", "control_out", "data_in", "data_out", "up", "data_consumer")

    def __init__(self, node_id: str, cost: int) -> None:
        self.node_id = node_id
        self.cost = cost            # max of both ends' configured cost
        self.control_in: object = None
        self.control_out: object = None
        self.data_in: object = None
        self.data_out: object = None
        self.up = False             # both control links open both ways: the control plane uses it
        self.data_consumer: object = None  # the forwarding core's record of our data-out link

    def add(self, rl: RouterLink) -> None:
        slot = ("control" if rl.kind == CONTROL else "data") + ("_out" if rl.outgoing else "_in")
        setattr(self, slot, rl.handle)

    def control_ready(self) -> bool:
        both = PN_LOCAL_ACTIVE | PN_REMOTE_ACTIVE
        return all(h is not None and pn_link_state(h) & both == both
                   for h in (self.control_in, self.control_out))


def peer_from_open(pn_conn: object, own_cost: int) -> RouterPeer:
    """The peer's node id (its container id) and the link cost: max of both ends' costs."""
    c = pn_connection_remote_container(pn_conn)
    node_id = ffi.string(c).decode(errors="replace") if c != ffi.NULL else ""  # any bytes: no crash
    peer_cost = 1
    props = _data_object(pn_connection_remote_properties(pn_conn)) or {}
    if isinstance(props, dict):
        value = props.get(COST_PROPERTY)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            peer_cost = int(value)          # Proton gives an int32 subclass
    return RouterPeer(node_id, max(own_cost, peer_cost))


def capabilities(terminus: object) -> set[str]:
    """The capability symbols of a terminus (empty set when none)."""
    value = _data_object(pn_terminus_capabilities(terminus))
    if value is None:
        return set()
    if isinstance(value, str):
        return {str(value)}
    try:
        return {str(v) for v in value}
    except TypeError:
        return set()


def _data_object(pn_data: object) -> object:
    """The Python value held by a Proton pn_data_t (None when empty or unreadable); leaves it rewound."""
    d = Data(pn_data)
    d.rewind()
    try:
        value = d.get_object() if d.next() else None
    except Exception:           # e.g. a symbol that is not ASCII, an unhashable map key: ignored
        value = None
    d.rewind()
    return value


def _set_capability(terminus: object, capability: str) -> None:
    caps = pn_terminus_capabilities(terminus)
    pn_data_put_array(caps, False, PN_SYMBOL)
    pn_data_enter(caps)
    raw = capability.encode()
    keep = ffi.new("char[]", raw)
    pn_data_put_symbol(caps, ffi.new("pn_bytes_t *", (len(raw), keep))[0])
    pn_data_exit(caps)


def open_router_links(pn_conn: object, node_id: str, session_capacity: int) -> list[tuple[RouterLink, bool]]:
    """Connector side: open a session and the control and data link pairs.

    Returns `(RouterLink, is_sender)` for each; the caller registers them and flows credit on receivers.
    """
    ssn = pn_session(pn_conn)
    pn_session_set_incoming_capacity(ssn, session_capacity)
    pn_session_open(ssn)
    made = []
    for kind in (CONTROL, DATA):
        for outgoing in (True, False):
            name = f"qdlink.{node_id}.{kind}.{'out' if outgoing else 'in'}".encode()
            link = pn_sender(ssn, name) if outgoing else pn_receiver(ssn, name)
            terminus = pn_link_source(link) if outgoing else pn_link_target(link)
            _set_capability(terminus, kind)
            # the far end's terminus carries the capability too, so either side can recognise it
            _set_capability(pn_link_target(link) if outgoing else pn_link_source(link), kind)
            if kind == CONTROL and outgoing:
                pn_link_set_snd_settle_mode(link, PN_SND_SETTLED)
            pn_link_open(link)
            made.append((RouterLink(kind, outgoing, None, link), outgoing))
    return made
