"""Notifications: :class:`Notifier` (send, on an :class:`~router.rpc.client.RpcClient`) and
:class:`NotificationListener` / :func:`listen` (receive).

The mesh stores nothing: a notification is accepted only by a listener that is attached now, and with none
the send waits for credit until its timeout (the seed's 30 s) and raises
:class:`~router.rpc.errors.RpcTimeout`. Keeping notifications while no listener runs needs a broker behind
the address (the gateway issue).

Addresses follow the seed's notification form when :class:`Notifier` gets a topic address:
``<address>.<priority>``, e.g. ``openstack.org/om/notify/anycast/nova/notifications.info``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proton import Message

from . import messages
from .client import RpcClient
from .consumer import Consumer, ConsumerCore
from .defaults import CONNECT_TIMEOUT, NOTIFY_TIMEOUT, SERVER_CREDIT
from .messages import Notification

PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")


class Notifier:
    """Sends notifications through ``client`` to ``<address>.<priority>`` (or to ``address`` itself with
    ``per_priority=False``), as ``publisher_id``."""

    def __init__(self, client: RpcClient, address: str, publisher_id: str | None = None,
                 timeout: float = NOTIFY_TIMEOUT, per_priority: bool = True) -> None:
        self.client = client
        self.address = address
        self.publisher_id = publisher_id
        self.timeout = timeout
        self.per_priority = per_priority

    def address_for(self, priority: str) -> str:
        return f"{self.address}.{priority}" if self.per_priority else self.address

    def notify(self, priority: str, event_type: str, payload: Any, timeout: float | None = None) -> None:
        """Send one notification and wait until a listener accepted it."""
        self.client.notify(self.address_for(priority), event_type, payload, priority=priority,
                           timeout=self.timeout if timeout is None else timeout,
                           publisher_id=self.publisher_id)

    def audit(self, event_type: str, payload: Any) -> None:
        self.notify("audit", event_type, payload)

    def debug(self, event_type: str, payload: Any) -> None:
        self.notify("debug", event_type, payload)

    def info(self, event_type: str, payload: Any) -> None:
        self.notify("info", event_type, payload)

    def warn(self, event_type: str, payload: Any) -> None:
        self.notify("warn", event_type, payload)

    warning = warn

    def error(self, event_type: str, payload: Any) -> None:
        self.notify("error", event_type, payload)

    def critical(self, event_type: str, payload: Any) -> None:
        self.notify("critical", event_type, payload)

    def sample(self, event_type: str, payload: Any) -> None:
        self.notify("sample", event_type, payload)


class NotificationListener(Consumer):
    """Consumes ``address`` and calls ``callback(notification)`` for each notification (in ``workers``
    threads; default 1, so callbacks run one at a time in arrival order). A callback that raises
    :class:`~router.rpc.errors.Requeue` releases the notification; any other exception is logged and the
    notification is still accepted (it was delivered; a retry would not change the callback)."""

    def __init__(self, url: str, address: str, callback: Callable[[Notification], None],
                 credit: int = SERVER_CREDIT, *, workers: int = 1, connect_timeout: float = CONNECT_TIMEOUT,
                 start: bool = True, name: str = "rpc-listener") -> None:
        self.callback = callback
        self.connect_timeout = connect_timeout
        self.received = 0
        super().__init__(ConsumerCore(url, address, self._process, credit, workers, 0.0, name))
        if start:
            self.start()

    def start(self, timeout: float | None = None) -> None:
        super().start(self.connect_timeout if timeout is None else timeout)

    def _process(self, message: Message) -> None:
        self.callback(messages.parse_notification(message))
        self.received += 1
        return None


def listen(url: str, address: str, callback: Callable[[Notification], None],
           credit: int = SERVER_CREDIT, **kwargs: Any) -> NotificationListener:
    """Start a :class:`NotificationListener` (stop it with ``.stop()``, or use it as a context manager)."""
    return NotificationListener(url, address, callback, credit, **kwargs)
