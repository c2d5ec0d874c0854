"""The rules that hold with no policy configured, on every node of a two-node mesh (issue 16, 1 and 2).

The attacks of the issue, as an attacker would try them, with real clients:

* attaching a receiver with another connection's reply address (any spelling, on its node or another);
* attaching receivers that impersonate a management agent (`$management`, `_local/$management`,
  `_topo/0/<node>/$management`), and sending to the agent's level addresses to get more than granted;
* an anonymous client reading file paths, user names and peer addresses from management.

Each is refused with `amqp:unauthorized-access` (and a description), and the honest traffic still flows.
"""

from __future__ import annotations

import pytest

from tests.support.authz import AuthClient, local_address, mesh2, node, refused, urls
from tests.support.clients import Client, make_message
from tests.support.management import Requester
from tests.support.waiting import pump_for, wait_for

UNAUTHORIZED = "amqp:unauthorized-access"


def test_reply_address_theft_is_refused_on_both_nodes_and_replies_reach_their_owner(node_factory):
    a, b = mesh2(node_factory)
    owner = Client(a.url)
    replies = owner.receiver(dynamic=True, credit=20)
    address = replies.address                             # amqp:/_topo/0/A/temp.<15 chars>
    bare = address.removeprefix("amqp:/")
    suffix = bare.rsplit("/", 1)[1]
    thieves = []
    for url, source in ((a.url, address), (a.url, bare), (a.url, "/" + bare), (a.url, f"_local/{suffix}"),
                        (b.url, address), (b.url, bare)):
        link = Client(url).receiver(source, credit=20, wait=False)
        condition, description = refused(link)
        assert condition == UNAUTHORIZED, (url, source, condition)
        assert "reply address" in description and bare in description, description
        thieves.append(link)
    server = Client(b.url)
    relay = server.sender(None)
    relay.wait_credit()
    sent = [relay.send(make_message(f"reply {i}", address=address)) for i in range(10)]
    wait_for(lambda: len(replies.received) == 10, what="the 10 replies at their owner")
    assert all(t.wait().outcome == "ACCEPTED" for t in sent)
    assert all(not t.received for t in thieves)


def test_a_receiver_may_not_impersonate_an_agent_and_every_request_reaches_the_real_one(node_factory):
    a, b = mesh2(node_factory)
    impostors = []
    for url, source in ((a.url, "$management"), (a.url, "_local/$management"),
                        (a.url, "_topo/0/A/$management"), (a.url, "amqp:/_topo/0/A/$management"),
                        (b.url, "_topo/0/A/$management"),
                        (b.url, "_topo/0/A/$management/read"), (a.url, "$management/write")):
        link = Client(url).receiver(source, credit=20, wait=False)
        condition, description = refused(link)
        assert condition == UNAUTHORIZED, (url, source)
        assert "_topo/0/A/$management" in description, description
        impostors.append(link)
    for url in (a.url, b.url):                  # A's agent, asked on A and through B
        m = Requester(Client(url))
        for _ in range(5):
            assert m.node("A" if url == b.url else None)["id"] == "A"
    assert all(not link.received for link in impostors)


def test_clients_may_not_send_to_the_agents_level_addresses_or_other_services(node_factory):
    a, _ = mesh2(node_factory)
    c = Client(a.url)
    for target in ("$management/write", "_topo/0/B/$management/read", "$other"):
        condition, description = refused(c.sender(target, wait=False))
        assert condition == UNAUTHORIZED and "node service address" in description, (target, description)
    relay = c.sender(None)
    relay.wait_credit()
    t = relay.send(make_message({}, address="_topo/0/A/$management/write", reply_to="x",
                                properties={"operation": "QUERY", "type": "node"}))
    assert t.wait().outcome == "REJECTED" and t.condition.name == UNAUTHORIZED


def test_sending_to_a_reply_address_stays_open_with_a_targeted_sender_too(node_factory):
    a, b = mesh2(node_factory)
    owner = Client(a.url)
    replies = owner.receiver(dynamic=True, credit=5)
    snd = Client(b.url).sender(replies.address)
    snd.wait_credit()
    assert snd.send("hello").wait().outcome == "ACCEPTED"
    wait_for(lambda: replies.bodies == ["hello"])


@pytest.fixture
def remote_host() -> str:
    ip = local_address()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from as a remote host")
    return ip


def test_anonymous_remote_clients_read_management_without_files_users_or_peer_addresses(node_factory, pki,
                                                                                         remote_host):
    """No policy: an anonymous client from another host gets the `redacted` level; from localhost `read`."""
    n = node(node_factory, "A", listeners=[{"host": "0.0.0.0"},
                                           {"tls": {"cert": pki.server.cert, "key": pki.server.key}}])
    url = urls(n)[0]
    port = url.rsplit(":", 1)[1]
    other = Client(n.url)
    other_replies = other.receiver(dynamic=True, credit=1)
    local = Requester(Client(f"amqp://127.0.0.1:{port}"))
    remote = Requester(AuthClient(f"amqp://{remote_host}:{port}"))
    full = {row["identity"]: row for row in local.query("connection")}
    seen = {row["identity"]: row for row in remote.query("connection")}
    assert set(full) == set(seen)
    assert any(r["host"] and r["host"].startswith("127.0.0.1:") for r in full.values())
    assert any(r["user"] == "anonymous" for r in full.values())
    for row in seen.values():
        assert (row["host"], row["user"], row["container"]) == (None, None, None), row
    tls_full = [r for r in local.query("listener") if r["settings"]["tls"]]
    tls_seen = [r for r in remote.query("listener") if r["settings"]["tls"]]
    assert tls_full[0]["settings"]["tls"]["cert"] and tls_full[0]["settings"]["tls"]["key"]
    assert tls_seen[0]["settings"]["tls"]["cert"] is None and tls_seen[0]["settings"]["tls"]["key"] is None
    theirs = other_replies.address.removeprefix("amqp:/")
    assert theirs in {r["identity"] for r in local.query("address")}
    addresses = {r["identity"] for r in remote.query("address")}
    assert theirs not in addresses and remote.reply_to.removeprefix("amqp:/") in addresses
    owning = {r["owningAddr"] for r in remote.query("link")}
    assert theirs not in owning and remote.reply_to.removeprefix("amqp:/") in owning
    pump_for(0.1)
