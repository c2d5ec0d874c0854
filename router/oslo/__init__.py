"""router.oslo: an oslo.messaging driver for meshrouter (``transport_url = amqp://...``), for oslo.messaging
15 and later, which no longer ship an AMQP 1.0 driver. docs/OSLO.md is the operator's guide.

Registered as the ``amqp`` entry point of ``oslo.messaging.drivers`` (``pip install meshrouter[oslo]``).
Wire-compatible with oslo.messaging 14.x's own ``amqp`` driver (same addresses, message layout and reply
handling), so 14.x and newer services talk to each other through the mesh during a rolling upgrade.

Each module has one job:

- :mod:`~router.oslo.options`: the ``[oslo_messaging_amqp]`` options, checked (unknown ones refused);
- :mod:`~router.oslo.addressing`: oslo Targets to AMQP addresses (routable and legacy, as 14.x);
- :mod:`~router.oslo.layout`: request, reply and heartbeat messages as 14.x lays them out;
- :mod:`~router.oslo.hosts`: the transport URL's hosts, in failover order, with their credentials;
- :mod:`~router.oslo.wire`: one connection with TLS / SASL / Open settings (router.rpc's Wire);
- :mod:`~router.oslo.session`: one connection's links: reply receiver, senders, subscriptions;
- :mod:`~router.oslo.controller`: the event-loop thread: operations, deadlines, failover;
- :mod:`~router.oslo.driver`: the oslo.messaging ``BaseDriver``, listeners and incoming messages.

Built on router.rpc's event loop, Proton-C wire and outbox (cproton_ffi), not on pyngus or Proton's
Container: see docs/OSLO.md, "Why router.rpc".

A client library (services layer), like router.rpc: may import router.rpc, router.amqp and the base,
python-qpid-proton (its public API and ``cproton_ffi``) and oslo.messaging / oslo.config; nothing of the
node. Importing this package imports no oslo module; its modules do.
"""
