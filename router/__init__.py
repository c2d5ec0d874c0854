"""meshrouter: an AMQP 1.0 message-router mesh in Python."""

PRODUCT = "meshrouter"
__version__ = "0.1.0"
