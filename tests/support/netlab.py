"""Nodes as separate hosts: one Linux network namespace per node, wired by veth pairs (iproute2).

Layout of a :class:`NetLab` (every name carries the test process's id, so runs never collide):

* host ``X`` is namespace ``mr<pid>X``, with a veth pair to the root namespace for the test's clients
  (``10.<n>.0.<4i+2>`` in the host, ``.<4i+1>`` in the root namespace, /30);
* each link ``X-Y`` is its own veth pair between the two namespaces (``10.<n>.1.<4k+1>`` in X,
  ``.<4k+2>`` in Y, /30), so a fault on it touches only the traffic between X and Y;
* a node listens for clients on its root-side address and for peers on every address (0.0.0.0), and
  dials a peer at the peer's address on their shared link.

Faults: :meth:`NetLab.link_down` / :meth:`link_up` (``ip link set down``: the kernel drops what is
sent, nothing is closed), :meth:`NetLab.drop_all` (a ``tbf`` qdisc whose bucket is smaller than any
packet: the interface stays up and every packet on the link is dropped), :meth:`NetLab.shape` (``tbf``
rate limit), :meth:`NetLab.netem` (delay / loss, where the kernel has ``sch_netem``).

:func:`netns_unavailable` says why namespaces cannot be used (not root, no ``ip``, a kernel or sandbox
that refuses them); the tests then fall back to a TCP proxy and say so.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.nodes import MESH_RULES, NodeProcess, launch, node_config

_LABS = itertools.count()
IR_PORT = 5673
CLIENT_PORT = 5672


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=20)


def netns_unavailable() -> str | None:
    """None if this process can create namespaces and veth pairs, else the reason it cannot.
    ``MESHROUTER_NO_NETNS=1`` forces the fallback (to test it)."""
    if os.environ.get("MESHROUTER_NO_NETNS"):
        return "disabled by MESHROUTER_NO_NETNS"
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    probe = f"mrprobe{os.getpid()}"
    try:
        r = sh("ip", "netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"ip netns add failed: {r.stderr.strip()}"
        r = sh("ip", "link", "add", f"{probe}a", "type", "veth", "peer", "name", f"{probe}b", "netns", probe,
               check=False)
        if r.returncode != 0:
            return f"ip link add ... type veth failed: {r.stderr.strip()}"
        return None
    finally:
        sh("ip", "link", "del", f"{probe}a", check=False)
        sh("ip", "netns", "del", probe, check=False)


def qdisc_available(kind: str) -> bool:
    """Whether the kernel offers the ``kind`` qdisc (e.g. netem: tried on a throw-away veth)."""
    name = f"mrq{os.getpid()}"
    try:
        made = sh("ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", f"{name}b", check=False)
        if made.returncode:
            return False
        args = {"netem": ["delay", "1ms"],
                "tbf": ["rate", "1mbit", "burst", "32kbit", "latency", "50ms"]}[kind]
        return sh("tc", "qdisc", "add", "dev", f"{name}a", "root", kind, *args, check=False).returncode == 0
    finally:
        sh("ip", "link", "del", f"{name}a", check=False)


@dataclass
class Link:
    a: str
    b: str
    if_a: str          # interface in a's namespace
    if_b: str
    ip_a: str
    ip_b: str


@dataclass
class NetLab:
    """Namespaces, links and the nodes running in them (see the module doc)."""

    tmp: Path
    tag: str = field(default_factory=lambda: f"{os.getpid() % 100000}{next(_LABS)}")
    hosts: dict[str, str] = field(default_factory=dict)           # name -> namespace
    client_ip: dict[str, str] = field(default_factory=dict)
    links: dict[frozenset, Link] = field(default_factory=dict)
    nodes: list[NodeProcess] = field(default_factory=list)
    net: int = field(default_factory=lambda: 100 + os.getpid() % 100)
    switch: str = ""                                              # the LAN's namespace, if any

    # ---- topology
    def ns(self, host: str) -> str:
        return self.hosts[host]

    def add_host(self, name: str) -> None:
        i = len(self.hosts)
        ns = f"mr{self.tag}{name}"
        sh("ip", "netns", "add", ns)
        self.hosts[name] = ns
        root_if, host_if = f"m{self.tag}{name}r", f"m{self.tag}{name}c"
        sh("ip", "link", "add", root_if, "type", "veth", "peer", "name", host_if, "netns", ns)
        base = f"10.{self.net}.0."
        sh("ip", "addr", "add", f"{base}{4 * i + 1}/30", "dev", root_if)
        sh("ip", "link", "set", root_if, "up")
        self.run(name, "ip", "addr", "add", f"{base}{4 * i + 2}/30", "dev", host_if)
        self.run(name, "ip", "link", "set", host_if, "up")
        self.run(name, "ip", "link", "set", "lo", "up")
        self.client_ip[name] = f"{base}{4 * i + 2}"

    def connect(self, a: str, b: str) -> Link:
        k = len(self.links)
        if_a, if_b = f"m{self.tag}{a}{b}", f"m{self.tag}{b}{a}"
        sh("ip", "link", "add", if_a, "netns", self.ns(a), "type", "veth",
           "peer", "name", if_b, "netns", self.ns(b))
        base = f"10.{self.net}.1."
        link = Link(a, b, if_a, if_b, f"{base}{4 * k + 1}", f"{base}{4 * k + 2}")
        self.run(a, "ip", "addr", "add", f"{link.ip_a}/30", "dev", if_a)
        self.run(b, "ip", "addr", "add", f"{link.ip_b}/30", "dev", if_b)
        self.run(a, "ip", "link", "set", if_a, "up")
        self.run(b, "ip", "link", "set", if_b, "up")
        self.links[frozenset((a, b))] = link
        return link

    def link(self, a: str, b: str) -> Link:
        return self.links[frozenset((a, b))]

    def peer_ip(self, me: str, peer: str) -> str:
        lk = self.link(me, peer)
        return lk.ip_b if lk.a == me else lk.ip_a

    def run(self, host: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns(host), *cmd, check=check)

    # ---- faults
    def _ifs(self, a: str, b: str) -> list[tuple[str, str]]:
        lk = self.link(a, b)
        return [(lk.a, lk.if_a), (lk.b, lk.if_b)]

    def link_down(self, a: str, b: str) -> None:
        """``ip link set down`` on both ends of the a-b link: packets are dropped, nothing is closed."""
        for host, ifname in self._ifs(a, b):
            self.run(host, "ip", "link", "set", ifname, "down")

    def link_up(self, a: str, b: str) -> None:
        for host, ifname in self._ifs(a, b):
            self.run(host, "ip", "link", "set", ifname, "up")

    def _qdisc(self, a: str, b: str, *spec: str) -> None:
        for host, ifname in self._ifs(a, b):
            self.run(host, "tc", "qdisc", "replace", "dev", ifname, "root", *spec)

    def clear(self, a: str, b: str) -> None:
        """Remove any qdisc set on the link."""
        for host, ifname in self._ifs(a, b):
            self.run(host, "tc", "qdisc", "del", "dev", ifname, "root", check=False)

    def drop_all(self, a: str, b: str) -> None:
        """Every packet of the link dropped, interfaces up: a tbf bucket smaller than any packet."""
        self._qdisc(a, b, "tbf", "rate", "8bit", "burst", "20", "limit", "1")

    def shape(self, a: str, b: str, rate: str, burst: str = "16kb", latency: str = "100ms") -> None:
        """A slow link: tbf rate limit (packets beyond ``latency`` of queue are dropped)."""
        self._qdisc(a, b, "tbf", "rate", rate, "burst", burst, "latency", latency)

    def qdisc_stats(self, host: str, peer: str) -> dict[str, int]:
        """``sent``, ``dropped``, ``overlimits`` of the qdisc on ``host``'s end of the link to ``peer``."""
        lk = self.link(host, peer)
        ifname = lk.if_a if lk.a == host else lk.if_b
        out = self.run(host, "tc", "-s", "qdisc", "show", "dev", ifname).stdout
        m = re.search(r"Sent (\d+) bytes \d+ pkt \(dropped (\d+), overlimits (\d+)", out)
        if m is None:
            raise AssertionError(f"no qdisc statistics on {host}:{ifname}: {out!r}")
        return {"sent": int(m[1]), "dropped": int(m[2]), "overlimits": int(m[3])}

    def netem(self, a: str, b: str, *spec: str) -> None:
        """``tc netem`` on both ends, e.g. ``netem("A", "B", "delay", "50ms", "loss", "2%")``."""
        self._qdisc(a, b, "netem", *spec)

    # ---- nodes
    def start_node(self, host: str, *, connect: tuple[str, ...] = (), listen: bool = True,
                   hello: float = 0.5, hello_max_age: float = 2.0, idle_timeout: float = 4.0,
                   link_capacity: int = 250) -> NodeProcess:
        """Run a node in ``host``'s namespace; it dials each host in ``connect`` over their link."""
        listeners = [{"host": self.client_ip[host], "port": CLIENT_PORT, "role": "normal"}]
        if listen:
            listeners.append({"host": "0.0.0.0", "port": IR_PORT, "role": "inter-router", "cost": 1})
        cfg = node_config(host, rules=MESH_RULES, link_capacity=link_capacity, idle_timeout=idle_timeout,
                          extra={"listeners": listeners,
                                 "connectors": [{"host": self.peer_ip(host, peer), "port": IR_PORT, "cost": 1}
                                                for peer in connect],
                                 "router": {"hello_interval": hello, "hello_max_age": hello_max_age,
                                            "ra_interval_flux": 1.0}})
        node = launch(cfg, self.tmp, len(self.nodes), prefix=("ip", "netns", "exec", self.ns(host)))
        self.nodes.append(node)
        return node

    def start_config(self, host: str, cfg: dict) -> NodeProcess:
        """Run a node with config data `cfg` (e.g. rendered by `meshrouter mesh render`) in ``host``'s
        namespace."""
        node = launch(cfg, self.tmp, len(self.nodes), prefix=("ip", "netns", "exec", self.ns(host)))
        self.nodes.append(node)
        return node

    # ---- one LAN for every host, with host names
    def lan(self) -> dict[str, str]:
        """Put every host on one switched LAN (a bridge in a namespace of its own, 10.<n>.2.0/24);
        returns host -> its LAN address."""
        switch = f"mr{self.tag}sw"
        sh("ip", "netns", "add", switch)
        self.switch = switch
        sh("ip", "netns", "exec", switch, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", switch, "ip", "link", "set", "br0", "up")
        addresses = {}
        for i, name in enumerate(self.hosts):
            port, nic = f"m{self.tag}{name}s", f"m{self.tag}{name}l"
            sh("ip", "link", "add", port, "netns", switch, "type", "veth", "peer", "name", nic,
               "netns", self.ns(name))
            sh("ip", "netns", "exec", switch, "ip", "link", "set", port, "master", "br0")
            sh("ip", "netns", "exec", switch, "ip", "link", "set", port, "up")
            addresses[name] = f"10.{self.net}.2.{i + 1}"
            self.run(name, "ip", "addr", "add", f"{addresses[name]}/24", "dev", nic)
            self.run(name, "ip", "link", "set", nic, "up")
        return addresses

    def host_names(self, names: dict[str, str]) -> None:
        """Give every host the same /etc/hosts: name -> address (``ip netns exec`` mounts
        /etc/netns/<namespace>/hosts over /etc/hosts for what it runs)."""
        text = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in names.items())
        for ns in self.hosts.values():
            directory = Path("/etc/netns") / ns
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "hosts").write_text(text)

    # ---- clean-up
    def destroy(self) -> None:
        if self.switch:
            sh("ip", "netns", "del", self.switch, check=False)
            self.switch = ""
        for ns in self.hosts.values():
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        for name, ns in self.hosts.items():
            sh("ip", "link", "del", f"m{self.tag}{name}r", check=False)   # at once, not when the kernel
            sh("ip", "netns", "del", ns, check=False)                      # gets round to freeing ns
        self.hosts.clear()


_REASON: list[str | None] = []


def namespaces_unavailable() -> str | None:
    """:func:`netns_unavailable`, found out once per test session."""
    if not _REASON:
        _REASON.append(netns_unavailable())
    return _REASON[0]
