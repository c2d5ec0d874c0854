"""Logging a person can read: one line per event, per-module levels, no flood on repeated failures."""

from __future__ import annotations

import logging
import re

from router.logs import LogOnce
from tests.support.clients import Client
from tests.support.ports import free_port
from tests.support.waiting import pump_for

LINE_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def test_unreachable_peer_is_logged_once_not_every_retry(node_factory):
    n = node_factory("A", extra={"connectors": [{"host": "127.0.0.1", "port": free_port()}],
                                 "router": {"hello_interval": 0.2, "hello_max_age": 0.6}})
    pump_for(3.0)           # retries every 0.1 s doubling to 5 s: 5 or more attempts
    text = n.stderr_tail(1000)
    lines = text.splitlines()
    assert sum("cannot connect" in ln for ln in lines) == 1, text
    assert all(LINE_RE.match(ln) for ln in lines), text


def test_per_module_levels(node_factory):
    n = node_factory("A", log_level="warning", extra={"node": {"log_levels": {"router.management": "debug"}}})
    c = Client(n.url)
    rcv = c.receiver(dynamic=True, credit=10)
    anon = c.sender(None)
    # a management reply to an address that vanished: logged at debug by router.management only
    anon.send({}, address="$management", reply_to=rcv.address + "-gone",
              properties={"operation": "QUERY", "type": "node"}).wait()
    pump_for(0.5)
    lines = n.stderr_tail(1000).splitlines()
    assert any("DEBUG router.management" in ln for ln in lines), lines
    assert not any(f" {lvl} router.{pkg}" in ln for ln in lines for lvl in ("INFO", "DEBUG")
               for pkg in ("node", "adapter")), lines
    assert all(LINE_RE.match(ln) for ln in lines), lines


def test_log_once_suppresses_repeats_until_reset(caplog):
    log = logging.getLogger("tests.logonce")
    once = LogOnce(log, max_keys=2)
    with caplog.at_level(logging.WARNING, logger="tests.logonce"):
        for _ in range(5):
            once.once("peer-1", logging.WARNING, "cannot reach %s", "peer-1")
        once.reset("peer-1")
        once.once("peer-1", logging.WARNING, "cannot reach %s", "peer-1")
        for k in ("a", "b", "c"):          # beyond max_keys the oldest key is forgotten
            once.once(k, logging.WARNING, "key %s", k)
    assert [r.getMessage() for r in caplog.records] == [
        "cannot reach peer-1", "cannot reach peer-1", "key a", "key b", "key c"]
