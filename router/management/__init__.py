"""Operating a node: the `$management` agent, its entities, Prometheus metrics and the stat client."""
