"""Edge mode (docs/EDGE.md): a node next to every client host, attached upward to one interior node.

Sans-IO like router.linkstate: plain objects fed events, returning what to send. ``messages`` (the edge
control messages and their checks), ``uplinks`` (which open uplink carries an edge's traffic), ``proxy``
(an edge's side: the addresses it proxies to its interior, and those the interior says it can reach),
``hub`` (an interior's side: its edges, the addresses they proxy, what each edge is told).

May import: router.amqp (the message codec). Never imports router.adapter, router.node, the services
or Proton.
"""
