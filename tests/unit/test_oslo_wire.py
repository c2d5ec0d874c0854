"""router.oslo's addresses and message layout against oslo.messaging 14.9.3's own amqp driver (installed in
the main venv): the same Targets give the same addresses in routable and legacy mode, and each side reads
the other's requests, replies and heartbeats. The options check refuses unknown keys and values."""

from __future__ import annotations

import itertools
import sys

import pytest

om = pytest.importorskip("oslo_messaging", reason="needs oslo.messaging 14.9.3 (the test extra)")
amqp14 = pytest.importorskip("oslo_messaging._drivers.amqp1_driver.addressing")
impl14 = pytest.importorskip("oslo_messaging._drivers.impl_amqp1")

from oslo_config import cfg  # noqa: E402

from router.oslo import layout, options  # noqa: E402
from router.oslo.addressing import NOTIFY, RPC, Addresser, Dest, Prefixes, choose  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TARGETS = [om.Target(topic=t, exchange=e, server=s, fanout=f)
           for t, e, s, f in itertools.product(("nova", "compute.x"), (None, "cinder"), (None, "host-1"),
                                               (False, True))]


@pytest.mark.parametrize("vhost", [None, "region1"])
@pytest.mark.parametrize("default_exchange", [None, "neutron"])
def test_routable_and_legacy_addresses_are_14x_addresses(vhost, default_exchange):
    f14 = amqp14.AddresserFactory(default_exchange, "dynamic", legacy_server_prefix="exclusive",
                                  legacy_broadcast_prefix="broadcast", legacy_group_prefix="unicast",
                                  rpc_prefix="openstack.org/om/rpc", notify_prefix="openstack.org/om/notify",
                                  multicast="multicast", unicast="unicast", anycast="anycast",
                                  notify_exchange=None, rpc_exchange=None)
    for product, routable in (("meshrouter", True), ("qpid-cpp", False), (None, False)):
        props = {} if product is None else {"product": product}
        theirs = f14(props, vhost)
        assert choose("dynamic", product) is routable
        ours = Addresser(routable, default_exchange, Prefixes(), vhost)
        for t, service in itertools.product(TARGETS, (RPC, NOTIFY)):
            d = Dest.of(t, service)
            assert ours.resolve(d) == theirs.resolve(t, service), (product, t, service)
            assert ours.anycast(d) == theirs.anycast_address(t, service)
            if t.server:
                assert ours.server_addresses(d) == [theirs.unicast_address(t, service),
                                                    theirs.multicast_address(t, service),
                                                    theirs.anycast_address(t, service)]


def test_requests_replies_and_heartbeats_read_both_ways():
    msg, ctxt = {"method": "echo", "args": {"text": "héllo", "n": [1, 2]}, "version": "1.0"}, {"user": "u"}
    ours = layout.request(msg, ctxt, monitor=5, timeout=30)
    assert impl14.unmarshal_request(ours) == (msg, ctxt, 5)
    assert ours.ttl == 30
    theirs = impl14.marshal_request(msg, ctxt, None, 7)
    assert layout.read_request(theirs) == (msg, ctxt, 7)
    # notifications of envelope version 2.0 are serialized the same way
    env = layout.request({"event_type": "e", "payload": {}}, ctxt, envelope=True)
    assert impl14.unmarshal_request(env)[0] == {"event_type": "e", "payload": {}}
    # replies: a result, and a remote failure raised again on the other side
    reply = layout.reply("cid-1", result={"ok": [1]})
    assert reply.correlation_id == "cid-1" and impl14.unmarshal_response(reply, []) == {"ok": [1]}
    try:
        raise ValueError("boom")
    except ValueError:
        failure = layout.reply("cid-2", failure=sys.exc_info())
        theirs_failure = impl14.marshal_response(None, sys.exc_info())
    with pytest.raises(ValueError, match="boom"):
        impl14.unmarshal_response(failure, [])
    with pytest.raises(ValueError, match="boom"):
        layout.read_reply(theirs_failure, [])
    assert layout.read_reply(impl14.marshal_response({"r": 1}, None), []) == {"r": 1}
    # a heartbeat is a message without a body (14.x's RPCMonitoredCallTask resets its timer on those)
    hb = layout.heartbeat("cid-3", 4)
    assert layout.is_heartbeat(hb) and hb.body is None and hb.correlation_id == "cid-3"


def test_unknown_options_and_values_are_refused(tmp_path):
    conf_file = tmp_path / "nova.conf"
    conf_file.write_text("[oslo_messaging_amqp]\nidle_timeout = 5\nrabbit_retry_interval = 2\n")
    conf = cfg.ConfigOpts()
    conf(["--config-file", str(conf_file)], default_config_files=[], default_config_dirs=[])
    options.register(conf)
    with pytest.raises(options.OptionError, match="rabbit_retry_interval"):
        options.check_group(conf, {})
    clean = cfg.ConfigOpts()
    clean([], default_config_files=[], default_config_dirs=[])
    options.register(clean)
    options.check_group(clean, {"idle_timeout": "5"})
    with pytest.raises(options.OptionError, match="heartbeat_rate"):
        options.check_group(clean, {"heartbeat_rate": "2"})
    assert options.pre_settled(["rpc-cast", "RPC-Reply"]) == {"rpc-cast", "rpc-reply"}
    with pytest.raises(options.OptionError, match="rpc-everything"):
        options.pre_settled(["rpc-cast", "rpc-everything"])
    assert {o.dest for o in amqp14_opts()} <= options.KNOWN, "a 14.x option this driver does not take"


def amqp14_opts():
    from oslo_messaging._drivers.amqp1_driver import opts
    return opts.amqp1_opts
