"""Running one node: the node (router.node) with the services its config asks for, until a signal stops it.

This is where the layers meet: it builds the `NodeServer`, plugs in the services (the `$management`
agent, the Prometheus listener, the broker gateways, the telemetry observer and its writer process) and
handles the process's signals and exit status. `meshrouter run` calls `run_node`. Services are imported
only when configured (pika, prometheus-client and the writer process are not loaded otherwise).

Part of the CLI layer (docs/ARCHITECTURE.md): may import every layer below it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from router.adapter.pnbuffers import initial_buffer
from router.config import ConfigError, NodeConfig, load_config_data
from router.management.agent import ManagementAgent
from router.node.collector import GcPacer
from router.node.server import NodeServer

log = logging.getLogger("router.node.server")


class ManagementService:
    """The `$management` agent, and `/metrics` when the config has `metrics:`."""

    def __init__(self, server: NodeServer) -> None:
        self.server = server

    def start(self) -> None:
        server = self.server
        server.management = ManagementAgent(server, server.loop, server.add_local_connection)
        if server.config.metrics is not None:
            from router.management.metrics import MetricsListener  # prometheus-client only when asked

            server.metrics = MetricsListener(server.config.metrics, server, server.loop)
            server.urls.append(("metrics", server.metrics.url))

    def stop(self) -> None:
        server = self.server
        if server.management is not None:
            management, server.management = server.management, None
            management.close()
        if server.metrics is not None:
            metrics, server.metrics = server.metrics, None
            metrics.close()


class GatewayService:
    """The broker gateways of `brokers:` (in-process AMQP 1.0 clients of the node, pika to the brokers)."""

    def __init__(self, server: NodeServer) -> None:
        self.server = server

    def start(self) -> None:
        from router.gateway import Gateways  # imports pika only when brokers are configured

        server = self.server
        server.gateways = Gateways(server.config.brokers, server.config.node_id, server.loop, server)
        server.gateways.start()

    def stop(self) -> None:
        server = self.server
        if server.gateways is not None:
            gateways, server.gateways = server.gateways, None
            gateways.stop()


def build(config: NodeConfig, loop: asyncio.AbstractEventLoop) -> NodeServer:
    """A node with the services `config` asks for (not started)."""
    server = NodeServer(config, loop)
    if config.telemetry is not None:
        from router.telemetry.observer import NodeTelemetry
        from router.telemetry.process import WriterProcess

        writer = WriterProcess(config.telemetry, config.node_id, log_level=config.log_level,
                               log_levels=config.log_levels)
        server.engine.observer = NodeTelemetry(writer, config.node_id)
    if config.brokers:
        server.services.append(GatewayService(server))
    server.services.append(ManagementService(server))   # stopped first: it reads the gateways
    return server


async def _serve(config: NodeConfig) -> int:
    loop = asyncio.get_running_loop()
    server = build(config, loop)
    server.config_data = _config_data(config)
    server.gc_pacer = GcPacer()             # the process is the node's own: it paces garbage collection
    try:
        server.start()
    except OSError as exc:
        print(f"meshrouter: error: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:              # a TLS / SASL setting Proton refused: a config error
        print(f"meshrouter: error: {exc}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop)
    loop.add_signal_handler(signal.SIGUSR1, server.log_state)
    loop.add_signal_handler(signal.SIGHUP, server.reload)
    for role, url in server.urls:
        print(f"listening: role={role} url={url}", flush=True)
    print(f"ready: node={config.node_id} pid={os.getpid()}", flush=True)
    log.info("node %s ready (%s)", config.node_id, ", ".join(u for _, u in server.urls))
    if (size := initial_buffer()) > 1024:
        log.info("python-qpid-proton is the stock build (%d-byte transport buffers): an idle connection "
                 "costs ~20 KiB instead of ~11; scripts/build_proton.py (run by make) builds it with 1 KiB",
                 size)
    await server.stopped
    log.info("node %s stopped", config.node_id)
    return 0


def _config_data(config: NodeConfig) -> object:
    """The YAML data of the node's config file, which management writes edit (None: not from a file)."""
    try:
        data, again = load_config_data(config.source)
    except ConfigError:
        return None
    return data if again == config else None


def run_node(config: NodeConfig) -> int:
    """Run a node in the foreground until SIGINT / SIGTERM. Returns the exit status."""
    return asyncio.run(_serve(config))
