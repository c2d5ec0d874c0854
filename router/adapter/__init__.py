"""The Proton adapter: the only node-side code that imports ``cproton_ffi`` or ``proton``.

It owns every Proton object of a node (connections, transports, sessions, links, deliveries, SSL and
SASL state) and turns what Proton reports into events for the forwarding core (router.forwarding) and
the control plane (router.node.mesh), then carries out what they decide. Everything above it (the
node, management, the gateway, telemetry) sees plain Python values and small handle objects.

May import: router.amqp (codec), router.forwarding, router.addressing, router.config, router.security,
router.logs. Never imported by router.forwarding, router.linkstate or router.amqp.
"""
