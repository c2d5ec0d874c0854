"""The ``[oslo_messaging_amqp]`` options: the 14.x driver's names and defaults, all of which this driver
honours, and the checks that refuse what it cannot honour.

oslo.config ignores options it does not know, so a typo (``idle_timout``) or an option of another driver put
in this group would go unnoticed. :func:`check_group` reads the group's keys from the parsed configuration
files and from the transport URL's query and refuses unknown ones with a message that names them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oslo_config import cfg

GROUP = "oslo_messaging_amqp"
PRE_SETTLED = ("rpc-call", "rpc-reply", "rpc-cast", "notify")

OPTS = [
    cfg.StrOpt("container_name", help="Name for the AMQP container (default: a unique one per connection)."),
    cfg.IntOpt("idle_timeout", default=0, min=0,
               help="Seconds of silence after which the connection is considered dead (0: disabled)."),
    cfg.BoolOpt("trace", default=False, help="Print the AMQP frames of every connection on stderr."),
    cfg.BoolOpt("ssl", default=False,
                help="Use TLS even with amqp:// (amqps:// always does); the server's certificate is checked "
                     "against the system CAs unless ssl_ca_file is set."),
    cfg.StrOpt("ssl_ca_file", default="", help="CA certificate(s) (PEM) that the server's certificate must "
               "chain to."),
    cfg.StrOpt("ssl_cert_file", default="", help="Client certificate (PEM) presented to the server."),
    cfg.StrOpt("ssl_key_file", default="", help="Private key (PEM) of ssl_cert_file."),
    cfg.StrOpt("ssl_key_password", secret=True, help="Password of ssl_key_file, if it is encrypted."),
    cfg.BoolOpt("ssl_verify_vhost", default=False,
                help="Check the server's certificate against the URL's virtual host instead of its host "
                     "name (SNI with a certificate per virtual host)."),
    cfg.StrOpt("sasl_mechanisms", default="",
               help="Space separated SASL mechanisms allowed (default: PLAIN with a user in the URL, "
                    "else ANONYMOUS)."),
    cfg.StrOpt("sasl_config_dir", default="", help="Directory of the Cyrus SASL configuration."),
    cfg.StrOpt("sasl_config_name", default="", help="Name of the Cyrus SASL configuration file."),
    cfg.StrOpt("sasl_default_realm", default="", help="Realm appended to a user name that has none."),
    cfg.IntOpt("connection_retry_interval", default=1, min=1,
               help="Seconds before the first reconnect attempt."),
    cfg.IntOpt("connection_retry_backoff", default=2, min=0,
               help="Seconds added to the retry interval after each failed attempt."),
    cfg.IntOpt("connection_retry_interval_max", default=30, min=1,
               help="Longest interval between reconnect attempts."),
    cfg.IntOpt("link_retry_delay", default=10, min=1,
               help="Seconds before a link the router closed is opened again."),
    cfg.IntOpt("default_reply_retry", default=0, min=-1,
               help="Reconnects a server's reply may wait for (-1: no limit)."),
    cfg.IntOpt("default_reply_timeout", default=30, min=5, help="Seconds a server's reply may take."),
    cfg.IntOpt("default_send_timeout", default=30, min=5, help="Seconds a cast without timeout may take."),
    cfg.IntOpt("default_notify_timeout", default=30, min=5, help="Seconds a notification may take."),
    cfg.IntOpt("default_sender_link_timeout", default=600, min=1,
               help="Seconds an unused sender link is kept open."),
    cfg.StrOpt("addressing_mode", default="dynamic", choices=("legacy", "routable", "dynamic"),
               help="routable: openstack.org/om/... addresses; legacy: qpidd-style addresses; dynamic: "
                    "legacy only when the peer says product=qpid-cpp (or nothing)."),
    cfg.BoolOpt("pseudo_vhost", default=True,
                help="Put the URL's virtual host in the addresses (else send it as the Open hostname)."),
    cfg.StrOpt("server_request_prefix", default="exclusive", help="legacy: prefix of server addresses."),
    cfg.StrOpt("broadcast_prefix", default="broadcast", help="legacy: prefix of fanout addresses."),
    cfg.StrOpt("group_request_prefix", default="unicast", help="legacy: prefix of shared addresses."),
    cfg.StrOpt("rpc_address_prefix", default="openstack.org/om/rpc", help="routable: RPC prefix."),
    cfg.StrOpt("notify_address_prefix", default="openstack.org/om/notify",
               help="routable: notification prefix."),
    cfg.StrOpt("multicast_address", default="multicast", help="routable: fanout tag."),
    cfg.StrOpt("unicast_address", default="unicast", help="routable: direct-to-server tag."),
    cfg.StrOpt("anycast_address", default="anycast", help="routable: shared (load-balanced) tag."),
    cfg.StrOpt("default_notification_exchange",
               help="Exchange of notifications (default: control_exchange)."),
    cfg.StrOpt("default_rpc_exchange", help="Exchange of RPC (default: control_exchange)."),
    cfg.IntOpt("reply_link_credit", default=200, min=1, help="Credit of the reply receiver."),
    cfg.IntOpt("rpc_server_credit", default=100, min=1, help="Credit of each RPC server receiver."),
    cfg.IntOpt("notify_server_credit", default=100, min=1, help="Credit of each notification receiver."),
    cfg.MultiStrOpt("pre_settled", default=["rpc-cast", "rpc-reply"],
                    help="Messages sent pre-settled (no acknowledgement awaited): any of "
                         + ", ".join(PRE_SETTLED) + "."),
    cfg.ListOpt("notification_pools", default=[],
                help="Listener pools that get a copy of every notification sent (this driver's addition: "
                     "a router keeps no queues, so a notifier sends one copy per pool)."),
]

KNOWN = frozenset(o.dest for o in OPTS)


class OptionError(ValueError):
    """An ``[oslo_messaging_amqp]`` setting this driver cannot honour."""


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """For oslo-config-generator (entry point ``oslo.config.opts`` ``meshrouter.oslo``)."""
    return [(GROUP, list(OPTS))]


def register(conf: cfg.ConfigOpts) -> None:
    """Register the group's options on ``conf`` (again is fine)."""
    group = cfg.OptGroup(name=GROUP, title="AMQP 1.0 driver options (meshrouter)")
    conf.register_group(group)
    conf.register_opts(OPTS, group=group)


def file_keys(conf: cfg.ConfigOpts, group: str = GROUP) -> set[str]:
    """The option names given in ``group`` by the parsed configuration files."""
    keys: set[str] = set()
    parsed: Iterable[dict[str, Any]] = getattr(getattr(conf, "_namespace", None), "_parsed", None) or ()
    for sections in parsed:
        keys.update(sections.get(group, {}))
    return keys


def check_group(conf: cfg.ConfigOpts, query: Iterable[str]) -> None:
    """Refuse keys of ``[oslo_messaging_amqp]`` (files) or of the transport URL's query that are not
    options of this driver, and bad ``pre_settled`` values."""
    unknown = sorted(file_keys(conf) - KNOWN)
    if unknown:
        raise OptionError(f"[{GROUP}] has options the meshrouter amqp driver does not know: "
                          f"{', '.join(unknown)} (known: {', '.join(sorted(KNOWN))})")
    bad_query = sorted(set(query) - KNOWN)
    if bad_query:
        raise OptionError(f"transport_url query has parameters the meshrouter amqp driver does not know: "
                          f"{', '.join(bad_query)} (they must be [{GROUP}] options)")


def pre_settled(values: Iterable[str]) -> frozenset[str]:
    """The ``pre_settled`` kinds, refusing unknown ones (14.x only logged and ignored them)."""
    got = frozenset(v.strip().lower() for v in values if v.strip())
    bad = sorted(got - set(PRE_SETTLED))
    if bad:
        raise OptionError(f"[{GROUP}] pre_settled: unknown value(s) {', '.join(bad)} "
                          f"(allowed: {', '.join(PRE_SETTLED)})")
    return got
