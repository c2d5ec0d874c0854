"""`RpcServer`: serve one address with a Python function.

``handler(body, properties)`` runs in a worker thread pool (``workers``, default 8; ``workers=0`` runs it on
the event-loop thread, for handlers that never block). Its return value becomes the reply body (return a
:class:`~router.rpc.messages.Reply` to add application properties). If it raises, the caller gets an error
reply (application property ``error`` = ``"ExcType: message"``) and raises
:class:`~router.rpc.errors.RpcError`; raising :class:`~router.rpc.errors.Requeue` instead releases the request
so the caller re-sends it. Requests without ``reply_to`` are casts: the handler runs, nothing is sent back
(an exception is only logged). The request is accepted after the handler returned and its reply was handed
to the relay (see :mod:`router.rpc.consumer` for why, for credit and for stopping).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from proton import Message

from . import messages
from .consumer import Consumer, ConsumerCore
from .defaults import CONNECT_TIMEOUT, REPLY_TIMEOUT, SERVER_CREDIT, WORKERS
from .errors import Requeue

log = logging.getLogger(__name__)

Handler = Callable[[Any, Mapping[str, Any]], Any]


class RpcServer(Consumer):
    """Consumes ``address`` on the node at ``url`` and answers each request with ``handler``'s result.

    ``credit``: the subscription's credit window (the seed's 100, topped up at half). ``reply_timeout``:
    seconds to deliver one reply (the seed's 10 s). ``start=True`` connects at once (raising
    :class:`~router.rpc.errors.RpcConnectionError` if the link is not attached within ``connect_timeout``).
    """

    def __init__(self, url: str, address: str, handler: Handler, credit: int = SERVER_CREDIT, *,
                 workers: int = WORKERS, reply_timeout: float = REPLY_TIMEOUT,
                 connect_timeout: float = CONNECT_TIMEOUT, start: bool = True,
                 name: str = "rpc-server") -> None:
        self.handler = handler
        self.connect_timeout = connect_timeout
        self.served = 0          # requests answered (or casts run) without an exception
        self.failed = 0          # handler exceptions turned into error replies
        self._count_lock = threading.Lock()
        super().__init__(ConsumerCore(url, address, self._process, credit, workers, reply_timeout, name))
        if start:
            self.start()

    def start(self, timeout: float | None = None) -> None:
        """Connect and attach (if not done by the constructor)."""
        super().start(self.connect_timeout if timeout is None else timeout)

    def _process(self, request: Message) -> bytes | None:
        """Worker thread: run the handler for one request; the encoded reply (None for a cast)."""
        reply_to = request.reply_to
        try:
            result = self.handler(request.body, dict(request.properties or {}))
        except Requeue:
            raise
        except Exception as exc:
            self._count("failed")
            log.debug("%s: handler for %s raised", self._core.name, self.address, exc_info=True)
            if not reply_to:
                log.warning("%s: cast handler for %s raised %s", self._core.name, self.address,
                            messages.describe_exception(exc))
                return None
            return messages.error_reply(request, exc).encode()
        if not reply_to:
            self._count("served")
            return None
        try:
            payload = messages.encode_reply(request, result)
        except Exception as exc:           # the result is not AMQP-encodable
            self._count("failed")
            return messages.error_reply(request, TypeError(f"reply not encodable: {exc}")).encode()
        self._count("served")
        return payload

    def _count(self, counter: str) -> None:
        with self._count_lock:
            setattr(self, counter, getattr(self, counter) + 1)
