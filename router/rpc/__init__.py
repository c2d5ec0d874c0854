"""router.rpc: a small RPC library on python-qpid-proton for meshrouter (and any AMQP 1.0 router).

For people who do not run OpenStack but want what oslo.messaging's AMQP 1.0 driver does over a router mesh,
following the driver's "router-based message bus" spec (seed ``004_``)::

    from router.rpc import RpcClient, RpcServer

    server = RpcServer("amqp://127.0.0.1:5701", "svc/echo", lambda body, props: f"echo: {body}")
    with RpcClient("amqp://127.0.0.1:5703", timeout=5) as client:
        client.call("svc/echo", "hi")           # -> "echo: hi"
        client.cast("svc/echo", "fire and forget, but accepted")
    server.stop()

Design (each module has one job):

- :mod:`~router.rpc.loop`: a lean event loop (selector, wake-up pipe, task queue, timer heap) in a background
  thread; other threads hand work to it with ``submit``, never touching Proton themselves.
  :mod:`~router.rpc.wire`: one connection driven through ``cproton_ffi`` the way the node does it (own
  socket, ``pn_transport``, a collector dispatched by event type), messages encoded and decoded by
  python-qpid-proton's ``Message``. python-qpid-proton's ``Container`` was used before; its generic
  event dispatch cost ~0.9 ms of CPU per call on each side (BENCHMARKS.md, "router.rpc").
- :mod:`~router.rpc.client`: :class:`RpcClient`: one connection, one dynamic reply receiver (credit 200),
  ``call`` / ``request`` / ``cast`` / ``fanout`` / ``notify``, thread-safe.
- :mod:`~router.rpc.server`, :mod:`~router.rpc.consumer`: :class:`RpcServer`: one address, credit 100
  refilled at half, a handler in a worker pool, replies through the anonymous relay, accept after handling.
- :mod:`~router.rpc.notify`: :class:`Notifier`, :class:`NotificationListener`, :func:`listen`.
- :mod:`~router.rpc.sending`: sender links, messages waiting for credit (never buffered in Proton), outcomes,
  re-sends and deadlines. :mod:`~router.rpc.outcomes`: the seed's RELEASED / MODIFIED rules.
- :mod:`~router.rpc.credit`: the credit window. :mod:`~router.rpc.demux`: waiters by message-id.
- :mod:`~router.rpc.messages`: message layouts. :mod:`~router.rpc.errors`: exceptions.
  :mod:`~router.rpc.defaults`: the seed's defaults. :mod:`~router.rpc.addresses`: oslo-style addresses.

No automatic reconnect: when the connection is lost, everything pending fails with
:class:`RpcConnectionError` and the client (or server) must be recreated.

A client library (services layer): may import python-qpid-proton's public API and its ``cproton_ffi``
binding, router.amqp and the base; nothing of the node.
"""

from __future__ import annotations

from . import addresses
from .client import RpcClient
from .errors import Requeue, RpcConnectionError, RpcError, RpcException, RpcTimeout, RpcUndeliverable
from .messages import Notification, Reply
from .notify import NotificationListener, Notifier, listen
from .server import RpcServer

__all__ = [
    "Notification",
    "NotificationListener",
    "Notifier",
    "Reply",
    "Requeue",
    "RpcClient",
    "RpcConnectionError",
    "RpcError",
    "RpcException",
    "RpcServer",
    "RpcTimeout",
    "RpcUndeliverable",
    "addresses",
    "listen",
]
