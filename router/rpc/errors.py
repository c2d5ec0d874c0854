"""The exceptions `router.rpc` raises to its callers.

Every one derives from :class:`RpcException`, so ``except RpcException`` catches all of them:

- :class:`RpcTimeout`: nothing decisive happened before the deadline. Either the mesh granted no credit
  (no consumer for the address anywhere: the request was never sent, nothing waits anywhere), or the
  request went out and no reply came back in time.
- :class:`RpcUndeliverable`: the message came back REJECTED, came back MODIFIED(delivery-failed) (it reached
  a consumer that then vanished, so it may have been processed), or kept coming back RELEASED until the
  deadline.
- :class:`RpcError`: the server ran the request and its handler raised; carries the remote exception's type
  name and message.
- :class:`RpcConnectionError`: the client's (or server's) connection could not be opened or was lost;
  every call still pending on it fails with this.
"""

from __future__ import annotations


class RpcException(Exception):
    """Base class of every error raised by `router.rpc`."""


class RpcTimeout(RpcException):
    """No credit, outcome or reply arrived before the call's deadline."""


class RpcUndeliverable(RpcException):
    """The message could not be delivered: REJECTED, MODIFIED(delivery-failed), or RELEASED until the
    deadline. ``outcome`` names the last outcome seen (``"REJECTED"``, ``"MODIFIED"``, ``"RELEASED"``,
    or ``"LINK-CLOSED"`` when the router refused or closed the sending link)."""

    def __init__(self, message: str, outcome: str = "", condition: str | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.condition = condition


class RpcError(RpcException):
    """The remote handler raised. ``exc_type`` is the remote exception's class name, ``remote_message``
    its message (both parsed from the reply's ``error`` application property ``"ExcType: message"``)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        exc_type, sep, message = error.partition(": ")
        self.exc_type = exc_type if sep else "Exception"
        self.remote_message = message if sep else error


class RpcConnectionError(RpcException):
    """The connection to the router could not be established, or it was lost (or closed) while the
    operation was pending. There is no automatic reconnect: make a new client."""


class Requeue(Exception):  # noqa: N818 - it is a request, not an error
    """Raise from a server handler or notification callback to give the message back: it is settled
    RELEASED (the seed's "requeue"), which tells the sender it was not processed, so the sender re-sends
    it (here or to another consumer) while its deadline allows."""
