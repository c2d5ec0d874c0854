"""Helpers of the authorization tests: clients that authenticate, pick their Open hostname and their
source address, and a two-node mesh (A with an inter-router listener, B dialling it) with a policy.

:class:`AuthClient` is tests.support.clients' :class:`Client` (a Proton engine pumped by the test)
with SASL PLAIN credentials, the Open's hostname (the vhost) and the local address to connect from.
"""

from __future__ import annotations

import itertools
import re
import socket
import uuid
from typing import Any

from proton import Collector, Connection, Transport

from tests.support.clients import Client, ReceiverLink, SenderLink, parse_url
from tests.support.meshes import HELLO, converged
from tests.support.ports import inter_router_port
from tests.support.waiting import DEFAULT_TIMEOUT, add_client, wait_for, wait_until

LISTENING = re.compile(r"^listening: role=normal url=(?P<url>amqps?://\S+)$")
RULES = (("multicast", "multicast"), ("closest", "closest"), ("balanced", "balanced"))


class AuthClient(Client):
    """A test client that may log in with PLAIN, name a vhost and connect from a chosen local address."""

    def __init__(self, url: str, *, user: str | None = None, password: str | None = None,
                 hostname: str | None = None, source: str | None = None, wait_open: bool = True) -> None:
        self.host, self.port = parse_url(url)
        self.conn = Connection()
        self.conn.container = f"authz-{uuid.uuid4().hex[:8]}"
        self.conn.hostname = hostname or self.host
        if user is not None:
            self.conn.user = user
            self.conn.password = password
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport = Transport()
        sasl = self.transport.sasl()
        sasl.allowed_mechs("PLAIN" if user is not None else "ANONYMOUS")
        sasl.allow_insecure_mechs = True
        self.transport.bind(self.conn)
        self.sock = socket.create_connection((self.host, self.port), timeout=DEFAULT_TIMEOUT,
                                             source_address=(source, 0) if source else None)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.closed = self.transport_closed = self.eof = self.paused = False
        self.recv_budget = None
        self.bytes_in = 0
        self.error = None
        self._want_write = self._processing = False
        self._deadline = 0.0
        self._links: dict[str, SenderLink | ReceiverLink] = {}
        self._names = itertools.count(1)
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        add_client(self)
        self._write()
        if wait_open:
            wait_for(lambda: self.remote_open or self.transport_closed, DEFAULT_TIMEOUT, "connection open")

    def wait_closed(self) -> Any:
        """Wait until the node closed the connection; its Close condition."""
        wait_for(lambda: self.transport_closed or self.conn.remote_condition is not None, DEFAULT_TIMEOUT,
                 "the node closing the connection")
        return self.conn.remote_condition


def refused(link: SenderLink | ReceiverLink) -> tuple[str, str]:
    """(condition, description) of a link the node detached at once; fails if it attached."""
    wait_for(lambda: link.remote_closed, DEFAULT_TIMEOUT, f"the node refusing link {link.name}")
    cond = link.remote_condition
    assert cond is not None, f"link {link.name} closed without a condition"
    return cond.name, cond.description or ""


def attached(link: SenderLink | ReceiverLink) -> bool:
    """True if the node accepted the attach (wait for its answer either way)."""
    link.wait_attached()
    return link.remote_active and not link.remote_closed


def urls(node) -> list[str]:
    """The node's client listener URLs, in config order."""
    return [m["url"] for line in node.stdout_lines if (m := LISTENING.match(line))]


def local_address() -> str | None:
    """A non-loopback IPv4 address of this machine (to be a 'remote' host), None if there is none."""
    for probe in ("192.0.2.1", "10.255.255.255", "8.8.8.8"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                ip = s.getsockname()[0]
        except OSError:
            continue
        if not ip.startswith("127.") and ip != "0.0.0.0":
            return ip
    return None


def node(node_factory, node_id: str, *, listeners: list[dict] | None = None, policy: dict | None = None,
         inter_router: bool = False, dial: list[int] = (), extra: dict | None = None):
    """One node: `listeners` (client listeners, default one on 127.0.0.1), optionally an inter-router
    listener and connectors to the inter-router ports `dial`; `policy` as the `policy:` section."""
    ls = [{"host": "127.0.0.1", "port": 0, **lc} for lc in (listeners or [{}])]
    if inter_router:
        ls.append({"host": "127.0.0.1", "port": 0, "role": "inter-router"})
    cfg: dict[str, Any] = {
        "listeners": ls,
        "router": {"hello_interval": HELLO, "hello_max_age": HELLO * 3, "ra_interval_flux": 1.0},
        **(extra or {}),
    }
    if dial:
        cfg["connectors"] = [{"host": "127.0.0.1", "port": port} for port in dial]
    if policy is not None:
        cfg["policy"] = with_monitor(policy)
    n = node_factory(node_id, rules=RULES, extra=cfg)
    if policy is not None:
        n.state_vhost = MONITOR_VHOST       # tests.support.state reads the node through that vhost
    return n


#: The vhost through which tests read a node's state (tests.support.state) when its policy would refuse
#: the anonymous reader: management read only, nothing else.
MONITOR_VHOST = "monitor.test"


def with_monitor(policy: dict) -> dict:
    """`policy` plus the vhost MONITOR_VHOST (unless it names it), for tests.support.state's readings."""
    vhosts = dict(policy.get("vhosts") or {})
    vhosts.setdefault(MONITOR_VHOST, {"groups": {"monitor": {"users": ["anonymous"], "sources": [],
                                                             "targets": [], "management": "read"}}})
    return {**policy, "vhosts": vhosts}


def mesh2(node_factory, **kw) -> tuple[Any, Any]:
    """Nodes A and B (B dials A), converged; `kw` as for `node`, the same for both."""
    a = node(node_factory, "A", inter_router=True, **kw)
    b = node(node_factory, "B", dial=[inter_router_port(a)], **kw)
    wait_until(lambda: converged([a, b]), 15, "A and B reaching each other")
    return a, b
