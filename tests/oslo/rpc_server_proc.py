"""An oslo.messaging RPC server in its own process, for tests that SIGKILL a server mid-call.

    python -m tests.oslo.rpc_server_proc TRANSPORT_URL TOPIC SERVER

Prints ``started`` once the server runs and ``busy <method>`` (flushed) when an endpoint method
begins, so the test knows the request is inside the endpoint before it kills the process.
"""

from __future__ import annotations

import signal
import sys
import threading
import warnings

warnings.simplefilter("ignore", DeprecationWarning)

import oslo_messaging as om  # noqa: E402

from tests.support.oslo import EchoEndpoint, make_conf  # noqa: E402


def main() -> int:
    url, topic, server = sys.argv[1:4]

    def busy(method, _arg):
        print(f"busy {method}", flush=True)

    transport = om.get_rpc_transport(make_conf(), url=url)
    srv = om.get_rpc_server(transport, om.Target(topic=topic, server=server),
                            [EchoEndpoint(server, on_call=busy)], executor="threading")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    srv.start()
    print("started", flush=True)
    stop.wait()
    srv.stop()
    srv.wait()
    transport.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
