"""Each key of `policy:` with real clients through a two-node mesh (A with the users, B dialling A).

Users log in with PLAIN against the session's users file (alice, bob: tests/security/conftest.py) or as
anonymous. Every refusal is `amqp:unauthorized-access` with a description naming the group and the rule;
the policy is checked at the ingress node (the node the client is connected to).
"""

from __future__ import annotations

import re
import urllib.request

import pytest

from tests.support.authz import AuthClient, attached, local_address, mesh2, node, refused, urls
from tests.support.clients import Client, make_message
from tests.support.management import Requester
from tests.support.security import USERS
from tests.support.waiting import pump_for, wait_for

UNAUTHORIZED = "amqp:unauthorized-access"
METRICS_RE = re.compile(r"^listening: role=metrics url=(?P<url>http://\S+)$")


def plain(users_file, **more) -> dict:
    """A client listener where users log in with PLAIN (no TLS: tests only) or as anonymous."""
    return {"sasl": {"mechanisms": ["ANONYMOUS", "PLAIN"], "users_file": str(users_file),
                     "allow_plain_without_tls": True}, **more}


def login(url: str, user: str | None = None, **kw) -> AuthClient:
    return AuthClient(url, user=user, password=USERS.get(user or ""), **kw)


def test_groups_by_user_and_remote_host_and_default_group_deny_on_both_nodes(node_factory, users_file):
    policy = {"default_group": "deny", "groups": {
        "om": {"users": ["alice"]},
        "local": {"users": ["anonymous"], "remote_hosts": ["localhost"]}}}
    a, b = mesh2(node_factory, listeners=[plain(users_file, host="0.0.0.0")], policy=policy)
    for n in (a, b):
        url = urls(n)[0]
        port = url.rsplit(":", 1)[1]
        local = f"amqp://127.0.0.1:{port}"
        assert login(local, "alice").remote_open
        assert login(local).remote_open                          # anonymous from localhost
        bob = login(local, "bob", wait_open=False)
        cond = bob.wait_closed()
        assert cond.name == UNAUTHORIZED and "'bob'" in cond.description and "no group" in cond.description
        ip = local_address()
        if ip is not None:                                       # anonymous from another host: no group
            cond = login(f"amqp://{ip}:{port}", wait_open=False).wait_closed()
            assert cond.name == UNAUTHORIZED and ip in cond.description, cond
            assert login(f"amqp://{ip}:{port}", "alice").remote_open
    rows = {(r["vhost"], r["group"]): r for r in Requester(login(a.url)).query("policy")}
    assert rows[("default", "(none)")]["connectionsDenied"] == (2 if local_address() else 1)
    assert rows[("default", "om")]["connectionsOpened"] >= 1


def test_sources_and_targets_with_user_substitution(node_factory, users_file):
    policy = {"groups": {"owners": {"users": ["alice", "bob"], "sources": ["user/${user}/#", "shared/*"],
                                    "targets": ["user/#", "shared/*"]}}}
    a, b = mesh2(node_factory, listeners=[plain(users_file)], policy=policy)
    alice = login(a.url, "alice")
    bob = login(b.url, "bob")
    assert attached(alice.receiver("user/alice/inbox", wait=False))
    assert attached(alice.receiver("user/alice", wait=False))
    assert attached(alice.receiver("shared/news", wait=False))
    for source in ("user/bob/inbox", "user/alice.x/inbox", "shared/news/more", "other"):
        condition, description = refused(alice.receiver(source, wait=False))
        assert condition == UNAUTHORIZED, source
        assert description == f"policy: group 'owners' may not receive from {source!r} (sources)"
    inbox = bob.receiver("user/bob/inbox", credit=5)
    assert attached(inbox)
    snd = alice.sender("user/bob/inbox")                       # alice on A sends to bob's inbox on B
    snd.wait_credit()
    assert snd.send("for bob").wait().outcome == "ACCEPTED"
    wait_for(lambda: inbox.bodies == ["for bob"])
    condition, description = refused(alice.sender("other/place", wait=False))
    assert (condition, description) == (UNAUTHORIZED, "policy: group 'owners' may not send to 'other/place' "
                                                      "(targets)")


def test_anonymous_relay_is_checked_per_message_at_the_ingress_node(node_factory, users_file):
    policy = {"groups": {"om": {"users": ["alice", "bob"], "targets": ["openstack.org/om/#"]}}}
    a, b = mesh2(node_factory, listeners=[plain(users_file)], policy=policy)
    server = login(b.url, "bob")
    requests = server.receiver("openstack.org/om/rpc/x", credit=10)
    caller = login(a.url, "alice")
    replies = caller.receiver(dynamic=True, credit=10)
    relay = caller.sender(None)
    relay.wait_credit()
    wait_for(lambda: relay.send(make_message("probe", address="openstack.org/om/rpc/x")).wait().outcome
             == "ACCEPTED", what="the request address known at A")
    bad = relay.send(make_message("no", address="openstack.org/other"))
    assert bad.wait().outcome == "REJECTED"
    assert bad.condition.name == UNAUTHORIZED
    assert bad.condition.description == "policy: group 'om' may not send to 'openstack.org/other' (targets)"
    big = relay.send(make_message("x" * 60000, address="openstack.org/other"))     # streamed (> 1 frame)
    assert big.wait().outcome == "REJECTED" and big.condition.name == UNAUTHORIZED
    # replies go to reply addresses whatever the targets: bob answers through his anonymous relay on B
    answer = server.sender(None)
    answer.wait_credit()
    assert answer.send(make_message("reply", address=replies.address)).wait().outcome == "ACCEPTED"
    wait_for(lambda: replies.bodies == ["reply"])
    assert requests.bodies[-1] == "probe"


def test_dynamic_sources_and_anonymous_senders_can_be_forbidden(node_factory, users_file):
    policy = {"groups": {"fixed": {"users": ["alice"], "allow_dynamic_source": False,
                                   "allow_anonymous_sender": False},
                         "free": {"users": ["bob"]}}}
    a, _ = mesh2(node_factory, listeners=[plain(users_file)], policy=policy)
    alice = login(a.url, "alice")
    condition, description = refused(alice.receiver(dynamic=True, wait=False))
    assert (condition, description) == (UNAUTHORIZED, "policy: group 'fixed' may not use dynamic sources "
                                                      "(allow_dynamic_source: false)")
    condition, description = refused(alice.sender(None, wait=False))
    assert (condition, description) == (UNAUTHORIZED, "policy: group 'fixed' may not attach anonymous "
                                                      "senders (allow_anonymous_sender: false)")
    bob = login(a.url, "bob")
    assert attached(bob.receiver(dynamic=True, wait=False)) and attached(bob.sender(None, wait=False))


def test_link_session_and_message_size_limits_per_connection(node_factory, users_file):
    policy = {"groups": {"small": {"users": ["alice"], "max_senders": 2, "max_receivers": 2,
                                   "max_sessions": 2, "max_message_size": 1000}}}
    a, _ = mesh2(node_factory, listeners=[plain(users_file)], policy=policy)
    alice = login(a.url, "alice")
    receivers = [alice.receiver(f"balanced/r{i}", wait=False) for i in range(2)]
    assert all(attached(r) for r in receivers)
    condition, description = refused(alice.receiver("balanced/r2", wait=False))
    assert (condition, description) == (UNAUTHORIZED, "policy: group 'small' allows 2 receiver(s) per "
                                                      "connection (max_receivers)")
    senders = [alice.sender(f"balanced/r{i}", wait=False) for i in range(2)]
    assert all(attached(s) for s in senders)
    condition, description = refused(alice.sender("balanced/r2", wait=False))
    assert description == "policy: group 'small' allows 2 sender(s) per connection (max_senders)"
    receivers[0].close()
    senders[0].close()
    assert attached(alice.receiver("balanced/r3", wait=False))         # a place was given back
    assert attached(alice.sender("balanced/r3", wait=False))
    # the group's max_message_size (the listener has none): told in the attach, bigger transfers REJECTED
    snd = senders[1]
    assert snd.link.remote_max_message_size == 1000
    snd.wait_credit()
    t = snd.send(make_message("x" * 2000))
    assert t.wait().outcome == "REJECTED" and t.condition.name == "amqp:link:message-size-exceeded"
    # sessions: the client's first one counts; a second is fine, a third is ended by the node
    second = alice.conn.session()
    second.open()
    third = alice.conn.session()
    third.open()
    alice._write()
    wait_for(lambda: third.remote_condition is not None, what="the third session refused")
    assert third.remote_condition.name == UNAUTHORIZED
    assert third.remote_condition.description == ("policy: group 'small' allows 2 session(s) per connection "
                                                  "(max_sessions)")
    assert second.remote_condition is None and alice.remote_open


def test_connections_per_user_and_per_host(node_factory, users_file):
    policy = {"groups": {"om": {"users": ["alice", "bob"], "max_connections_per_user": 2},
                         "local": {"users": ["anonymous"], "max_connections_per_host": 2}}}
    a, _ = mesh2(node_factory, listeners=[plain(users_file)], policy=policy)
    first = [login(a.url, "alice") for _ in range(2)]
    cond = login(a.url, "alice", wait_open=False).wait_closed()
    assert cond.name == UNAUTHORIZED
    assert cond.description == ("policy: group 'om' allows 2 connection(s) of user 'alice' at once "
                                "(max_connections_per_user)")
    assert login(a.url, "bob").remote_open                   # per user, not per group
    first[0].close()
    wait_for(lambda: login(a.url, "alice", wait_open=True).remote_open, what="a place for alice again")
    anon = [login(a.url) for _ in range(2)]
    cond = login(a.url, wait_open=False).wait_closed()
    assert cond.name == UNAUTHORIZED and "(max_connections_per_host)" in cond.description
    assert all(c.remote_open for c in anon)


def test_management_levels_are_granted_at_the_ingress_node(node_factory, users_file):
    policy = {"groups": {"om": {"users": ["alice"], "management": "none"},
                         "ops": {"users": ["bob"], "management": "write"},
                         "monitoring": {"users": ["anonymous"], "management": "redacted"}}}
    a, b = mesh2(node_factory, listeners=[plain(users_file)], policy=policy)
    ops = Requester(login(b.url, "bob"))                  # bob asks A through B: write, so he sees all

    def egress() -> dict:
        return {r["identity"]: r["deliveriesEgress"] for r in ops.query("address", "A")}

    read_before = egress().get("_topo/0/A/$management/read", 0)  # the tests' own state readings
    for n, target in ((a, "$management"), (b, "_topo/0/A/$management")):
        alice = login(n.url, "alice")
        condition, description = refused(alice.sender(target, wait=False))
        assert (condition, description) == (UNAUTHORIZED, "policy: group 'om' has no management access "
                                                          "(management: none)")
        relay = alice.sender(None)
        relay.wait_credit()
        t = relay.send(make_message({}, address=target, reply_to="x", properties={"operation": "GET-TYPES"}))
        assert t.wait().outcome == "REJECTED" and t.condition.name == UNAUTHORIZED
    seen = ops.query("connection", "A")
    assert any(r["user"] == "alice" for r in seen) and all(r["host"] for r in seen)
    monitor = Requester(login(b.url))                     # anonymous through B: redacted at A
    seen = monitor.query("connection", "A")
    assert seen and all(r["user"] is None and r["host"] is None for r in seen)
    after = egress()
    assert after["_topo/0/A/$management/write"] >= 2 and after["_topo/0/A/$management"] >= 1
    assert after.get("_topo/0/A/$management/read", 0) == read_before     # no request got `read`


def test_vhost_by_open_hostname_or_forced_by_the_listener(node_factory, users_file):
    policy = {"groups": {"all": {"users": ["*", "anonymous"]}},
              "vhosts": {"tenant.example": {"groups": {"tenant": {"users": ["anonymous"],
                                                                  "sources": ["tenant/#"]}}}}}
    forced = plain(users_file, policy_vhost="tenant.example")
    n = node(node_factory, "A", listeners=[plain(users_file), forced], policy=policy)
    open_url, forced_url = urls(n)
    assert attached(login(open_url).receiver("anything", wait=False))
    tenant = login(open_url, hostname="Tenant.Example")
    condition, description = refused(tenant.receiver("anything", wait=False))
    assert description == "policy: group 'tenant' may not receive from 'anything' (sources)"
    assert attached(tenant.receiver("tenant/x", wait=False))
    forced_client = login(forced_url, hostname="elsewhere")
    assert refused(forced_client.receiver("anything", wait=False))[0] == UNAUTHORIZED
    cond = login(forced_url, "alice", wait_open=False).wait_closed()    # no group for alice there
    assert cond.name == UNAUTHORIZED and "vhost 'tenant.example'" in cond.description


def test_denials_are_counted_per_listener_and_group_and_logged_once_a_second(node_factory, users_file):
    policy = {"groups": {"om": {"users": ["alice"], "sources": ["openstack.org/om/#"]},
                         "admin": {"users": ["bob"], "management": "read"}}}
    n = node(node_factory, "A", listeners=[plain(users_file)], policy=policy,
             extra={"metrics": {"host": "127.0.0.1", "port": 0}})
    alice = login(n.url, "alice")
    for i in range(20):
        assert refused(alice.receiver(f"secret/{i}", wait=False))[0] == UNAUTHORIZED
    pump_for(1.2)
    assert refused(alice.receiver("secret/last", wait=False))[0] == UNAUTHORIZED
    listener = urls(n)[0].removeprefix("amqp://")
    rows = {r["identity"]: r for r in Requester(login(n.url, "bob")).query("policy")}
    row = rows[f"{listener} default om"]
    assert (row["linksDenied"], row["connectionCount"], row["connectionsDenied"]) == (21, 1, 0)
    lines = [ln for ln in n.stderr_tail(400).splitlines() if "link refused: user alice from 127.0.0.1" in ln]
    assert len(lines) == 2, lines
    assert "(and 19 more denials from 127.0.0.1 not logged)" in lines[1]
    url = next(m["url"] for ln in n.stdout_lines if (m := METRICS_RE.match(ln)))
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    want = (f'meshrouter_policy_denials_total{{group="om",kind="link",listener="{listener}",node="A",'
            f'vhost="default"}} 21.0')
    assert want in text, [ln for ln in text.splitlines() if "policy" in ln]


@pytest.mark.parametrize("kind", ["named", "anonymous"])
def test_a_policy_with_targets_still_lets_management_requests_through(node_factory, users_file, kind):
    """Management access is the `management` level's business, not `targets`'."""
    policy = {"groups": {"ops": {"users": ["anonymous"], "sources": [], "targets": [], "management": "read"}}}
    a, _ = mesh2(node_factory, policy=policy)
    c = Client(a.url)
    if kind == "anonymous":
        assert Requester(c).node("B")["id"] == "B"
        return
    snd = c.sender("_topo/0/B/$management")
    assert attached(snd)
    condition, _ = refused(c.sender("anything/else", wait=False))
    assert condition == UNAUTHORIZED


def test_meshrouter_stat_says_when_management_is_not_allowed(node_factory):
    from router.management.client import ManagementClient, ManagementUnavailable

    n = node(node_factory, "A", policy={"groups": {"apps": {"users": ["anonymous"], "management": "none"}}})
    with ManagementClient(n.url, timeout=5) as m, pytest.raises(ManagementUnavailable) as info:
        m.query("node")
    assert str(info.value) == ("QUERY to $management: the request was rejected (the node's policy gives this "
                               "connection no management access)")


def test_an_external_certificate_subject_is_a_user(node_factory, pki):
    from proton.utils import LinkDetached

    from tests.support.security import client_tls, connect

    policy = {"groups": {"certs": {"users": [pki.client.subject], "sources": ["certs/${user}/#"],
                                   "management": "redacted"}}}
    tls = {"cert": pki.server.cert, "key": pki.server.key, "ca": pki.ca, "require_client_cert": True}
    n = node(node_factory, "A", listeners=[{}, {"tls": tls, "sasl": {"mechanisms": ["EXTERNAL"]}}],
             policy=policy)
    c = connect(urls(n)[1], tls=client_tls(pki.ca, pki.client.cert, pki.client.key), mechs="EXTERNAL")
    try:
        c.create_receiver(f"certs/{pki.client.subject}/inbox")
        with pytest.raises(LinkDetached) as info:
            c.create_receiver("certs/someone-else/inbox")
        assert UNAUTHORIZED in str(info.value) and "group 'certs'" in str(info.value)
    finally:
        c.close()
