"""``meshrouter console``: a web page that shows a running mesh live.

One process reads the mesh through AMQP management (router.management.client, the documented
`$management` of docs/MANAGEMENT.md) from the node it is pointed at: every second, that node's view of the
others (`router-node`) and, through the mesh (`_topo/0/<node>/$management`), every reachable node's `node`
counters, connections, links and addresses. It keeps the last reading with per-second rates and serves:

* ``/``: the page (router.management.console_page): the mesh graph, one card per node (connections,
  links, addresses, messages per second in / out, outcomes), the addresses; it fetches ``/api/state``
  every second, so a node that stops disappears within the node's `hello_max_age` plus a second;
* ``/api/state``: that reading as JSON; any other path: 404.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from router.argtypes import positive_seconds
from router.management.bus import DEFAULT_BUS
from router.management.console_page import PAGE
from router.management.security import ClientSecurity, add_security_options, security_from_args

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0
COUNTERS = ("deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "acceptedDeliveries",
            "rejectedDeliveries", "releasedDeliveries", "modifiedDeliveries")


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("console", help="serve a web page showing the mesh live (graph, nodes, "
                                            "connections, links, addresses, rates, outcomes)")
    p.add_argument("-b", "--bus", metavar="URL", default=DEFAULT_BUS,
                   help=f"URL of the node to read the mesh through (default {DEFAULT_BUS})")
    p.add_argument("--host", default="127.0.0.1", help="where the page listens (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="its port (default 8080; 0: a free one)")
    p.add_argument("--interval", type=positive_seconds, default=DEFAULT_INTERVAL, metavar="S",
                   help=f"seconds between readings (default {DEFAULT_INTERVAL:g})")
    add_security_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state = MeshReader(args.bus, security_from_args(args), args.interval)
    try:
        httpd = serve(state, args.host, args.port)
    except OSError as exc:
        print(f"meshrouter: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
        return 1
    host, port = httpd.server_address[:2]
    print(f"console: http://{host}:{port}/ (reading the mesh through {args.bus}); Ctrl-C stops it",
          flush=True)
    state.start()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        state.stop()
        httpd.server_close()
    return 0


class MeshReader:
    """Reads the mesh every `interval` seconds in a thread; `snapshot()` is the latest reading."""

    def __init__(self, url: str, security: ClientSecurity | None = None, interval: float = DEFAULT_INTERVAL):
        self.url = url
        self.security = security
        self.interval = interval
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"bus": url, "ok": False, "error": "not read yet", "nodes": {},
                                       "edges": [], "time": None}
        self._last: dict[str, tuple[float, dict[str, Any]]] = {}     # node -> (when, counters)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self._state

    def _run(self) -> None:
        from router.management.client import ManagementClient, ManagementClientError

        client = None
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if client is None:
                    client = ManagementClient(self.url, timeout=max(2.0, self.interval * 2),
                                              security=self.security)
                state = self.read(client)
            except ManagementClientError as exc:
                state = {**self.snapshot(), "ok": False, "error": str(exc)}
                if client is not None:
                    client.close()
                    client = None
            with self._lock:
                self._state = state
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        if client is not None:
            client.close()

    def read(self, client: Any) -> dict[str, Any]:
        """One reading of the mesh through `client`."""
        (own,) = client.query_dicts("node", ["id"])
        me = own["id"]
        others = client.query_dicts("router-node", ["identity", "reachable", "neighbour", "linkState"])
        reachable = [r["identity"] for r in others if r["reachable"]]
        edges = set()
        for r in others:
            if r["neighbour"] and r["reachable"]:
                edges.add(tuple(sorted((me, r["identity"]))))
            if r["reachable"]:
                for peer in r["linkState"] or []:
                    name = peer.rsplit(":", 1)[0]
                    if name == me or name in reachable:
                        edges.add(tuple(sorted((r["identity"], name))))
        nodes = {}
        now = time.monotonic()
        edge_of: dict[str, str] = {}        # edge mode: each edge node -> the interior it routes through
        for node in [me, *sorted(reachable)]:
            target = None if node == me else node
            nodes[node] = self._node(client, node, target, now)
            for r in self._edges(client, target):
                if r.get("role") == "edge" and r.get("active"):
                    edge_of[r["identity"]] = node
                    edges.add(tuple(sorted((node, r["identity"]))))
        for edge, interior in sorted(edge_of.items()):
            nodes[edge] = {**self._node(client, edge, edge, now), "edgeOf": interior}
        return {"bus": self.url, "ok": True, "error": None, "connectedTo": me, "time": time.time(),
                "nodes": nodes, "edges": [list(e) for e in sorted(edges)]}

    @staticmethod
    def _edges(client: Any, target: str | None) -> list[dict[str, Any]]:
        from router.management.client import ManagementError

        try:
            return client.query_dicts("edge", ["identity", "role", "active"], node=target)
        except ManagementError:         # a node without edge mode
            return []

    def _node(self, client: Any, node: str, target: str | None, now: float) -> dict[str, Any]:
        (row,) = client.query_dicts("node", ["uptimeSeconds", "connectionCount", "linkCount", "addrCount",
                                             *COUNTERS], node=target)
        connections = client.query_dicts("connection", ["identity", "host", "role", "user", "linkCount"],
                                         node=target)
        addresses = client.query_dicts("address", ["identity", "distribution", "subscriberCount",
                                                   "remoteCount", "deliveriesIngress", "deliveriesEgress"],
                                       node=target)
        counters = {k: row.get(k) or 0 for k in COUNTERS}
        rates = {}
        last = self._last.get(node)
        if last is not None and now > last[0]:
            rates = {k: round((counters[k] - last[1][k]) / (now - last[0]), 1) for k in COUNTERS}
        self._last[node] = (now, counters)
        return {"uptime": row["uptimeSeconds"], "connections": row["connectionCount"],
                "links": row["linkCount"], "addressCount": row["addrCount"], "counters": counters,
                "rates": rates,
                "connectionRows": [c for c in connections if c["role"] != "internal"],
                "addresses": [a for a in addresses if not str(a["identity"]).startswith("_topo/")]}


def serve(state: MeshReader, host: str, port: int) -> ThreadingHTTPServer:
    """The console's HTTP server (not started: call serve_forever)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", PAGE.encode())
            elif path == "/api/state":
                self._send(200, "application/json", json.dumps(state.snapshot()).encode())
            else:
                self._send(404, "text/plain", b"not found\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("console: " + format, *args)

    return ThreadingHTTPServer((host, port), Handler)
