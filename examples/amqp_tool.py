#!/usr/bin/env python3
"""amqp_tool: a small AMQP 1.0 command-line client for trying out a meshrouter node.

Built on python-qpid-proton's event API (``Container`` + ``MessagingHandler``), one handler class
per subcommand:

    amqp_tool.py info                               who is at the other end of --url
    amqp_tool.py send ADDRESS [--count N]           send messages and print their outcomes
    amqp_tool.py recv ADDRESS [--count N]           print messages and answer with an outcome
    amqp_tool.py rpc-server ADDRESS                 answer requests with "echo: <body>"
    amqp_tool.py rpc-call ADDRESS TEXT [--count N]  send requests and wait for the replies

Connects to --url (default amqp://127.0.0.1:5700).
Exit codes: 0 done; 1 timeout, refused link or lost connection; 2 bad arguments; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from proton import Condition, Connection, Delivery, Endpoint, Event, Message, Receiver, Sender
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container

DEFAULT_URL = "amqp://127.0.0.1:5700"
CTRL_C_POLL = 0.2  # seconds between checks of the Ctrl-C flag
REJECT_CONDITION = Condition("app:rejected", "rejected by amqp_tool")


def describe_condition(cond: Condition | None) -> str:
    """``name: description`` of an AMQP error condition."""
    if cond is None:
        return "(no error condition)"
    return f"{cond.name}: {cond.description}" if cond.description else str(cond.name)


def describe_outcome(delivery: Delivery) -> str:
    """The outcome the peer gave one of our deliveries, e.g. ``REJECTED amqp:...: why``."""
    state, remote = delivery.remote_state, delivery.remote
    if state == Delivery.ACCEPTED:
        return "ACCEPTED"
    if state == Delivery.REJECTED:
        return f"REJECTED {describe_condition(remote.condition)}" if remote.condition else "REJECTED"
    if state == Delivery.RELEASED:
        return "RELEASED"
    if state == Delivery.MODIFIED:
        return f"MODIFIED delivery_failed={remote.failed} undeliverable_here={remote.undeliverable}"
    return f"state {state}"


def show(body: Any) -> str:
    """A message body for printing: text as is, anything else as its repr."""
    return body if isinstance(body, str) else repr(body)


def settle_with(delivery: Delivery, outcome: str) -> None:
    """Answer a received message with accept, reject, release or modify, and settle it."""
    if outcome == "accept":
        delivery.update(Delivery.ACCEPTED)
    elif outcome == "reject":
        delivery.local.condition = REJECT_CONDITION
        delivery.update(Delivery.REJECTED)
    elif outcome == "release":
        delivery.update(Delivery.RELEASED)
    else:  # modify: "failed, try again elsewhere is fine"
        delivery.local.failed = True
        delivery.local.undeliverable = False
        delivery.update(Delivery.MODIFIED)
    delivery.settle()


class Timer:
    """Calls ``action()`` when a Container timer fires (``schedule()`` wants a handler object)."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action

    def on_timer_task(self, event: Event) -> None:
        self.action()


class Client(MessagingHandler):
    """What every subcommand shares: one connection, an optional deadline, errors, the exit code."""

    def __init__(self, url: str, timeout: float = 0.0, prefetch: int = 0, auto_accept: bool = False) -> None:
        super().__init__(prefetch=prefetch, auto_accept=auto_accept)
        self.url = url
        self.timeout = timeout
        self.exit_code = 0
        self.interrupted = False  # set by the Ctrl-C handler in main()
        self.container: Container | None = None
        self.connection: Connection | None = None
        self._deadline: Any = None  # proton Tasks (timers), which have .cancel()
        self._ctrl_c_check: Any = None
        self._done = False

    # -- to be filled in by the subcommands
    def start(self, container: Container, connection: Connection) -> None:
        """Open the links this subcommand needs."""

    def timed_out(self) -> str:
        """What was still missing when the deadline passed."""
        return "not done"

    # -- plumbing
    def on_start(self, event: Event) -> None:
        self.container = event.container
        # reconnect=False: a demo tool should say "connection refused", not retry forever.
        self.connection = self.container.connect(self.url, reconnect=False)
        if self.timeout > 0:
            self._deadline = self.container.schedule(self.timeout, Timer(self.on_deadline))
        self._ctrl_c_check = self.container.schedule(CTRL_C_POLL, Timer(self.check_ctrl_c))
        self.start(self.container, self.connection)

    def on_deadline(self) -> None:
        self._deadline = None
        self.finish(1, f"timeout after {self.timeout:g}s: {self.timed_out()}")

    def check_ctrl_c(self) -> None:
        """Ctrl-C only sets a flag; acting on it here, in the event loop, lets us close politely."""
        if self.interrupted:
            self._ctrl_c_check = None
            self.finish(130, "interrupted")
        elif self.container is not None:
            self._ctrl_c_check = self.container.schedule(CTRL_C_POLL, Timer(self.check_ctrl_c))

    def finish(self, code: int = 0, error: str | None = None) -> None:
        """Stop: print the error (if any), cancel the deadline and close the connection."""
        if self._done:
            return
        self._done = True
        self.exit_code = code
        if error:
            print(f"amqp_tool: {error}", file=sys.stderr)
        for timer in (self._deadline, self._ctrl_c_check):
            if timer is not None:
                timer.cancel()
        if self.connection is not None and self.connection.state & Endpoint.LOCAL_ACTIVE:
            self.connection.close()  # the event loop ends once the router has closed its side too

    def on_transport_error(self, event: Event) -> None:
        self.on_disconnected(event)

    def on_connection_error(self, event: Event) -> None:
        cond = event.connection.remote_condition
        self.finish(1, f"connection closed by the router: {describe_condition(cond)}")

    def on_session_error(self, event: Event) -> None:
        self.finish(1, f"session closed by the router: {describe_condition(event.session.remote_condition)}")

    def on_link_error(self, event: Event) -> None:
        link = event.link
        address = (link.target if link.is_sender else link.source).address or "(no address)"
        self.finish(1, f"link {address} closed by the router: {describe_condition(link.remote_condition)}")

    def on_disconnected(self, event: Event) -> None:
        cond = event.transport.condition  # e.g. "Connection refused to all addresses"
        self.finish(1, f"{self.url}: {cond.description if cond else 'connection lost'}")


class Info(Client):
    """``info``: print who the router says it is."""

    def on_connection_opened(self, event: Event) -> None:
        conn = event.connection
        props = {str(k): v for k, v in (conn.remote_properties or {}).items()}
        print(f"container-id: {conn.remote_container}")
        for key in ("product", "version"):
            print(f"{key}: {props.pop(key, '(not sent)')}")
        for key, value in sorted(props.items()):
            print(f"{key}: {value}")
        caps = ", ".join(str(c) for c in conn.remote_offered_capabilities or ()) or "(none)"
        print(f"offered-capabilities: {caps}")
        self.finish(0)


class Send(Client):
    """``send``: send N messages as credit allows, print each outcome."""

    def __init__(self, url: str, address: str, count: int, body: str, presettled: bool,
                 timeout: float) -> None:
        super().__init__(url, timeout)
        self.address, self.count, self.body, self.presettled = address, count, body, presettled
        self.sent = self.settled = 0

    def start(self, container: Container, connection: Connection) -> None:
        options = AtMostOnce() if self.presettled else None
        container.create_sender(connection, self.address, options=options)

    def on_link_opened(self, event: Event) -> None:
        if event.sender.credit == 0:
            print("waiting for credit...")  # the router grants credit once a consumer is attached

    def on_sendable(self, event: Event) -> None:
        sender: Sender = event.sender
        while sender.credit > 0 and self.sent < self.count:
            self.sent += 1
            n = self.sent
            sender.send(Message(body=self.body.replace("{n}", str(n))), tag=str(n))
            if self.presettled:  # AtMostOnce: settled on sending, no outcome will come back
                print(f"#{n} SENT presettled")
                self.settled += 1
        if sender.drain_mode:  # the router asked for unused credit back
            sender.drained()
        if self.settled == self.count:
            self.finish(0)

    # MessagingHandler calls one of these when the router passes a consumer's outcome back.
    def on_accepted(self, event: Event) -> None:
        self.outcome(event.delivery)

    def on_rejected(self, event: Event) -> None:
        self.outcome(event.delivery)

    def on_released(self, event: Event) -> None:  # RELEASED or MODIFIED
        self.outcome(event.delivery)

    def outcome(self, delivery: Delivery) -> None:
        """Print the outcome of message number ``delivery.tag``; stop after the last one."""
        print(f"#{delivery.tag} {describe_outcome(delivery)}")
        self.settled += 1
        if self.settled == self.count:
            self.finish(0)

    def timed_out(self) -> str:
        return f"{self.settled} of {self.count} messages settled ({self.sent} sent)"


class Recv(Client):
    """``recv``: print message bodies and answer each with the chosen outcome."""

    def __init__(self, url: str, address: str, count: int, credit: int, outcome: str) -> None:
        super().__init__(url)
        self.address, self.count, self.credit, self.outcome = address, count, credit, outcome
        self.received = 0

    def start(self, container: Container, connection: Connection) -> None:
        container.create_receiver(connection, self.address)

    def on_link_opened(self, event: Event) -> None:
        if event.receiver is not None:  # (rpc-server also opens a sender)
            self.top_up(event.receiver)

    def top_up(self, receiver: Receiver) -> None:
        """Keep ``--credit`` messages' worth of credit out, but never ask for more than --count."""
        wanted = self.credit if self.count == 0 else min(self.credit, self.count - self.received)
        if receiver.credit < wanted:
            receiver.flow(wanted - receiver.credit)

    def on_message(self, event: Event) -> None:
        print(show(event.message.body))
        settle_with(event.delivery, self.outcome)
        self.received += 1
        if self.count and self.received >= self.count:
            self.finish(0)
        else:
            self.top_up(event.receiver)


class RpcServer(Recv):
    """``rpc-server``: reply ``echo: <body>`` to each request's reply_to via the anonymous relay."""

    def __init__(self, url: str, address: str, count: int, credit: int) -> None:
        super().__init__(url, address, count, credit, "accept")
        self.replies: list[Message] = []  # waiting for credit on the relay link
        self.relay: Sender | None = None
        self.served = 0

    def start(self, container: Container, connection: Connection) -> None:
        super().start(container, connection)
        self.relay = container.create_sender(connection, None)  # no target: anonymous relay

    def on_message(self, event: Event) -> None:
        request: Message = event.message
        if not request.reply_to:
            print(f"request without reply_to rejected: {show(request.body)}")
            settle_with(event.delivery, "reject")
            self.top_up(event.receiver)
            return
        self.received += 1
        print(f"#{self.received} {show(request.body)} (id {request.id}, reply to {request.reply_to})")
        body = f"echo: {show(request.body)}"
        self.replies.append(Message(address=request.reply_to, correlation_id=request.id, body=body))
        settle_with(event.delivery, "accept")
        self.send_replies()
        if not self.count or self.received < self.count:
            self.top_up(event.receiver)

    def on_sendable(self, event: Event) -> None:
        self.send_replies()

    def send_replies(self) -> None:
        while self.replies and self.relay is not None and self.relay.credit > 0:
            self.relay.send(self.replies.pop(0))

    def on_accepted(self, event: Event) -> None:
        self.reply_done(event.delivery)

    def on_rejected(self, event: Event) -> None:
        self.reply_done(event.delivery)

    def on_released(self, event: Event) -> None:  # RELEASED or MODIFIED
        self.reply_done(event.delivery)

    def reply_done(self, delivery: Delivery) -> None:
        """A reply got its outcome: that request is served."""
        if delivery.remote_state != Delivery.ACCEPTED:
            print(f"reply {describe_outcome(delivery)}")
        self.served += 1
        if self.count and self.served >= self.count:
            self.finish(0)


class RpcCall(Client):
    """``rpc-call``: send N requests one after the other, print each reply and its round-trip time."""

    def __init__(self, url: str, address: str, text: str, count: int, timeout: float) -> None:
        super().__init__(url, timeout, prefetch=10, auto_accept=True)
        self.address, self.text, self.count = address, text, count
        self.reply_to: str | None = None
        self.sender: Sender | None = None
        self.sent = self.replies = 0
        self.sent_at = 0.0

    def start(self, container: Container, connection: Connection) -> None:
        # A dynamic source: the router makes up a unique address for our replies.
        container.create_receiver(connection, None, dynamic=True)

    def on_link_opened(self, event: Event) -> None:
        if event.receiver is not None:
            self.reply_to = event.receiver.remote_source.address
            print(f"reply-to: {self.reply_to}")
            self.sender = event.container.create_sender(event.connection, self.address)
        elif event.sender.credit == 0:
            print("waiting for credit...")  # no rpc-server attached to ADDRESS yet

    def on_sendable(self, event: Event) -> None:
        self.send_next()

    def send_next(self) -> None:
        """Send the next request if the previous one was answered and there is credit."""
        waiting_for_reply = self.sent > self.replies
        if self.sender is None or self.sender.credit == 0 or waiting_for_reply or self.sent == self.count:
            return
        self.sent += 1
        self.sent_at = time.monotonic()
        self.sender.send(Message(id=f"req-{self.sent}", reply_to=self.reply_to, body=self.text))

    def on_rejected(self, event: Event) -> None:
        self.finish(1, f"request #{self.sent} {describe_outcome(event.delivery)}")

    def on_released(self, event: Event) -> None:
        self.finish(1, f"request #{self.sent} {describe_outcome(event.delivery)}")

    def on_message(self, event: Event) -> None:
        reply: Message = event.message
        expected = f"req-{self.sent}"
        if reply.correlation_id != expected:
            print(f"ignored reply with correlation_id {reply.correlation_id!r} (expected {expected!r})")
            return
        self.replies += 1
        rtt_ms = (time.monotonic() - self.sent_at) * 1000
        print(f"#{self.replies} {show(reply.body)} ({rtt_ms:.1f} ms)")
        if self.replies == self.count:
            self.finish(0)
        else:
            self.send_next()

    def timed_out(self) -> str:
        return f"{self.replies} of {self.count} replies received"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="amqp_tool.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"router to connect to (default {DEFAULT_URL})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def positive(text: str) -> int:
        n = int(text)
        if n < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, not {n}")
        return n

    def not_negative(text: str) -> int:
        n = int(text)
        if n < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, not {n}")
        return n

    timeout_help = "give up (exit 1) after S seconds; 0 = wait forever (default)"

    sub.add_parser("info", help="print the router's container id, product, version and capabilities")

    p = sub.add_parser("send", help="send messages and print their outcomes")
    p.add_argument("address")
    p.add_argument("--count", type=positive, default=1, help="messages to send (default 1)")
    p.add_argument("--body", default="hello {n}", help="message body; {n} becomes the message number "
                   "(default 'hello {n}')")
    p.add_argument("--presettled", action="store_true", help="send presettled (at most once, no outcomes)")
    p.add_argument("--timeout", type=float, default=0.0, metavar="S", help=timeout_help)

    p = sub.add_parser("recv", help="print messages and answer each with an outcome")
    p.add_argument("address")
    p.add_argument("--count", type=not_negative, default=0, help="exit after N messages (default 0: run "
                   "until Ctrl-C)")
    p.add_argument("--credit", type=positive, default=10, metavar="C", help="credit window (default 10)")
    p.add_argument("--outcome", choices=("accept", "reject", "release", "modify"), default="accept",
                   help="answer to every message (default accept)")

    p = sub.add_parser("rpc-server", help="answer requests with 'echo: <body>'")
    p.add_argument("address")
    p.add_argument("--count", type=not_negative, default=0, help="exit after serving N requests "
                   "(default 0: run until Ctrl-C)")
    p.add_argument("--credit", type=positive, default=10, metavar="C", help="credit window (default 10)")

    p = sub.add_parser("rpc-call", help="send requests and print the replies")
    p.add_argument("address")
    p.add_argument("text", help="request body")
    p.add_argument("--count", type=positive, default=1, help="requests to send, one at a time (default 1)")
    p.add_argument("--timeout", type=float, default=0.0, metavar="S", help=timeout_help)

    return parser.parse_args(argv)


def make_client(args: argparse.Namespace) -> Client:
    """The handler for the chosen subcommand."""
    if args.command == "info":
        return Info(args.url)
    if args.command == "send":
        return Send(args.url, args.address, args.count, args.body, args.presettled, args.timeout)
    if args.command == "recv":
        return Recv(args.url, args.address, args.count, args.credit, args.outcome)
    if args.command == "rpc-server":
        return RpcServer(args.url, args.address, args.count, args.credit)
    return RpcCall(args.url, args.address, args.text, args.count, args.timeout)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; return the exit code."""
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # show each line at once, even through a pipe
    client = make_client(args)

    def on_ctrl_c(signum: int, frame: object) -> None:
        if client.interrupted:  # second Ctrl-C: stop without waiting for the router
            raise KeyboardInterrupt
        client.interrupted = True

    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        Container(client).run()
    except KeyboardInterrupt:
        print("amqp_tool: interrupted", file=sys.stderr)
        return 130
    return client.exit_code


if __name__ == "__main__":
    sys.exit(main())
