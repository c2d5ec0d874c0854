"""meshrouter: an AMQP 1.0 message-router mesh in Python.

The package is layered (docs/ARCHITECTURE.md; tests/unit/test_architecture.py checks it): base
(``defaults``, ``logs``, ``argtypes``, this module) -> codec (``amqp``) -> core (``addressing``,
``config``, ``security``, ``forwarding``, ``linkstate``) -> the Proton adapter (``adapter``) -> the node
(``node``) -> services (``management``, ``gateway``, ``telemetry``, ``rpc``, ``analytics``) -> CLI
(``cli``, ``launch``, ``meshctl``). A module may import its own layer and those below; this module
imports nothing.
"""

PRODUCT = "meshrouter"
__version__ = "0.1.0"
