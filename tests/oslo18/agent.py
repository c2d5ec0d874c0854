"""An oslo.messaging 18.3.1 process that the tests drive: run by .venv-oslo18's interpreter, so the driver
under
test is the ``amqp`` entry point of the meshrouter installed there (``pip install .[oslo]``).

    .venv-oslo18/bin/python tests/oslo18/agent.py

Standalone (imports nothing of the checkout). Reads one JSON command per line on stdin and answers each with
one JSON line on stdout carrying the command's ``id`` (``{"id": .., "ok": true, ...}`` or ``{"id": ..,
"ok": false, "exc": TYPE, "error": TEXT}``); commands run one after the other, except ``call_async``.

Commands (``cmd``): ``transport`` (name, url, kind rpc|notify, amqp {option: value}), ``driver``,
``server`` (name, transport, topic, server, exchange, executor), ``call`` / ``call_async`` + ``wait``
(transport, topic, server, fanout, exchange, method, args, timeout, monitor), ``cast``, ``notifier``
(name, transport, topics, publisher), ``notify`` (notifier, priority, event_type, payload), ``listener``
(name, transport, topics, pool, batch_size, batch_timeout, requeue), ``events`` (name), ``stop`` (name),
``cleanup``, ``exit``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import warnings
from importlib.metadata import version

warnings.simplefilter("ignore")

import oslo_messaging as om  # noqa: E402
from oslo_config import cfg  # noqa: E402

from router.oslo import options  # noqa: E402 - the installed meshrouter's

OUT = threading.Lock()


def say(obj: dict) -> None:
    with OUT:
        sys.stdout.write(json.dumps(obj, default=str) + "\n")
        sys.stdout.flush()


class Endpoint:
    """RPC endpoint: echo, note (casts), fail, slow; every call recorded (and announced with ``busy``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[list] = []
        self.lock = threading.Lock()

    def _record(self, method: str, arg) -> None:
        with self.lock:
            self.calls.append([method, arg])
        say({"event": "busy", "server": self.name, "method": method})

    def echo(self, ctxt, text):
        self._record("echo", text)
        return {"server": self.name, "text": text}

    def note(self, ctxt, text):
        self._record("note", text)

    def fail(self, ctxt, text):
        self._record("fail", text)
        raise ValueError(f"boom from {self.name}: {text}")

    def slow(self, ctxt, seconds):
        self._record("slow", seconds)
        time.sleep(seconds)
        return {"server": self.name, "slept": seconds}


class NotifyEndpoint:
    """Notification endpoint for every priority; ``requeue``: the first sight of each message is
    requeued (handled on its redelivery)."""

    def __init__(self, name: str, requeue: bool, batch: bool) -> None:
        self.name = name
        self.events: list[list] = []
        self.seen: set[str] = set()
        self.requeue = requeue
        self.batch = batch
        self.lock = threading.Lock()
        for prio in ("audit", "debug", "info", "warn", "error", "critical", "sample"):
            setattr(self, prio, self._handler(prio))

    def _handler(self, prio: str):
        def single(ctxt, publisher_id, event_type, payload, metadata):
            with self.lock:
                key = f"{event_type}:{json.dumps(payload, sort_keys=True, default=str)}"
                if self.requeue and key not in self.seen:
                    self.seen.add(key)
                    return om.NotificationResult.REQUEUE
                self.events.append([prio, publisher_id, event_type, payload])
            return om.NotificationResult.HANDLED

        def batch(messages):
            with self.lock:
                self.events.append([prio, "batch", len(messages), [m["payload"] for m in messages]])

        return batch if self.batch else single


class Agent:
    def __init__(self) -> None:
        self.conf = cfg.CONF
        self.conf([], project="meshrouter-oslo18-agent", default_config_files=[], default_config_dirs=[])
        self.transports: dict[str, om.Transport] = {}
        self.servers: dict[str, tuple] = {}
        self.notifiers: dict[str, om.Notifier] = {}
        self.pending: dict[str, threading.Thread] = {}
        self.results: dict[str, dict] = {}

    # ---- commands
    def transport(self, c: dict) -> dict:
        conf = self.conf
        options.register(conf)             # so overrides can be set before the driver reads them
        if c.get("config_file"):
            conf(["--config-file", c["config_file"]], project="meshrouter-oslo18-agent")
        for k, v in (c.get("amqp") or {}).items():
            conf.set_override(k, v, group="oslo_messaging_amqp")
        make = om.get_notification_transport if c.get("kind") == "notify" else om.get_rpc_transport
        self.transports[c["name"]] = make(conf, url=c["url"])
        return {}

    def driver(self, c: dict) -> dict:
        d = self.transports[c["transport"]]._driver
        return {"driver": f"{type(d).__module__}.{type(d).__name__}", "oslo": version("oslo.messaging")}

    def host(self, c: dict) -> dict:
        ctrl = self.transports[c["transport"]]._driver._ctrl      # router.oslo internals, for the tests
        s = ctrl.session if ctrl is not None else None
        return {"host": str(s.host) if s is not None and s.ready and not s.dead else None}

    def _client(self, c: dict):
        target = om.Target(topic=c["topic"], server=c.get("server"), fanout=c.get("fanout", False),
                           exchange=c.get("exchange"))
        client = om.get_rpc_client(self.transports[c["transport"]], target, timeout=c.get("timeout", 10))
        if c.get("monitor"):
            client = client.prepare(call_monitor_timeout=c["monitor"])
        return client

    def call(self, c: dict) -> dict:
        t0 = time.monotonic()
        try:
            reply = self._client(c).call({"agent": "oslo18"}, c["method"], **(c.get("args") or {}))
        except Exception as e:   # noqa: BLE001 - reported to the test
            return {"exc": type(e).__name__, "error": str(e), "elapsed": time.monotonic() - t0}
        return {"reply": reply, "elapsed": time.monotonic() - t0}

    def call_async(self, c: dict) -> dict:
        key = c["key"]

        def run() -> None:
            self.results[key] = self.call(c)

        th = threading.Thread(target=run, name=f"agent-call-{key}", daemon=True)
        self.pending[key] = th
        th.start()
        return {}

    def wait(self, c: dict) -> dict:
        th = self.pending.pop(c["key"])
        th.join(c.get("timeout", 30))
        if th.is_alive():
            return {"hung": True}
        return self.results.pop(c["key"])

    def cast(self, c: dict) -> dict:
        self._client(c).cast({"agent": "oslo18"}, c["method"], **(c.get("args") or {}))
        return {}

    def server(self, c: dict) -> dict:
        ep = Endpoint(c["server"])
        target = om.Target(topic=c["topic"], server=c["server"], exchange=c.get("exchange"))
        srv = om.get_rpc_server(self.transports[c["transport"]], target, [ep],
                                executor=c.get("executor", "threading"))
        srv.start()
        self.servers[c["name"]] = (srv, ep)
        return {}

    def notifier(self, c: dict) -> dict:
        self.notifiers[c["name"]] = om.Notifier(self.transports[c["transport"]], publisher_id=c["publisher"],
                                                driver="messagingv2", topics=c["topics"])
        return {}

    def notify(self, c: dict) -> dict:
        n = self.notifiers[c["notifier"]]
        getattr(n, c.get("priority", "info"))({"agent": "oslo18"}, c["event_type"], c["payload"])
        return {}

    def listener(self, c: dict) -> dict:
        batch = c.get("batch_size") is not None
        ep = NotifyEndpoint(c["name"], c.get("requeue", False), batch)
        targets = [om.Target(topic=t) for t in c["topics"]]
        transport = self.transports[c["transport"]]
        if batch:
            lst = om.get_batch_notification_listener(transport, targets, [ep], executor="threading",
                                                     pool=c.get("pool"), batch_size=c["batch_size"],
                                                     batch_timeout=c.get("batch_timeout", 1))
        else:
            lst = om.get_notification_listener(transport, targets, [ep], executor="threading",
                                               pool=c.get("pool"), allow_requeue=c.get("requeue", False))
        lst.start()
        self.servers[c["name"]] = (lst, ep)
        return {}

    def events(self, c: dict) -> dict:
        ep = self.servers[c["name"]][1]
        with ep.lock:
            return {"events": list(getattr(ep, "calls", None) or getattr(ep, "events", []))}

    def stop(self, c: dict) -> dict:
        srv, _ = self.servers.pop(c["name"])
        srv.stop()
        srv.wait()
        return {}

    def cleanup_transports_first(self, c: dict) -> dict:
        """The wrong order: transports cleaned up, then their servers stopped; the threads left."""
        for t in self.transports.values():
            t.cleanup()
        self.transports.clear()
        for name in list(self.servers):
            self.stop({"name": name})
        time.sleep(0.5)
        return {"threads": [t.name for t in threading.enumerate() if t is not threading.main_thread()
                            and not t.name.endswith("(send_loop)") and t.is_alive()]}

    def cleanup(self, c: dict) -> dict:
        for name in list(self.servers):
            self.stop({"name": name})
        for t in self.transports.values():
            t.cleanup()
        self.transports.clear()
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread()
                and not t.name.endswith("(send_loop)") and t.is_alive()]
        return {"threads": left}


def main() -> int:
    agent = Agent()
    say({"event": "ready"})
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        if c["cmd"] == "exit":
            break
        try:
            out = getattr(agent, c["cmd"])(c)
            say({"id": c.get("id"), "ok": True, **out})
        except Exception as e:   # noqa: BLE001 - reported to the test
            say({"id": c.get("id"), "ok": False, "exc": type(e).__name__, "error": str(e),
                 "trace": traceback.format_exc()[-3000:]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
