"""Prometheus `/metrics` of a real node: the values match known traffic and the management entities."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.bulk import attach_receivers
from tests.support.clients import Client
from tests.support.management import Requester
from tests.support.ports import metrics_url
from tests.support.waiting import pump_for


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_match_known_traffic(node_factory):
    n = node_factory("A", extra={"metrics": {"host": "127.0.0.1", "port": 0}})
    url = metrics_url(n)
    c = Client(n.url)
    rcv = c.receiver("balanced/metrics/q", credit=100, auto_accept=False)
    snd = c.sender("balanced/metrics/q")
    snd.wait_credit(1)
    trackers = [snd.send(f"m{i}") for i in range(12)]
    rcv.wait_messages(12)
    for i, r in enumerate(rcv.received):
        r.accept() if i < 9 else r.release()
    for t in trackers:
        t.wait()
    pump_for(0.1)
    m = _scrape(url)
    node = {"node": "A"}

    def value(name: str, **labels: str) -> float:
        return m[(name, tuple(sorted({**node, **labels}.items())))]

    q = "balanced/metrics/q"
    assert value("meshrouter_address_deliveries_total", address=q, direction="ingress") == 12
    assert value("meshrouter_address_deliveries_total", address=q, direction="egress") == 12
    assert value("meshrouter_address_consumers", address="balanced/metrics/q", where="local") == 1
    assert value("meshrouter_outcomes_total", outcome="accepted") == 9
    assert value("meshrouter_outcomes_total", outcome="released") == 3
    assert value("meshrouter_deliveries_total", direction="ingress") == 12
    assert value("meshrouter_connections", role="normal") == 1
    assert value("meshrouter_connections", role="internal") == 1
    assert value("meshrouter_links", type="endpoint", dir="in") >= 1
    assert value("meshrouter_unsettled_deliveries") == 0
    pumps = value("meshrouter_forwarding_seconds_count")
    assert pumps > 0 and value("meshrouter_forwarding_seconds_bucket", le="+Inf") == pumps
    assert value("meshrouter_forwarding_seconds_bucket", le="1.0") <= pumps
    assert 0 < value("meshrouter_forwarding_seconds_sum") < pumps * 1.0
    assert value("meshrouter_deliveries_delayed_1s_total") == 0
    # node-scoped (reply) addresses are not exported per address
    assert not any(labels and dict(labels).get("address", "").startswith("_topo/") for _, labels in m)

    # the same numbers through management (a management reading adds its own deliveries afterwards)
    mg = Requester(c).node()
    assert mg["acceptedDeliveries"] == value("meshrouter_outcomes_total", outcome="accepted")
    assert mg["releasedDeliveries"] == value("meshrouter_outcomes_total", outcome="released")

    # metrics are scraped again without disturbing the node; the counter only grows
    m2 = _scrape(url)
    assert m2[("meshrouter_deliveries_total", (("direction", "ingress"), ("node", "A")))] >= 12
    assert n.alive()


def test_metrics_port_taken_is_a_clear_start_error(node_factory, tmp_path):
    import socket
    import subprocess
    import sys

    import yaml

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    cfg = tmp_path / "node.yaml"
    cfg.write_text(yaml.safe_dump({"node": {"id": "A"}, "listeners": [{"host": "127.0.0.1", "port": 0}],
                                   "metrics": {"port": port}}))
    r = subprocess.run([sys.executable, "-m", "router", "run", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    busy.close()
    assert r.returncode == 1
    assert f"cannot listen: metrics on 127.0.0.1:{port}: Address already in use" in r.stderr
    assert "Traceback" not in r.stderr


def test_metrics_paths_other_than_metrics_are_404(node_factory):
    n = node_factory("A", extra={"metrics": {"host": "127.0.0.1", "port": 0}})
    url = metrics_url(n)
    base = url.rsplit("/metrics", 1)[0]
    for path in ("/", "/favicon.ico", "/metricsx", "/admin/../metrics2"):
        try:
            urllib.request.urlopen(base + path, timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 404, path
        else:
            raise AssertionError(f"{path} answered 200")
    assert _scrape(url)            # /metrics itself still answers
    assert n.alive()


def test_metrics_stay_bounded_with_20000_addresses(node_factory):
    """Per-address series only for the configured addresses and the busiest few: a scrape of a node with
    20,000 addresses stays under 1 MB and 100 ms (the best of five scrapes, on a shared machine)."""
    n = node_factory("A", idle_timeout=0,        # the raw receivers send no heartbeats
                     extra={"metrics": {"port": 0, "top_addresses": 3,
                                        "addresses": ["balanced/bound/7", "amqp:/balanced/bound/8"]}})
    url = metrics_url(n)
    attach_receivers(n.url, [f"balanced/bound/{i}" for i in range(20000)])
    c = Client(n.url)
    busy = {"balanced/busy/a": 5, "balanced/busy/b": 3, "balanced/busy/c": 2, "balanced/busy/d": 1}
    for address, count in busy.items():
        rcv = c.receiver(address, credit=10)
        snd = c.sender(address)
        snd.wait_credit(1)
        for i in range(count):
            snd.send(f"m{i}").wait()
        rcv.wait_messages(count)
    sizes, times = [], []
    for _ in range(5):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read()
        times.append(time.perf_counter() - start)
        sizes.append(len(text))
    m = _scrape(url)
    exported = {dict(labels)["address"] for name, labels in m if name == "meshrouter_address_consumers"}
    assert exported == {"balanced/bound/7", "balanced/bound/8", "balanced/busy/a", "balanced/busy/b",
                        "balanced/busy/c"}
    assert m[("meshrouter_addresses", (("node", "A"),))] >= 20000
    assert m[("meshrouter_links", (("dir", "out"), ("node", "A"), ("type", "endpoint")))] >= 20004
    assert max(sizes) < 1_000_000 and min(times) < 0.1, (sizes, times)
    print(f"\n/metrics at 20,000 addresses: {max(sizes)} bytes, best of 5 scrapes {min(times) * 1000:.1f} ms")
