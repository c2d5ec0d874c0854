"""An oslo.messaging RPC server on node A of `make run` (the four-node mesh, clients on 5701-5704)."""

import time

import oslo_messaging as om
from oslo_config import cfg


class Echo:
    def echo(self, ctxt, text):
        print(f"server-a: {text}", flush=True)
        return f"echo from server-a: {text}"


cfg.CONF([], project="mesh-demo")
transport = om.get_rpc_transport(cfg.CONF, url="amqp://127.0.0.1:5701/")   # node A
server = om.get_rpc_server(transport, om.Target(topic="demo", server="server-a"), [Echo()],
                           executor="threading")
server.start()
print("RPC server on A; Ctrl-C to stop", flush=True)
try:
    while True:
        time.sleep(1)
except KeyboardInterrupt:
    pass
finally:
    server.stop()
    server.wait()
    transport.cleanup()
