"""Imports of router.config and its neighbours: config stays at the bottom, and no package has a cycle.

Reads the source (every ``import`` statement, also inside functions and ``TYPE_CHECKING`` blocks), so a
cycle cannot hide behind a lazy import. Importing a submodule is not counted as importing its package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROUTER = Path(__file__).resolve().parents[2] / "router"

#: What the bottom layer may import (besides itself): router.config's docstring says why.
CONFIG_MAY_IMPORT = ("router.defaults", "router.telemetry.config", "router.addressing", "router.security.")
#: The small dataclass modules beside it may import only the bottom layer.
LEAF_CONFIGS = ("router.defaults", "router.linkstate.config", "router.telemetry.config",
                "router.gateway.config")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROUTER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    base = ROUTER.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("router")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("router"):
            for a in node.names:   # "from router.x import y": the module router.x.y if there is one
                sub = f"{node.module}.{a.name}"
                out.add(sub if _exists(sub) else node.module)
    return out


GRAPH = {_module_name(p): _imports(p) for p in ROUTER.rglob("*.py")}


def _cycle_from(start: str, within: str) -> list[str] | None:
    """A path of imports from ``start`` back to itself, staying inside package ``within``."""
    stack, seen = [(start, [start])], set()
    while stack:
        name, path = stack.pop()
        for dep in GRAPH.get(name, ()):
            if dep == start:
                return [*path, dep]
            if (dep == within or dep.startswith(within + ".")) and dep not in seen:
                seen.add(dep)
                stack.append((dep, [*path, dep]))
    return None


@pytest.mark.parametrize("package", ["router.config", "router.meshctl", "router.analytics"])
def test_no_import_cycle_in(package: str) -> None:
    for name in sorted(GRAPH):
        if name.startswith(package + "."):
            cycle = _cycle_from(name, package)
            assert cycle is None, " -> ".join(cycle)


def test_router_config_imports_only_the_bottom_layer() -> None:
    for name, deps in sorted(GRAPH.items()):
        if name == "router.config" or name.startswith("router.config."):
            outside = {d for d in deps if not d.startswith("router.config")}
            bad = {d for d in outside if not d.startswith(CONFIG_MAY_IMPORT)}
            assert not bad, f"{name} imports {sorted(bad)}"


@pytest.mark.parametrize("leaf", LEAF_CONFIGS)
def test_small_config_modules_import_only_the_bottom_layer(leaf: str) -> None:
    bad = {d for d in GRAPH[leaf] if not d.startswith(("router.config", *CONFIG_MAY_IMPORT))}
    assert not bad, f"{leaf} imports {sorted(bad)}"
