"""The forwarding core: which consumer gets a delivery, how much credit a producer gets, what an outcome
means upstream. Sans-IO: no Proton, no sockets, no clock (`tick(now)`); the adapter (router.adapter)
feeds it events and carries out its decisions.

Modules: ``records`` (addresses, links, in-flight entries), ``decisions`` (what the core answers, as
data), ``distribution`` (closest / balanced / multicast choices), ``credit`` (the credit ledger),
``table`` (the address table and the mesh view), ``settlement`` (in-flight entries, held deliveries,
multicast groups, counters), ``core`` (`RouterCore`: the events and their decisions).

May import: router.addressing, router.amqp (annotation values only). Never imports router.adapter,
router.node, the services or Proton.
"""
