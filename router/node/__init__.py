"""The node: one process's event loop, listeners, connectors, timers and the control plane's glue.

``server`` (NodeServer: sockets, the pump, timers, address watches, the services plugged in),
``connectors`` (outgoing inter-router connections with backoff), ``mesh`` (the sans-IO link-state engine
of router.linkstate driven over the inter-router links: control messages in and out, encoded by
router.amqp), ``histogram`` (forwarding latency). It owns no Proton object: router.adapter does.

May import: router.adapter, the core (router.forwarding, router.linkstate, router.addressing,
router.config), router.amqp and the base. Never imports the services (management, gateway, telemetry):
router.launch plugs them in.
"""
