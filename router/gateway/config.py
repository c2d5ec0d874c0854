"""The gateway's configuration objects (``brokers:`` of a node's config), as the gateway imports them.

They are declared, with each key's default, check and doc, in :mod:`router.config.brokers`, so that
router.config never imports the gateway; validating a config never imports pika.
"""

from __future__ import annotations

from router.config.brokers import DIRECTIONS, SEMANTICS, BridgeConfig, BrokerConfig

__all__ = ["DIRECTIONS", "SEMANTICS", "BridgeConfig", "BrokerConfig"]
