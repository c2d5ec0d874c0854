"""The oslo.messaging driver: :class:`AmqpDriver` (entry point ``amqp`` of ``oslo.messaging.drivers``).

What each driver call does (see :mod:`router.oslo.controller` for deadlines and failover):

- ``send`` (call / cast / fanout / direct to a server): a request laid out as 14.x does
  (:mod:`router.oslo.layout`) to the Target's address; a call waits for the reply on the connection's
  dynamic reply address, resetting its ``call_monitor_timeout`` timer on each heartbeat. No server: the
  router gives no credit, nothing is sent, the call raises ``MessagingTimeout`` at its timeout;
- ``send_notification``: to ``notify/anycast/EXCHANGE/TOPIC.PRIORITY``, acknowledged (unless pre-settled),
  and one copy to each pool of ``notification_pools``;
- ``listen`` / ``listen_for_notifications``: receivers with a credit window; a message is ACCEPTED when
  oslo acknowledges it, RELEASED when it requeues it (the router gives it to another listener), RELEASED
  too when the listener is cleaned up with messages it never handled.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
import time
from collections import deque
from typing import Any

from oslo_messaging import exceptions
from oslo_messaging._drivers import base, common
from proton import Message, SSLDomain

from . import layout, options
from .addressing import NOTIFY, RPC, Dest, Prefixes
from .controller import Controller, Op, Subscription
from .hosts import Hosts
from .session import Token
from .wire import ConnectSettings

log = logging.getLogger(__name__)

SUBSCRIBE_WAIT = 5.0     # seconds listen() waits for the router to attach (or refuse) its links


class Inbox:
    """Received messages waiting for a listener's ``poll`` (thread-safe; ``stop`` wakes pollers)."""

    def __init__(self) -> None:
        self._items: deque[tuple[Message, Token]] = deque()
        self._cond = threading.Condition()
        self.stopped = False

    def put(self, item: tuple[Message, Token]) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def pop(self, timeout: float | None) -> tuple[Message, Token] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._items:
                if self.stopped:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            return self._items.popleft()

    def stop(self) -> None:
        with self._cond:
            self.stopped = True
            self._cond.notify_all()

    def drain_items(self) -> list[tuple[Message, Token]]:
        with self._cond:
            items, self._items = list(self._items), deque()
        return items

    def drain(self) -> list[Token]:
        return [t for _, t in self.drain_items()]


class IncomingMessage(base.RpcIncomingMessage):
    """A request or notification received; reply, heartbeat, acknowledge and requeue go to the router."""

    def __init__(self, listener: Listener, msg: Message, token: Token) -> None:
        request, ctxt, monitor = layout.read_request(msg)
        super().__init__(ctxt, request)
        self.listener = listener
        self.client_timeout = monitor
        self._reply_to = msg.reply_to
        self._correlation_id = msg.id
        self._token = token

    def reply(self, reply: Any = None, failure: Any = None) -> None:
        if not self._reply_to:
            log.debug("oslo amqp: no reply-to, reply dropped")
            return
        d = self.listener.driver
        op = Op(self._reply_to, layout.reply(self._correlation_id, reply, failure),
                time.monotonic() + d.reply_timeout, "rpc-reply" in d.pre_settled, "RPC reply",
                exceptions.MessageDeliveryFailure, retry=d.reply_retry)
        try:
            d.ctrl().run(op)
        except exceptions.MessagingException as exc:
            log.warning("oslo amqp: RPC reply not sent: %s", exc)

    def heartbeat(self) -> None:
        # worst effort (14.x): pre-settled, no retry, a short deadline; never blocks the server long
        if not self._reply_to:
            return
        d = self.listener.driver
        op = Op(self._reply_to, layout.heartbeat(self._correlation_id, self.client_timeout),
                time.monotonic() + max(1.0, (self.client_timeout or 2) / 2), True, "RPC heartbeat",
                exceptions.MessageDeliveryFailure, retry=0)
        try:
            d.ctrl().run(op)
        except exceptions.MessagingException as exc:
            log.debug("oslo amqp: heartbeat not sent: %s", exc)

    def acknowledge(self) -> None:
        self._settle(True)

    def requeue(self) -> None:
        self._settle(False)

    def _settle(self, accept: bool) -> None:
        try:
            self.listener.driver.ctrl().settle(self._token, accept)
        except exceptions.MessageDeliveryFailure as exc:       # oslo: "does not raise"
            log.warning("oslo amqp: message not %s: %s", "acknowledged" if accept else "requeued", exc)


class Listener(base.PollStyleListener):
    """One subscription's messages: polled from its inbox (batches, through oslo's
    PollStyleListenerAdapter), or handed to oslo's callback on the driver's loop thread (:class:`Direct`)."""

    def __init__(self, driver: AmqpDriver, dests: list[Dest], server: bool, credit: int) -> None:
        super().__init__(driver.prefetch_size)
        self.driver = driver
        self.inbox = Inbox()
        self._direct: Any = None
        self.sub = Subscription(dests, server, credit, self._deliver)

    def _incoming(self, msg: Message, token: Token) -> IncomingMessage | None:
        try:
            return IncomingMessage(self, msg, token)
        except Exception as exc:      # noqa: BLE001 - a body that is not the oslo layout
            log.warning("oslo amqp: unreadable message rejected: %s", exc)
            self.driver.ctrl().settle(token, True)
            return None

    def _deliver(self, msg: Message, token: Token) -> None:
        """A message for this listener (loop thread)."""
        callback = self._direct
        if callback is None:
            self.inbox.put((msg, token))
            return
        incoming = self._incoming(msg, token)
        if incoming is not None:
            try:
                callback([incoming])          # oslo only queues it for its executor
            except Exception:
                log.exception("oslo amqp: the server's callback failed")

    @base.batch_poll_helper
    def poll(self, timeout: float | None = None) -> IncomingMessage | None:
        while True:
            item = self.inbox.pop(timeout)
            if item is None:
                return None
            incoming = self._incoming(*item)
            if incoming is not None:
                return incoming

    def go_direct(self, callback: Any) -> None:
        """From now on hand each message to ``callback`` on the loop thread (what came before first)."""
        def switch() -> None:
            self._direct = callback
            for item in self.inbox.drain_items():
                self._deliver(*item)
        self.driver.ctrl().loop.run_sync(switch, timeout=10)

    def stop_direct(self) -> None:
        def off() -> None:
            self._direct = None
        try:
            self.driver.ctrl().loop.run_sync(off, timeout=10)
        except (RuntimeError, TimeoutError, exceptions.MessageDeliveryFailure):
            self._direct = None
        self.stop()

    def stop(self) -> None:
        self.inbox.stop()
        try:
            self.driver.ctrl().stop_subscription(self.sub)
        except exceptions.MessageDeliveryFailure:
            pass                       # the transport is gone, and the subscription with it

    def cleanup(self) -> None:
        try:
            self.driver.ctrl().unsubscribe(self.sub, self.inbox.drain())
        except exceptions.MessageDeliveryFailure:
            pass


class Direct(base.Listener):
    """A listener of single messages (``batch_size`` 1): each is handed to oslo's callback on the driver's
    loop thread as it arrives (oslo's callback only queues it for the server's executor), which saves the
    polling thread's wake-up per message that :class:`base.PollStyleListenerAdapter` costs."""

    def __init__(self, listener: Listener) -> None:
        super().__init__(1, None, listener.prefetch_size)
        self.listener = listener

    def start(self, on_incoming_callback: Any) -> None:
        super().start(on_incoming_callback)
        self.listener.go_direct(on_incoming_callback)

    def stop(self) -> None:
        self.listener.stop_direct()
        super().stop()

    def cleanup(self) -> None:
        self.listener.cleanup()


def _adapt(listener: Listener, batch_size: int, batch_timeout: float | None) -> base.Listener:
    if batch_size and batch_size > 1:
        return base.PollStyleListenerAdapter(listener, batch_size, batch_timeout)
    return Direct(listener)


class AmqpDriver(base.BaseDriver):
    """AMQP 1.0 driver for meshrouter (and any AMQP 1.0 router that hands out dynamic reply addresses)."""

    def __init__(self, conf: Any, url: Any, default_exchange: str | None = None,
                 allowed_remote_exmods: list[str] | None = None) -> None:
        super().__init__(conf, url, default_exchange, allowed_remote_exmods)
        options.register(conf)
        try:
            options.check_group(conf, url.query or {})
            proxy = common.ConfigOptsProxy(conf, url, options.GROUP)
        except options.OptionError:
            raise
        except Exception as exc:              # a bad value in the URL's query
            raise options.OptionError(f"transport_url {url}: {exc}") from exc
        o = proxy.oslo_messaging_amqp
        self.opts = o
        self.pre_settled = options.pre_settled(o.pre_settled)
        self.reply_timeout = o.default_reply_timeout
        self.send_timeout = o.default_send_timeout
        self.notify_timeout = o.default_notify_timeout
        self.reply_retry = None if o.default_reply_retry < 0 else o.default_reply_retry
        self.pools = [p for p in o.notification_pools if p]
        self.settings = self._settings(url, o)
        self.hosts = Hosts(url, self.settings.tls is not None, o.sasl_default_realm)
        self.prefixes = Prefixes(o.rpc_address_prefix, o.notify_address_prefix, o.unicast_address,
                                 o.multicast_address, o.anycast_address, o.server_request_prefix,
                                 o.broadcast_prefix, o.group_request_prefix, o.default_rpc_exchange,
                                 o.default_notification_exchange)
        self._ctrl: Controller | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._cleaned_up = False

    @staticmethod
    def _settings(url: Any, o: Any) -> ConnectSettings:
        tls = url.transport in ("amqps",) or o.ssl or bool(o.ssl_ca_file) or bool(o.ssl_cert_file)
        domain = None
        if tls:
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            try:
                if o.ssl_ca_file:
                    domain.set_trusted_ca_db(o.ssl_ca_file)
                    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, o.ssl_ca_file)
                else:
                    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
                if o.ssl_cert_file:
                    domain.set_credentials(o.ssl_cert_file, o.ssl_key_file or o.ssl_cert_file,
                                           o.ssl_key_password)
            except Exception as exc:
                raise options.OptionError(f"[{options.GROUP}] TLS settings refused by OpenSSL (ssl_ca_file="
                                          f"{o.ssl_ca_file!r}, ssl_cert_file={o.ssl_cert_file!r}, "
                                          f"ssl_key_file={o.ssl_key_file!r}): {exc}") from exc
        vhost = url.virtual_host or None
        return ConnectSettings(
            tls=domain,
            verify_name=vhost if (o.ssl_verify_vhost and vhost) else None,
            sasl_mechanisms=o.sasl_mechanisms, sasl_config_dir=o.sasl_config_dir,
            sasl_config_name=o.sasl_config_name,
            open_hostname=vhost if (vhost and not o.pseudo_vhost) else None,
            idle_timeout=float(o.idle_timeout),
            properties={"process": os.path.basename(sys.argv[0] or "python"), "pid": os.getpid(),
                        "node": platform.node() or "<unknown>"},
            trace=o.trace)

    # ---- the controller, made on first use (and again in a forked child)
    def ctrl(self) -> Controller:
        with self._lock:
            if self._cleaned_up:      # no new connection for a listener cleaned up after its transport
                raise exceptions.MessageDeliveryFailure("the transport was cleaned up")
            pid = os.getpid()
            if self._ctrl is None or self._pid != pid:
                if self._ctrl is not None:
                    log.warning("oslo amqp: process forked after the connection was made; reconnecting")
                self._pid = pid
                self._ctrl = Controller(self.hosts, self.settings, self.opts, self._default_exchange,
                                        self.prefixes)
                self._ctrl.start()
            return self._ctrl

    # ---- BaseDriver
    def require_features(self, requeue: bool = False) -> None:
        pass                                  # requeue = RELEASED: supported

    def send(self, target: Any, ctxt: dict, message: dict, wait_for_reply: bool | None = None,
             timeout: float | None = None, call_monitor_timeout: float | None = None,
             retry: int | None = None, transport_options: Any = None) -> Any:
        deadline = time.monotonic() + (timeout or self.send_timeout)
        msg = layout.request(message, ctxt, monitor=call_monitor_timeout, timeout=timeout)
        retry = None if retry is None or retry < 0 else retry
        dest = Dest.of(target, RPC)
        if wait_for_reply:
            op = Op(dest, msg, deadline, "rpc-call" in self.pre_settled, "RPC call",
                    exceptions.MessagingTimeout, retry=retry, call=True, monitor=call_monitor_timeout)
            reply = self.ctrl().run(op)
            return layout.read_reply(reply, self._allowed_remote_exmods)
        kind = "RPC fanout" if target.fanout else "RPC cast"
        op = Op(dest, msg, deadline, "rpc-cast" in self.pre_settled, kind,
                exceptions.MessagingTimeout if timeout else exceptions.MessageDeliveryFailure, retry=retry)
        self.ctrl().run(op)
        return None

    def send_notification(self, target: Any, ctxt: dict, message: dict, version: float,
                          retry: int | None = None) -> None:
        retry = None if retry is None or retry < 0 else retry
        deadline = time.monotonic() + self.notify_timeout
        ctrl = self.ctrl()

        def op(topic: str, label: str, background: bool = False) -> Op:
            return Op(Dest(topic, target.exchange, None, False, NOTIFY),
                      layout.request(message, ctxt, envelope=(version == 2.0)), deadline,
                      "notify" in self.pre_settled, label, exceptions.MessageDeliveryFailure, retry=retry,
                      ack=False, background=background)

        # each pool's copy goes out beside the notification; the notifier does not wait for pools (a pool
        # with no listener reachable drops its copy at the notify timeout, with a warning in the log)
        for p in self.pools:
            ctrl.post(op(f"{target.topic}/pool/{p}", f"Notification copy for pool {p}", background=True))
        ctrl.run(op(target.topic, "Notification"))

    def listen(self, target: Any, batch_size: int, batch_timeout: float | None) -> Any:
        listener = Listener(self, [Dest.of(target, RPC)], True, self.opts.rpc_server_credit)
        self.ctrl().subscribe(listener.sub, SUBSCRIBE_WAIT)
        return _adapt(listener, batch_size, batch_timeout)

    def listen_for_notifications(self, targets_and_priorities: list, pool: str | None, batch_size: int,
                                 batch_timeout: float | None) -> Any:
        if pool and pool not in self.pools:
            raise exceptions.MessagingException(
                f"notification pool {pool!r} is not in [{options.GROUP}] notification_pools "
                f"({', '.join(self.pools) or 'empty'}): notifiers send pools their copies, so every pool "
                "must be listed there, on the notifiers' side too")
        suffix = f"/pool/{pool}" if pool else ""
        # as 14.x: the Target's exchange is not used (the notifier's Target has none)
        dests = [Dest(f"{t.topic}.{prio}{suffix}", None, None, False, NOTIFY)
                 for t, prio in targets_and_priorities]
        listener = Listener(self, dests, False, self.opts.notify_server_credit)
        self.ctrl().subscribe(listener.sub, SUBSCRIBE_WAIT)
        return _adapt(listener, batch_size, batch_timeout)

    def cleanup(self) -> None:
        with self._lock:
            ctrl, self._ctrl = self._ctrl, None
            self._cleaned_up = True
        if ctrl is not None:
            ctrl.shutdown()
        log.info("oslo amqp: driver shut down")
