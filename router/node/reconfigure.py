"""A changed configuration applied to a running node (SIGHUP, `meshrouter reload`).

`reload(server)` reads the node's config file again. An invalid file changes nothing: the problem is logged
(file, key, problem) and recorded. A valid one is compared with the running config and what can change at
run time is applied, without touching the other connections:

- listeners: one removed (or changed) stops accepting and its connections get a Close, so their deliveries
  come back RELEASED / MODIFIED as for any lost connection; one added (or changed) starts listening;
- connectors: one removed (or changed) stops dialling and closes its connection; one added starts dialling;
- address rules and the default distribution: addresses created from now on follow them; an address in
  use keeps its distribution until no link uses it;
- policy: connections opened from now on are decided by it; open ones keep what their Open was granted;
- `log_level` and `log_levels`.

Any other key that changed (node id, link capacity, idle timeout, router timers, brokers, telemetry,
metrics) is reported as needing a restart and left as it runs. The outcome of the last reload is the
`node` entity's `lastReload` in management (router.management.entities), and a log line per change.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from router.addressing import AddressRules
from router.config import ConfigError, NodeConfig, load_config_data
from router.logs import setup_logging

log = logging.getLogger(__name__)

#: NodeConfig fields applied at run time (the rest need a restart); `source` is the file itself.
APPLIED = ("listeners", "connectors", "address_rules", "default_distribution", "policy", "log_level",
           "log_levels", "source")

T = TypeVar("T")


@dataclass
class ReloadResult:
    """What one reload did."""

    seq: int                                            # 1 for the node's first reload
    at: float                                           # wall-clock time (seconds since the epoch)
    changes: list[str] = field(default_factory=list)    # what was applied, one line each
    restart: list[str] = field(default_factory=list)    # keys that changed but need a restart
    errors: list[str] = field(default_factory=list)     # the file's problem, or what could not be applied

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_map(self) -> dict[str, Any]:
        """For management (`lastReload`)."""
        return {"seq": self.seq, "time": self.at, "ok": self.ok, "changes": list(self.changes),
                "restart": list(self.restart), "errors": list(self.errors)}


def reload(server: Any) -> ReloadResult:
    """Read `server`'s config file again and apply it (see the module doc); logs and returns the result."""
    seq = (server.last_reload.seq if server.last_reload is not None else 0) + 1
    result = ReloadResult(seq, time.time())
    try:
        data, new = load_config_data(server.config.source)
    except ConfigError as exc:
        result.errors.append(str(exc))
        log.error("reload: %s; the node keeps running with its current config", exc)
    else:
        apply(server, new, result)
        server.config_data = data
        for line in result.changes:
            log.info("reload: %s", line)
        if result.restart:
            log.warning("reload: changed, but applied only by a restart: %s", ", ".join(result.restart))
        for line in result.errors:
            log.error("reload: %s", line)
        if not (result.changes or result.restart or result.errors):
            log.info("reload: %s: nothing changed", server.config.source)
    server.last_reload = result
    return result


def apply(server: Any, new: NodeConfig, result: ReloadResult) -> None:
    """Apply the difference between `server.config` and `new` to the running node."""
    old: NodeConfig = server.config
    result.restart.extend(f.name for f in dataclasses.fields(NodeConfig)
                          if f.name not in APPLIED and getattr(old, f.name) != getattr(new, f.name))
    failed_listeners = _listeners(server, old, new, result)
    failed_connectors = _connectors(server, old, new, result)
    if (old.address_rules, old.default_distribution) != (new.address_rules, new.default_distribution):
        server.core.rules = AddressRules([(r.prefix, r.distribution) for r in new.address_rules],
                                         new.default_distribution)
        result.changes.append(f"address rules: {len(new.address_rules)} rules, default "
                              f"{new.default_distribution} (for addresses not in use now)")
    if old.policy != new.policy:
        server.core.policy.reconfigure(new.policy)
        result.changes.append("policy: " + ("replaced" if new.policy is not None else "removed")
                              + " (for connections opened from now on)")
    if (old.log_level, dict(old.log_levels)) != (new.log_level, dict(new.log_levels)):
        setup_logging(new.log_level, new.log_levels)
        result.changes.append(f"log level {new.log_level}"
                              + (f", per logger {dict(new.log_levels)}" if new.log_levels else ""))
    kept = {name: getattr(old, name) for name in result.restart}
    # what could not be opened is not running: a later reload (or write) tries it again
    kept["listeners"] = tuple(lc for lc in new.listeners if lc not in failed_listeners)
    kept["connectors"] = tuple(cc for cc in new.connectors if cc not in failed_connectors)
    server.config = dataclasses.replace(new, **kept)


def _listeners(server: Any, old: NodeConfig, new: NodeConfig, result: ReloadResult) -> list[Any]:
    """Close the listeners `new` no longer has, open those it adds; returns those that failed to open."""
    gone, added = _difference(old.listeners, new.listeners)
    for lc in gone:
        # the newest of equal ones (two listeners on port 0 differ only by the port they got)
        listener = next((b for b in reversed(server.bound) if b.config == lc), None)
        if listener is not None:
            closed = server.close_listener(listener)
            result.changes.append(f"listener {listener.name} ({lc.role}) closed, with its {closed} "
                                  "connection(s)")
    failed = []
    for lc in added:
        index = new.listeners.index(lc)
        try:
            listener = server.open_listener(lc, index)
        except (OSError, ConfigError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            result.errors.append(f"cannot listen: {detail}")
            failed.append(lc)
        else:
            result.changes.append(f"listener {listener.name} ({lc.role}) opened")
    return failed


def _connectors(server: Any, old: NodeConfig, new: NodeConfig, result: ReloadResult) -> list[Any]:
    """Stop the connectors `new` no longer has, start those it adds; returns those that failed."""
    gone, added = _difference(old.connectors, new.connectors)
    for cc in gone:
        connector = next((c for c in server.connectors if c.config == cc), None)
        if connector is not None:
            server.remove_connector(connector)
            result.changes.append(f"connector to {cc.host}:{cc.port} removed")
    failed = []
    for cc in added:
        index = new.connectors.index(cc)
        try:
            server.add_connector(cc, index)
        except ConfigError as exc:
            result.errors.append(str(exc))
            failed.append(cc)
        else:
            result.changes.append(f"connector to {cc.host}:{cc.port} added")
    return failed


def _difference(old: Sequence[T], new: Sequence[T]) -> tuple[list[T], list[T]]:
    """(in `old` only, in `new` only), counting repeats; by equality, since configs are not hashable."""
    left = list(new)
    gone = []
    for item in old:
        if item in left:
            left.remove(item)
        else:
            gone.append(item)
    return gone, left
