"""The configuration reference and the defaults: documented where declared, each defined once.

docs/CONFIGURATION.md's table is generated from the key declarations (router.config.reference), so a key
cannot be added, renamed or given a new default without the reference changing with it, and each key must
have its own row there. Defaults that another layer
needs come from router.defaults; these tests check that every user agrees with the declaration.
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

from router import defaults
from router.config import ConnectorConfig, ListenerConfig, NodeConfig, RouterTimers, parse_config
from router.config.keys import KEY
from router.config.reference import markdown, readme_table, rows, with_table

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "CONFIGURATION.md"


def test_the_configuration_guide_holds_the_generated_table() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    assert readme_table(text) is not None, "docs/CONFIGURATION.md lost the generated-table markers"
    assert readme_table(text) == markdown(), (
        "docs/CONFIGURATION.md's configuration reference is not current: run "
        "`python -m router.config --update docs/CONFIGURATION.md` and commit the result")
    assert with_table(text) == text


def test_every_key_has_its_row_in_the_configuration_guide() -> None:
    """Named key by key, so the failure says which key is missing (not only that the table differs)."""
    table = readme_table(REFERENCE.read_text(encoding="utf-8")) or ""
    documented = {line.split("|")[1].strip().strip("`") for line in table.splitlines()
                  if line.startswith("| `")}
    missing = [path for path, *_ in rows() if path not in documented]
    assert not missing, (f"docs/CONFIGURATION.md has no row for {', '.join(missing)}: run "
                         "`python -m router.config --update docs/CONFIGURATION.md`")
    assert documented == {path for path, *_ in rows()}, "rows for keys that do not exist"


def test_the_readme_points_to_the_reference_instead_of_holding_it() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme_table(text) is None and "docs/CONFIGURATION.md" in text


def test_python_m_router_config_prints_the_table() -> None:
    proc = subprocess.run([sys.executable, "-m", "router.config", "--markdown"], capture_output=True,
                          text=True, timeout=60, cwd=REPO, check=True)
    assert proc.stdout == markdown() + "\n"


def test_every_key_has_its_type_default_and_doc() -> None:
    table = list(rows())
    assert len({path for path, *_ in table}) == len(table)
    for path, accepts, default, doc in table:
        assert accepts and default and doc, path
    paths = {path for path, *_ in table}
    assert {"node.id", "listeners[].tls.cert", "connectors[].sasl.mechanisms", "router.ls_max_age",
            "telemetry.sample", "brokers[].addresses[].ttl", "metrics.port"} <= paths


def test_the_table_shows_the_defaults_the_parser_applies() -> None:
    config = parse_config({"node": {"id": "A"}, "listeners": [{"host": "h", "port": 1}], "metrics": {},
                           "brokers": [{"name": "b", "addresses": [{"address": "x"}]}]}, "t")
    shown = {path: default for path, _, default, _ in rows()}
    lc, broker = config.listeners[0], config.brokers[0]
    assert shown["node.link_capacity"] == f"`{config.link_capacity}`"
    assert shown["node.idle_timeout"] == f"`{config.idle_timeout:g}`"
    assert shown["listeners[].max_frame_size"] == f"`{lc.max_frame_size}`"
    assert shown["router.hello_max_age"] == f"`{config.router_timers['hello_max_age']:g}`"
    assert shown["metrics.port"] == f"`{config.metrics.port}`"
    assert shown["brokers[].confirm_window"] == f"`{broker.confirm_window}`"
    assert shown["brokers[].addresses[].semantics"] == f"`{broker.addresses[0].semantics}`"


def _reachable(cls: type, seen: set[type]) -> set[type]:
    seen.add(cls)
    for f in dataclasses.fields(cls):
        nested = f.metadata[KEY].check.keys if KEY in f.metadata else None
        if nested is not None and nested not in seen:
            _reachable(nested, seen)
    return seen


def test_every_class_of_keys_is_part_of_the_file() -> None:
    """Keys declared in a class that NodeConfig does not reach would never be read or documented."""
    from router.config import brokers, model

    reachable = _reachable(NodeConfig, set())
    for module in (model, brokers):
        for cls in vars(module).values():
            if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__:
                if any(KEY in f.metadata for f in dataclasses.fields(cls)):
                    assert cls in reachable, cls.__name__


def _default(cls: type, name: str) -> object:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def test_defaults_used_by_other_layers_are_the_declared_ones() -> None:
    from router.adapter.connection import MAX_FRAME
    from router.adapter.policy import ConnectionPolicy
    from router.forwarding.core import RouterCore
    from router.linkstate import LinkStateConfig
    from router.meshctl import Edge

    core_capacity = inspect.signature(RouterCore).parameters["capacity"].default
    assert _default(NodeConfig, "link_capacity") == defaults.LINK_CAPACITY == core_capacity
    assert _default(ListenerConfig, "max_frame_size") == defaults.MAX_FRAME_SIZE == MAX_FRAME == \
        ConnectionPolicy().max_frame
    timers = {f.name: f.default for f in dataclasses.fields(RouterTimers) if f.name != "mode"}
    linkstate = LinkStateConfig()
    assert timers == {name: getattr(linkstate, name) for name in timers}
    assert Edge("A", "B").cost == _default(ConnectorConfig, "cost") == _default(ListenerConfig, "cost")
