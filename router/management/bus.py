"""The node that ``meshrouter stat``, ``manage`` and ``console`` talk to without ``-b``: one default.

``amqp://127.0.0.1:5700`` is the client listener of config/node.yaml (``make run-node``); 5672 is the usual
AMQP port, often a broker's (RabbitMQ answers AMQP 1.0 clients with its 0-9-1 header).
"""

from __future__ import annotations

DEFAULT_BUS = "amqp://127.0.0.1:5700"
