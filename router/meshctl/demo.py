"""``mesh run --demo NODE:NODE``: a short RPC exchange through a running mesh.

An echo server attaches to an anycast RPC address on the server node; a caller on the other node opens a
dynamic reply address and makes a few sequential calls. The request crosses the mesh by the mobile address,
the reply comes back to the caller's node-scoped address through the anonymous relay; each line printed
says which node served the call and how long the round trip took. Uses python-qpid-proton's blocking API.
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

from proton import Message, Timeout
from proton.utils import BlockingConnection, ConnectionClosed, LinkDetached, SendException

DEMO_ADDRESS = "openstack.org/om/rpc/anycast/demo/echo"
CALL_TIMEOUT = 10.0


class EchoServer:
    """Answers every request on `address` with "echo: <body>" (and its node id) until stopped."""

    def __init__(self, url: str, node_id: str, address: str = DEMO_ADDRESS) -> None:
        self.conn = BlockingConnection(url, timeout=CALL_TIMEOUT)
        self.receiver = self.conn.create_receiver(address, credit=10)
        self.replies = self.conn.create_sender(None)
        self.node_id = node_id
        self.served = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="demo-echo-server", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                request = self.receiver.receive(timeout=0.2)
            except Timeout:
                continue
            except (ConnectionClosed, LinkDetached):
                return
            reply = Message(address=request.reply_to, correlation_id=request.correlation_id,
                            body=f"echo: {request.body}", properties={"served-by": self.node_id})
            self.receiver.accept()          # as an oslo.messaging server does: accept, then reply
            try:
                self.replies.send(reply, timeout=CALL_TIMEOUT)
                self.served += 1
            except (SendException, Timeout, ConnectionClosed, LinkDetached):
                continue                    # the caller times out; the demo reports it

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.conn.close()


def rpc_demo(server_url: str, server_node: str, caller_url: str, caller_node: str, out: TextIO,
             calls: int = 5) -> bool:
    """Run the demo; print one line per call. True if every call got its reply."""
    print(f"RPC demo: echo server on {server_node} ({server_url}), caller on {caller_node} ({caller_url}), "
          f"address {DEMO_ADDRESS}", file=out, flush=True)
    server = EchoServer(server_url, server_node)
    server.start()
    caller = BlockingConnection(caller_url, timeout=CALL_TIMEOUT)
    ok = True
    try:
        replies = caller.create_receiver(None, dynamic=True, credit=1)
        reply_to = replies.link.remote_source.address
        requests = caller.create_sender(DEMO_ADDRESS)
        for i in range(calls):
            started = time.perf_counter()
            request = Message(body=f"hello {i}", reply_to=reply_to, correlation_id=i)
            requests.send(request, timeout=CALL_TIMEOUT)
            reply = replies.receive(timeout=CALL_TIMEOUT)
            replies.accept()
            ms = (time.perf_counter() - started) * 1000
            served_by = (reply.properties or {}).get("served-by", "?")
            print(f"  call {i}: {reply.body!r} from {served_by} in {ms:.1f} ms", file=out, flush=True)
            if reply.correlation_id != i:
                ok = False
    except (SendException, Timeout, ConnectionClosed, LinkDetached) as exc:
        print(f"  RPC demo failed: {type(exc).__name__}: {exc}", file=out, flush=True)
        ok = False
    finally:
        caller.close()
        server.stop()
    print("RPC demo " + ("done" if ok else "FAILED"), file=out, flush=True)
    return ok
