"""AMQP 1.0 encoding as plain Python values: the bottom layer of the node, stdlib only (no ``proton``).

* ``codec``: decoding of values, the section scan of the data path (``to`` of anonymous transfers),
  FLOW echo detection on the raw frame stream.
* ``encode``: encoding of values (the counterpart of ``codec``).
* ``message``: whole bare messages (encode / strict decode), for the node's own control and
  management messages.
* ``annotations``: the router's ``x-opt-qd.*`` message annotations, read and rewritten on the bytes.

May import: the standard library and its own modules, nothing else of ``router``.
"""
