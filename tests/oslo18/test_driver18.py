"""meshrouter's oslo.messaging driver under oslo.messaging 18.3.1 (agents: tests/oslo18/agent.py): the
driver API through the four-node mesh, failover, TLS, SASL, options, and faults. Each agent is its own
process (its own transports, connections and driver), on the node its URL names.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.meshes import wait_address
from tests.support.nodes import MESH_RULES, kill9
from tests.support.oslo18 import node_url as url
from tests.support.pki import make_pki
from tests.support.ports import listener_urls
from tests.support.security import set_password
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)
RPC = "openstack.org/om/rpc"
SLACK = 1.0          # the driver's deadlines are timers on its loop: a call ends within ~10 ms of them


def anycast(topic: str) -> str:
    return f"{RPC}/anycast/openstack/{topic}"


def test_the_amqp_entry_point_is_meshrouters_driver_in_18_and_14x_own_driver_in_the_main_venv(node, agents):
    a = agents()
    a.cmd("transport", name="t", url=url(node))
    assert a.cmd("driver", transport="t")["driver"] == "router.oslo.driver.AmqpDriver"
    assert a.cmd("driver", transport="t")["oslo"] == "18.3.1"
    from stevedore import driver  # the main venv: oslo.messaging 14.9.3 keeps its own amqp driver

    mgr = driver.DriverManager("oslo.messaging.drivers", "amqp", invoke_on_load=False)
    assert mgr.driver.__module__ == "oslo_messaging._drivers.impl_amqp1", mgr.driver


def test_call_cast_fanout_and_direct_through_the_mesh(mesh4, agents):
    servers = {n: agents(f"srv{n}") for n in ("A", "B", "D")}
    for n, a in servers.items():
        a.cmd("transport", name="t", url=url(mesh4[n]))
        a.cmd("server", name="s", transport="t", topic="api", server=f"srv{n}")
    wait_address(mesh4.values(), anycast("api"), ["A", "B", "D"])
    c = agents("caller")
    c.cmd("transport", name="t", url=url(mesh4["C"]))
    replies = [c.cmd("call", transport="t", topic="api", method="echo", args={"text": f"c{i}"})["reply"]
               for i in range(12)]
    assert [r["text"] for r in replies] == [f"c{i}" for i in range(12)]
    assert len({r["server"] for r in replies}) >= 2, replies          # balanced over the servers
    direct = c.cmd("call", transport="t", topic="api", server="srvB", method="echo", args={"text": "b"})
    assert direct["reply"] == {"server": "srvB", "text": "b"}
    failed = c.cmd("call", transport="t", topic="api", method="fail", args={"text": "bad"})
    assert failed["exc"] == "ValueError" and "boom from srv" in failed["error"], failed
    for i in range(5):
        c.cmd("cast", transport="t", topic="api", method="note", args={"text": f"cast{i}"})
        c.cmd("cast", transport="t", topic="api", fanout=True, method="note", args={"text": f"fan{i}"})

    def notes():
        return {n: [e[1] for e in a.cmd("events", name="s")["events"] if e[0] == "note"]
                for n, a in servers.items()}

    wait_until(lambda: sum(len(v) for v in notes().values()) >= 5 + 15, 10, lambda: f"casts: {notes()}")
    time.sleep(0.3)
    got = notes()
    casts = sorted(t for v in got.values() for t in v if t.startswith("cast"))
    assert casts == [f"cast{i}" for i in range(5)], got                 # each cast once, by one server
    for n, v in got.items():                                             # each fanout by every server
        assert sorted(t for t in v if t.startswith("fan")) == [f"fan{i}" for i in range(5)], (n, got)


def test_call_monitor_timeout_heartbeats_keep_a_long_call_alive(mesh4, agents):
    s = agents("srv")
    s.cmd("transport", name="t", url=url(mesh4["B"]))
    s.cmd("server", name="s", transport="t", topic="long", server="srv")
    wait_address(mesh4.values(), anycast("long"), ["B"])
    c = agents("caller")
    c.cmd("transport", name="t", url=url(mesh4["D"]))
    plain = c.cmd("call", transport="t", topic="long", method="slow", args={"seconds": 3}, timeout=1)
    assert plain["exc"] == "MessagingTimeout" and plain["elapsed"] < 1 + SLACK, plain
    watched = c.cmd("call", transport="t", topic="long", method="slow", args={"seconds": 4}, timeout=60,
                    monitor=2)
    assert watched.get("reply") == {"server": "srv", "slept": 4}, watched


def test_notifications_listeners_pools_batches_and_requeue(mesh4, agents):
    lst = agents("listeners")
    lst.cmd("transport", name="n", url=url(mesh4["A"]), kind="notify",
            amqp={"notification_pools": ["audit"]})
    lst.cmd("listener", name="plain", transport="n", topics=["events"])
    lst.cmd("listener", name="pool", transport="n", topics=["events"], pool="audit")
    lst.cmd("listener", name="batch", transport="n", topics=["bulk"], batch_size=10, batch_timeout=1)
    lst.cmd("listener", name="requeue", transport="n", topics=["retry"], requeue=True)
    nt = agents("notifier")
    nt.cmd("transport", name="n", url=url(mesh4["C"]), kind="notify", amqp={"notification_pools": ["audit"]})
    for topic in ("events", "bulk", "retry"):
        nt.cmd("notifier", name=topic, transport="n", topics=[topic], publisher=f"pub-{topic}")
    for i in range(3):
        nt.cmd("notify", notifier="events", priority="info", event_type="e.info", payload={"i": i})
    nt.cmd("notify", notifier="events", priority="error", event_type="e.error", payload={"i": 99})
    for i in range(25):
        nt.cmd("notify", notifier="bulk", priority="info", event_type="bulk", payload=i)
    nt.cmd("notify", notifier="retry", priority="warn", event_type="again", payload="once")

    def events(name):
        return lst.cmd("events", name=name)["events"]

    wait_until(lambda: len(events("plain")) == 4 and len(events("pool")) == 4, 10,
               lambda: f"plain {events('plain')} pool {events('pool')}")
    for name in ("plain", "pool"):        # the pool got its own copy of each
        assert sorted((e[0], e[3]["i"]) for e in events(name)) == \
            [("error", 99), ("info", 0), ("info", 1), ("info", 2)], events(name)
    wait_until(lambda: sum(e[2] for e in events("batch")) == 25, 10, lambda: f"batches {events('batch')}")
    sizes = [e[2] for e in events("batch")]
    assert max(sizes) == 10 and sorted(p for e in events("batch") for p in e[3]) == list(range(25)), sizes
    wait_until(lambda: events("requeue"), 10, "the requeued notification handled on redelivery")
    assert events("requeue") == [["warn", "pub-retry", "again", "once"]]
    time.sleep(0.5)
    assert len(events("plain")) == 4 and len(events("requeue")) == 1      # nothing twice
    # a pool the notifiers do not send to is refused, not silently starved
    out = lst.cmd("listener", name="bad", transport="n", topics=["events"], pool="nobody", check=False)
    assert not out["ok"] and "notification_pools" in out["error"], out


def test_call_to_an_unserved_topic_raises_messaging_timeout_in_time(node, agents):
    c = agents()
    c.cmd("transport", name="t", url=url(node))
    out = c.cmd("call", transport="t", topic="nobody-serves-this", method="echo", args={"text": "x"},
                timeout=2)
    assert out["exc"] == "MessagingTimeout" and 2 - 0.05 <= out["elapsed"] <= 2 + SLACK, out
    assert "openstack.org/om/rpc/anycast/openstack/nobody-serves-this" in out["error"], out


def test_server_dying_mid_call_gives_messaging_timeout(mesh4, agents):
    s = agents("victim")
    s.cmd("transport", name="t", url=url(mesh4["A"]))
    s.cmd("server", name="s", transport="t", topic="victim", server="v")
    wait_address(mesh4.values(), anycast("victim"), ["A"])
    c = agents("caller")
    c.cmd("transport", name="t", url=url(mesh4["C"]))
    c.cmd("call_async", key="k", transport="t", topic="victim", method="slow", args={"seconds": 60},
          timeout=4)
    s.event(lambda e: e.get("method") == "slow", 5, "the request inside the endpoint")
    s.kill()
    out = c.cmd("wait", key="k", timeout=15)
    assert not out.get("hung") and out["exc"] == "MessagingTimeout" and out["elapsed"] <= 4 + SLACK, out


def test_failover_to_the_next_host_when_a_node_dies_mid_call(mesh4, agents):
    """The caller's URL names A and B; the one it is on dies while a call is in flight: that call completes
    or raises
    (never hangs), and the next calls go through B."""
    s = agents("srv")
    # its reply to the dead connection's reply address waits for credit that never comes: 5 s, not 30
    s.cmd("transport", name="t", url=url(mesh4["D"]), amqp={"default_reply_timeout": 5})
    s.cmd("server", name="s", transport="t", topic="fo", server="srv")
    wait_address(mesh4.values(), anycast("fo"), ["D"])
    a, b = mesh4["A"], mesh4["B"]
    c = agents("caller")
    two = f"amqp://{a.host}:{a.port},{b.host}:{b.port}/"
    c.cmd("transport", name="t", url=two, amqp={"connection_retry_interval": 1})
    up = c.cmd("call", transport="t", topic="fo", method="echo", args={"text": "up"})
    assert up["reply"]["text"] == "up", up
    first = c.cmd("host", transport="t")["host"]          # the first host is picked at random
    assert first in (f"{a.host}:{a.port}", f"{b.host}:{b.port}"), first
    victim, survivor = (a, b) if first == f"{a.host}:{a.port}" else (b, a)
    c.cmd("call_async", key="k", transport="t", topic="fo", method="slow", args={"seconds": 2}, timeout=10)
    s.event(lambda e: e.get("method") == "slow", 5, "the call inside the endpoint")
    kill9(victim)
    out = c.cmd("wait", key="k", timeout=20)
    assert not out.get("hung"), "the call hangs"
    assert out.get("reply") == {"server": "srv", "slept": 2} or out.get("exc") in (
        "MessageDeliveryFailure", "MessagingTimeout"), out
    after = c.cmd("call", transport="t", topic="fo", method="echo", args={"text": "after"}, timeout=15)
    assert after.get("reply", {}).get("text") == "after", after
    assert c.cmd("host", transport="t")["host"] == f"{survivor.host}:{survivor.port}"


def test_wrong_password_gives_an_authentication_error_naming_the_host(node_factory, agents, tmp_path):
    users = tmp_path / "users"
    set_password(users, "nova", "right-password")
    n = node_factory("A", rules=MESH_RULES, extra={"listeners": [
        {"host": "127.0.0.1", "port": 0, "sasl": {"mechanisms": ["PLAIN"], "users_file": str(users),
                                                  "allow_plain_without_tls": True}}]})
    good = agents("good")
    good.cmd("transport", name="t", url=url(n, "nova", "right-password"))
    good.cmd("server", name="s", transport="t", topic="authn", server="s1")
    bad = agents("bad")
    bad.cmd("transport", name="t", url=url(n, "nova", "wrong"))
    t0 = time.monotonic()
    out = bad.cmd("call", transport="t", topic="authn", method="echo", args={"text": "x"}, timeout=20)
    assert out["exc"] == "AuthenticationFailure", out
    assert f"{n.host}:{n.port}" in out["error"] and "nova" in out["error"], out
    assert time.monotonic() - t0 < 10, "the call waited for its timeout instead of failing"
    ok = good.cmd("call", transport="t", topic="authn", method="echo", args={"text": "y"})
    assert ok["reply"]["text"] == "y", ok


def test_policy_forbidden_address_gives_an_error_naming_it(node_factory, agents):
    policy = {"default_group": "deny", "groups": {"om": {
        "users": ["anonymous"],
        "sources": ["openstack.org/om/rpc/anycast/openstack/forbidden", "openstack.org/om/rpc/unicast/#",
                    "openstack.org/om/rpc/multicast/#"],
        "targets": ["openstack.org/om/rpc/anycast/openstack/allowed", "openstack.org/om/rpc/unicast/#",
                    "openstack.org/om/rpc/multicast/#"],
        "allow_dynamic_source": True, "allow_anonymous_sender": False, "management": "none"}}}
    n = node_factory("A", rules=MESH_RULES, extra={"policy": policy})
    s = agents("srv")
    s.cmd("transport", name="t", url=url(n))
    s.cmd("server", name="s", transport="t", topic="forbidden", server="s1")
    c = agents("caller")
    c.cmd("transport", name="t", url=url(n))
    out = c.cmd("call", transport="t", topic="forbidden", method="echo", args={"text": "x"}, timeout=10)
    assert out["exc"] == "Failure" and "openstack.org/om/rpc/anycast/openstack/forbidden" in out["error"], out
    assert "unauthorized" in out["error"], out
    # a server that may not subscribe: listen() raises, naming the address
    s2 = agents("srv2")
    s2.cmd("transport", name="t", url=url(n))
    refused = s2.cmd("server", name="s", transport="t", topic="x", server="s2", check=False)
    assert not refused["ok"] and "openstack.org/om/rpc/anycast/openstack/x" in refused["error"], refused


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_with_ca_file_and_client_certificate(node_factory, agents, pki):
    listener = {"host": "127.0.0.1", "port": 0,
                "tls": {"cert": pki.server.cert, "key": pki.server.key, "ca": pki.ca,
                        "require_client_cert": True}}
    n = node_factory("A", rules=MESH_RULES, extra={"listeners": [{"host": "127.0.0.1", "port": 0}, listener]})
    tls_port = listener_urls(n)[1].rsplit(":", 1)[1]
    tls_url = f"amqps://localhost:{tls_port}/"
    opts = {"ssl_ca_file": pki.ca, "ssl_cert_file": pki.client.cert, "ssl_key_file": pki.client.key}
    a = agents("tls")
    a.cmd("transport", name="t", url=tls_url, amqp=opts)
    a.cmd("server", name="s", transport="t", topic="tls", server="s1")
    out = a.cmd("call", transport="t", topic="tls", method="echo", args={"text": "secure"})
    assert out["reply"] == {"server": "s1", "text": "secure"}, out
    # a CA that did not sign the node's certificate: nothing gets through
    wrong = agents("wrong-ca")
    wrong.cmd("transport", name="t", url=tls_url, amqp={**opts, "ssl_ca_file": pki.wrong_ca})
    out = wrong.cmd("call", transport="t", topic="tls", method="echo", args={"text": "x"}, timeout=3)
    assert out["exc"] == "MessagingTimeout" and "not connected" in out["error"], out


def test_unknown_options_are_refused_with_their_names(node, agents, tmp_path: Path):
    a = agents()
    out = a.cmd("transport", name="t", url=url(node) + "?idle_timout=5", check=False)
    assert not out["ok"] and "idle_timout" in out["error"], out
    conf = tmp_path / "nova.conf"
    conf.write_text("[oslo_messaging_amqp]\nidle_timeout = 5\nrabbit_ha_queues = true\n")
    out = a.cmd("transport", name="t", url=url(node), config_file=str(conf), check=False)
    assert not out["ok"] and "rabbit_ha_queues" in out["error"] and "oslo_messaging_amqp" in out["error"], out
    b = agents()
    out = b.cmd("transport", name="t", url=url(node), amqp={"pre_settled": ["rpc-cast", "everything"]},
                check=False)
    assert not out["ok"] and "everything" in out["error"], out


def test_a_server_stopped_after_its_transport_was_cleaned_up_opens_no_new_connection(node, agents):
    a = agents()
    a.cmd("transport", name="t", url=url(node))
    a.cmd("server", name="s", transport="t", topic="order", server="s1")
    a.cmd("listener", name="l", transport="t", topics=["order-events"])
    out = a.cmd("cleanup_transports_first")
    assert out["threads"] == [], out
