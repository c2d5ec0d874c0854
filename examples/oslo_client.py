"""An oslo.messaging RPC client on node C of `make run`: calls, a fanout cast, and a call nobody serves."""

import oslo_messaging as om
from oslo_config import cfg

cfg.CONF([], project="mesh-demo")
# RPCClient's metrics thread (oslo.messaging 14.x) otherwise keeps the process alive 10 s after the end
cfg.CONF.set_override("metrics_thread_stop_timeout", 1, group="oslo_messaging_metrics")
transport = om.get_rpc_transport(cfg.CONF, url="amqp://127.0.0.1:5703/")   # node C
client = om.get_rpc_client(transport, om.Target(topic="demo"), timeout=10)
try:
    for i in range(3):
        print(client.call({}, "echo", text=f"hello {i}"))
    client.prepare(fanout=True).cast({}, "echo", text="to every server")   # multicast
    try:
        om.get_rpc_client(transport, om.Target(topic="nobody"), timeout=2).call({}, "echo", text="?")
    except om.MessagingTimeout:
        print("no server for topic 'nobody': MessagingTimeout after 2 s (credit was withheld)")
finally:
    transport.cleanup()
