"""``mesh run --demo SERVER:CALLER``: a short RPC exchange through a running mesh, with router.rpc.

An echo server attaches to an anycast RPC address on the server node; a caller on the other node makes a
few sequential calls. The request crosses the mesh by the mobile address, the reply comes back to the
caller's dynamic (node-scoped) reply address through the anonymous relay; each line printed says which
node served the call and how long the round trip took.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from router.rpc import RpcClient, RpcException, RpcServer

DEMO_ADDRESS = "openstack.org/om/rpc/anycast/demo/echo"
CALL_TIMEOUT = 10.0


def rpc_demo(server_url: str, server_node: str, caller_url: str, caller_node: str, out: TextIO,
             calls: int = 5) -> bool:
    """Run the demo; print one line per call. True if every call got its reply."""
    print(f"RPC demo: echo server on {server_node} ({server_url}), caller on {caller_node} ({caller_url}), "
          f"address {DEMO_ADDRESS}", file=out, flush=True)

    def echo(body: Any, _properties: Any) -> dict[str, str]:
        return {"echo": str(body), "served-by": server_node}

    ok = True
    server: RpcServer | None = None
    try:
        server = RpcServer(server_url, DEMO_ADDRESS, echo)
        with RpcClient(caller_url, timeout=CALL_TIMEOUT) as client:
            print(f"  caller's reply address: {client.reply_to}", file=out, flush=True)
            for i in range(calls):
                started = time.perf_counter()
                reply = client.call(DEMO_ADDRESS, f"hello {i}")
                ms = (time.perf_counter() - started) * 1000
                print(f"  call {i}: {reply['echo']!r} from {reply['served-by']} in {ms:.1f} ms",
                      file=out, flush=True)
    except RpcException as exc:
        print(f"  RPC demo failed: {type(exc).__name__}: {exc}", file=out, flush=True)
        ok = False
    finally:
        if server is not None:
            server.stop()
    print("RPC demo " + ("done" if ok else "FAILED"), file=out, flush=True)
    return ok
