"""A mesh deployed from `meshrouter mesh render --tls` (issue 20, point 5): four hosts, as four network
namespaces on one LAN with host names (/etc/hosts of each namespace), each running the config rendered
for it, inter-router links over mutual TLS with the mesh's own CA; RPC from a caller on D to a server on
A crosses the mesh.

Needs network namespaces (root); skipped, saying why, without them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.support.clients import Client
from tests.support.meshes import wait_converged
from tests.support.nodes import MESH_RULES, REPO_ROOT
from tests.support.state import mesh_view
from tests.support.traffic import EchoServer
from tests.support.waiting import wait_for

HOSTS = ("A", "B", "C", "D")
ADDRESS = "openstack.org/om/rpc/anycast/render/echo"


def _topology(path) -> None:
    nodes = {h: {"host": f"{h.lower()}.mesh.test", "client_port": 5672, "inter_router_port": 5673}
             for h in HOSTS}
    edges = [{"from": b, "to": a} for i, a in enumerate(HOSTS) for b in HOSTS[i + 1:]]
    path.write_text(yaml.safe_dump({
        "name": "rendered", "nodes": nodes, "edges": edges,
        "router": {"hello_interval": 0.5, "hello_max_age": 2.0, "ra_interval_flux": 1.0},
        "addresses": {"rules": [{"prefix": p, "distribution": d} for p, d in MESH_RULES]},
    }))


def test_a_rendered_mesh_on_four_hosts_carries_rpc(netlab, tmp_path):
    if netlab is None:
        pytest.skip("needs network namespaces (root, iproute2): the rendered configs name other hosts")
    for h in HOSTS:
        netlab.add_host(h)
    lan = netlab.lan()
    netlab.host_names({f"{h.lower()}.mesh.test": ip for h, ip in lan.items()})
    topo, out = tmp_path / "rendered.yaml", tmp_path / "out"
    _topology(topo)
    r = subprocess.run([sys.executable, "-m", "router", "mesh", "render", str(topo), "--out", str(out),
                        "--bind", "0.0.0.0", "--exec", "/usr/bin/meshrouter", "--config-dir", str(out),
                        "--tls"],
                       capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{h}.yaml" for h in HOSTS] + [f"meshrouter-{h}.service" for h in HOSTS] + ["pki"])
    unit = (out / "meshrouter-B.service").read_text()
    for line in (f"ExecStart=/usr/bin/meshrouter run {out}/B.yaml", "Restart=on-failure",
                 "ExecReload=/bin/kill -HUP $MAINPID", "After=network-online.target",
                 "LimitNOFILE=8448"):                 # 256 + two listeners of max_connections 4096
        assert line in unit.splitlines(), line

    nodes = {}
    for h in HOSTS:
        cfg = yaml.safe_load((out / f"{h}.yaml").read_text())
        dialled = sorted(c["host"] for c in cfg.get("connectors", []))
        assert dialled == [f"{p.lower()}.mesh.test" for p in HOSTS[:HOSTS.index(h)]], dialled
        # inter-router links: mutual TLS and EXTERNAL with the mesh's own CA, the peer checked by name
        assert all(c["tls"]["ca"] == f"{out}/pki/ca.pem" and c["sasl"]["mechanisms"] == ["EXTERNAL"]
                   for c in cfg.get("connectors", []))
        node = netlab.start_config(h, cfg)
        node.url = f"amqp://{netlab.client_ip[h]}:5672"     # from here, through the host's other interface
        nodes[h] = node
    wait_converged(nodes.values())
    assert all(len(mesh_view(n).neighbors) == 3 for n in nodes.values())

    server = EchoServer(Client(nodes["A"].url), ADDRESS, "A")
    caller = Client(nodes["D"].url)
    replies = caller.receiver(dynamic=True, credit=20)
    requests = caller.sender(ADDRESS)
    wait_for(lambda: server.poll() and requests.credit > 0, what="credit for the calls from D")
    sent = [requests.send(f"call {i}", reply_to=replies.address, id=f"id-{i}")
            for i in range(10)]
    wait_for(lambda: server.poll() and len(replies.received) == 10, what="ten replies from A on D")
    assert sorted(r.message.body for r in replies.received) == sorted(f"A:call {i}" for i in range(10))
    assert sorted(r.message.correlation_id for r in replies.received) == sorted(f"id-{i}" for i in range(10))
    # a reply can reach D before its request's outcome does (the two travel separately): wait for both
    wait_for(lambda: server.poll() and all(t.settled for t in sent), what="the calls' outcomes on D")
    assert all(t.outcome == "ACCEPTED" for t in sent)
