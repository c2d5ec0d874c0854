"""qdrouterd's management, as qdstat and qdmanage (1.19) read and write it, answered from this node.

The entity types of qdrouterd's schema (``org.apache.qpid.dispatch.router``, ``...router.link``,
``...listener``, ``...vhost``...) are views of the node's own entities (router.management.entities) and of
its configuration, with qdrouterd's attribute names, value types and names/identities; writes become edits
of the node's configuration (router.management.writes). docs/QDROUTERD-TOOLS.md says what each qdstat and
qdmanage command gets, and what differs.

``schema`` (the types: attributes, operations, bases; what has no equivalent here), ``keys`` (qdrouterd's
address keys: ``M0addr``, ``Ltemp...``), ``stats`` (operational rows), ``configured`` (configuration
rows), ``vhosts`` (vhost policies <-> ``policy:``), ``translate`` (qdmanage bodies -> config entries),
``reading`` (the entities of a type, the one a request names), ``answer`` (requests -> responses),
``changes`` (writes), ``rates`` (per-link settlement rates, sampled by the agent), ``source`` (what a
request reads).

May import: the rest of router.management (entities, access, requests, writes), router.config, router.policy,
the forwarding records and the adapter's plain-value handles; no Proton.
"""
