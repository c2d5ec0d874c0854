"""Operating a node: the `$management` agent, its entities, Prometheus metrics and the stat client.

``agent`` (answers `$management` as an in-process client of its node, router.adapter.inprocess),
``requests`` (requests -> answers, sans-IO), ``entities`` (the rows: read from the node, core and control
plane), ``metrics`` (`/metrics`), ``client``, ``stat``, ``tables``, ``security`` (the `meshrouter stat`
client side, on python-qpid-proton's public API).

May import: router.node, router.adapter (the in-process client, plain-value handles), the core, the codec
and the base. Only ``client`` and ``security`` use python-qpid-proton.
"""
