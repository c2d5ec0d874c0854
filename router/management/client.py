"""A synchronous client of the ``$management`` protocol (docs/MANAGEMENT.md).

One python-qpid-proton ``BlockingConnection`` per client: requests go out on one anonymous sender (the
node's anonymous relay routes them by ``to``), responses come back on one dynamic receiver and are
matched to their request by ``correlation_id``. ``node=None`` reads the node the client is connected
to; ``node="B"`` reads node B through the mesh (``_topo/0/B/$management``).

``query`` reads a table in pages (the QUERY application properties ``offset`` and ``count``, PAGE_ROWS
rows a request, fewer when the agent answers 413 because a page would not fit in a message), so a table
of any size comes back whole; ``query_page`` asks for one page.

Errors: a response other than 200 raises :class:`ManagementError`; no response in time raises
:class:`ManagementTimeout`; a refused or lost connection, or a request the mesh could not route,
raises :class:`ManagementUnavailable`. All three are :class:`ManagementClientError`.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from typing import Any

from proton import ConnectionException, Delivery, LinkException, Message, ProtonException, SSLDomain, Timeout
from proton.utils import BlockingConnection, SendException

from router.management.security import ClientSecurity

LOCAL_AGENT = "$management"
DEFAULT_TIMEOUT = 10.0
STATUS_OK = 200
STATUS_TOO_LARGE = 413
PAGE_ROWS = 2000           # rows asked for per QUERY request (halved while the agent answers 413)
_OUTCOMES = {Delivery.REJECTED: "rejected", Delivery.RELEASED: "released", Delivery.MODIFIED: "modified"}


class ManagementClientError(Exception):
    """Base class of every error of :class:`ManagementClient`."""


class ManagementError(ManagementClientError):
    """The agent answered with a status other than 200."""

    def __init__(self, status_code: int, description: str) -> None:
        super().__init__(f"{status_code} {description}")
        self.status_code = status_code
        self.description = description


class ManagementTimeout(ManagementClientError):
    """No connection, or no response, within the client's timeout."""


class ManagementUnavailable(ManagementClientError):
    """Cannot connect, the connection was lost, or the request could not be delivered to the agent."""


def connect_options(security: ClientSecurity, url: str) -> dict[str, Any]:
    """Keyword arguments of python-qpid-proton's BlockingConnection for ``security`` and ``url``."""
    options: dict[str, Any] = {}
    if security.ca or security.cert or url.startswith("amqps:"):
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if security.ca:
            domain.set_trusted_ca_db(security.ca)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if security.verify_name
                                       else SSLDomain.VERIFY_PEER, security.ca)
        if security.cert:
            domain.set_credentials(security.cert, security.key or security.cert, None)
        options["ssl_domain"] = domain
    if security.user:
        options["user"] = security.user
        options["password"] = security.password()
    if security.mechanisms:
        options["allowed_mechs"] = security.mechanisms
    return options


def agent_address(node: str | None = None) -> str:
    """The address of the agent of ``node`` (None: the node the client is connected to)."""
    return LOCAL_AGENT if node is None else f"_topo/0/{node}/{LOCAL_AGENT}"


class ManagementClient:
    """``query``/``read``/``get_types`` against the agent of any node of the mesh; a context manager."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT,
                 security: ClientSecurity | None = None, virtual_host: str | None = None) -> None:
        """``virtual_host``: the hostname of our Open (a node's policy may pick a vhost by it)."""
        self.url = url
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]
        try:
            options = connect_options(security or ClientSecurity(), url)
            if virtual_host is not None:
                options["virtual_host"] = virtual_host
        except (OSError, IndexError, ProtonException) as exc:
            raise ManagementUnavailable(f"cannot set up TLS / SASL for {url}: {_reason(exc)}") from None
        try:
            self._conn = BlockingConnection(url, timeout=timeout, **options)
        except Timeout:
            raise ManagementTimeout(f"no connection to {url} within {timeout:g} s") from None
        except (ConnectionException, OSError) as exc:
            raise ManagementUnavailable(f"cannot connect to {url}: {_reason(exc)}") from None
        try:
            self._sender = self._conn.create_sender(None)
            self._receiver = self._conn.create_receiver(None, dynamic=True, credit=16)
            self.reply_to: str = self._receiver.link.remote_source.address
        except Timeout:
            self._abort()
            raise ManagementTimeout(f"{url}: links not attached within {timeout:g} s") from None
        except ProtonException as exc:
            self._abort()
            raise ManagementUnavailable(f"{url}: cannot attach the management links: "
                                        f"{_reason(exc)}") from None
        if not self.reply_to:
            self._abort()
            raise ManagementUnavailable(f"{url}: the node gave the reply receiver no dynamic address")

    # ------------------------------------------------------------------------------------ operations

    def query(self, entity_type: str, attributes: Sequence[str] | None = None,
              node: str | None = None) -> tuple[list[str], list[list[Any]]]:
        """Every entity of ``entity_type``: (attribute names, one row of values per entity), read in pages.

        Pages follow the agent's table order; rows added or removed while paging may be missed or
        repeated (as with qdrouterd)."""
        page = PAGE_ROWS
        offset = 0
        names: list[str] = []
        rows: list[list[Any]] = []
        while True:
            try:
                names, batch = self.query_page(entity_type, attributes, node, offset, page)
            except ManagementError as exc:
                if exc.status_code != STATUS_TOO_LARGE or page == 1:
                    raise
                page = max(1, page // 2)
                continue
            rows.extend(batch)
            if len(batch) < page:
                return names, rows
            offset += len(batch)

    def query_page(self, entity_type: str, attributes: Sequence[str] | None = None, node: str | None = None,
                   offset: int | None = None, count: int | None = None) -> tuple[list[str], list[list[Any]]]:
        """One QUERY request: rows ``offset`` to ``offset + count`` (None: from the first / to the last)."""
        body = {"attributeNames": list(attributes or [])}
        props: dict[str, Any] = {}
        if offset is not None:
            props["offset"] = offset
        if count is not None:
            props["count"] = count
        reply = self.request("QUERY", entity_type, body=body, node=node, properties=props)
        if not isinstance(reply, dict) or not isinstance(reply.get("attributeNames"), list) \
                or not isinstance(reply.get("results"), list):
            raise ManagementClientError(f"malformed QUERY response for {entity_type!r}: {reply!r}")
        names = [str(n) for n in reply["attributeNames"]]
        rows = [list(r) for r in reply["results"]]
        if any(len(r) != len(names) for r in rows):
            raise ManagementClientError(f"QUERY {entity_type!r}: rows do not match attributes {names}")
        return names, rows

    def query_dicts(self, entity_type: str, attributes: Sequence[str] | None = None,
                    node: str | None = None) -> list[dict[str, Any]]:
        """Like :meth:`query`, one dict attribute -> value per entity."""
        names, rows = self.query(entity_type, attributes, node)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def read(self, entity_type: str, identity: str, node: str | None = None) -> dict[str, Any]:
        """One entity's attributes."""
        reply = self.request("READ", entity_type, identity=identity, node=node)
        if not isinstance(reply, dict):
            raise ManagementClientError(f"malformed READ response for {entity_type!r}: {reply!r}")
        return {str(k): v for k, v in reply.items()}

    def get_types(self, node: str | None = None) -> dict[str, list[str]]:
        """Every entity type the agent knows -> its attribute names."""
        reply = self.request("GET-TYPES", None, node=node)
        if not isinstance(reply, dict):
            raise ManagementClientError(f"malformed GET-TYPES response: {reply!r}")
        return {str(k): [str(a) for a in v] for k, v in reply.items()}

    def request(self, operation: str, entity_type: str | None, *, identity: str | None = None,
                body: Any = None, node: str | None = None, properties: dict[str, Any] | None = None) -> Any:
        """Send one request and return the body of its 200 response (raise otherwise); ``properties``:
        more application properties (a QUERY's ``offset`` and ``count``)."""
        props: dict[str, Any] = {**(properties or {}), "operation": operation}
        if entity_type is not None:
            props["type"] = entity_type
        if identity is not None:
            props["identity"] = identity
        correlation = f"{self._prefix}-{next(self._ids)}"
        address = agent_address(node)
        msg = Message(address=address, reply_to=self.reply_to, correlation_id=correlation,
                      properties=props, body=body)
        where = f"{self.url}" if node is None else f"node {node} (through {self.url})"
        try:
            self._sender.send(msg)
            response = self._receive(correlation, f"{operation} on {where}")
        except SendException as exc:
            outcome = _OUTCOMES.get(exc.state, f"state {exc.state}")
            why = "no agent reachable there"
            if exc.state == Delivery.REJECTED:
                why = "the node's policy gives this connection no management access"
            raise ManagementUnavailable(f"{operation} to {address}: the request was {outcome} "
                                        f"({why})") from None
        except Timeout:
            raise ManagementTimeout(f"no response to {operation} from {where} within "
                                    f"{self.timeout:g} s") from None
        except ProtonException as exc:
            raise ManagementUnavailable(f"{where}: {_reason(exc)}") from None
        status, description = _status(response)
        if not STATUS_OK <= status < 300:         # 201 Created, 204 No Content too
            raise ManagementError(status, description)
        return response.body

    def _receive(self, correlation: str, what: str) -> Message:
        """The response with this correlation id; older ones (their request timed out) are dropped."""
        while True:
            msg = self._receiver.receive(timeout=self.timeout)
            self._receiver.accept()
            if msg.correlation_id == correlation:
                return msg

    # ------------------------------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Close the connection (errors while closing are ignored: there is nothing left to read)."""
        try:
            self._conn.close()
        except (ProtonException, OSError):
            self._abort()

    def _abort(self) -> None:
        try:
            self._conn.conn.close()
            self._conn.container.stop()
        except (ProtonException, OSError, AttributeError):
            pass

    def __enter__(self) -> ManagementClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _status(response: Message) -> tuple[int, str]:
    props = response.properties or {}
    code = props.get("statusCode")
    description = props.get("statusDescription")
    try:
        status = int(code)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 500, f"response without a valid statusCode (got {code!r})"
    return status, str(description) if description is not None else ""


def _reason(exc: BaseException) -> str:
    """A one-line reason from a Proton exception (whose text may hold a ``Condition(...)`` repr)."""
    text = str(exc)
    if "Condition(" in text:
        inner = text.split("Condition(", 1)[1].rstrip(")")
        parts = [p.strip().strip("'\"") for p in inner.split(",", 1)]
        text = parts[1] if len(parts) > 1 else parts[0]
    if isinstance(exc, LinkException) and not text:
        text = "link detached"
    return text or type(exc).__name__
