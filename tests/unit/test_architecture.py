"""The layers of docs/ARCHITECTURE.md, checked on the source: no import goes up a layer, no module is part
of an import cycle, and only the adapter (and the client libraries) touch Proton.

Reads every ``import`` statement of every module under router/, also those inside functions and
``TYPE_CHECKING`` blocks, so a lazy import can neither hide a cycle nor an arrow the wrong way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROUTER = Path(__file__).resolve().parents[2] / "router"

#: Layer of each package, bottom first (docs/ARCHITECTURE.md). A module may import its own layer and those
#: below it. The longest matching prefix decides.
LAYERS = {
    "router": 0, "router.defaults": 0, "router.logs": 0, "router.argtypes": 0,       # base
    "router.amqp": 1,                                                                # codec
    "router.addressing": 2, "router.config": 2, "router.security": 2, "router.edge": 2,  # core
    "router.forwarding": 2, "router.linkstate": 2, "router.policy": 2,
    "router.adapter": 3,                                                             # Proton adapter
    "router.node": 4,                                                                # node
    "router.management": 5, "router.gateway": 5, "router.telemetry": 5,             # services
    "router.rpc": 5, "router.analytics": 5, "router.oslo": 5,
    "router.launch": 6, "router.cli": 6, "router.__main__": 6, "router.meshctl": 6,  # CLI
}
LAYER_NAMES = ("base", "codec", "core", "adapter", "node", "services", "CLI")
#: Outside the adapter, only client libraries may use python-qpid-proton (its public API).
#: router.management.client is the management client library; the rest of router.management (the agent, the
#: command lines, router.management.security's settings) stays free of Proton.
PROTON_CLIENTS = ("router.rpc", "router.oslo", "router.management.client")
PROTON = ("proton", "cproton_ffi", "cproton")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROUTER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    base = ROUTER.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(router modules, other top-level packages) that the module at `path` imports."""
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                (ours if a.name.split(".")[0] == "router" else others).add(
                    a.name if a.name.startswith("router") else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "router":
                others.add(node.module.split(".")[0])
                continue
            for a in node.names:   # "from router.x import y": the module router.x.y if there is one
                sub = f"{node.module}.{a.name}"
                ours.add(sub if _exists(sub) else node.module)
    return ours, others


MODULES = {_module_name(p): _imports(p) for p in sorted(ROUTER.rglob("*.py"))}
GRAPH = {name: ours for name, (ours, _) in MODULES.items()}


def layer(name: str) -> int:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{name} is in no layer: add its package to LAYERS and docs/ARCHITECTURE.md"
    return LAYERS[best]


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_go_down_the_layers(name: str) -> None:
    mine = layer(name)
    up = sorted(f"{dep} ({LAYER_NAMES[layer(dep)]})" for dep in GRAPH[name] if layer(dep) > mine)
    assert not up, f"{name} ({LAYER_NAMES[mine]}) imports a higher layer: {', '.join(up)}"


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components of the module graph: each must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _proton_allowed(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in ("router.adapter", *PROTON_CLIENTS))


def test_only_the_adapter_and_client_libraries_touch_proton() -> None:
    bad = sorted(name for name, (_, others) in MODULES.items()
                 if others & set(PROTON) and not _proton_allowed(name))
    assert not bad, f"modules outside router.adapter that import Proton: {', '.join(bad)}"


def test_every_package_says_what_it_owns_and_may_import() -> None:
    missing = []
    for init in sorted(ROUTER.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if "may import" not in doc.lower():
            missing.append(_module_name(init))
    assert not missing, f"package docstrings that do not say what they may import: {', '.join(missing)}"


@pytest.mark.parametrize("name", PROTON_CLIENTS)
def test_each_proton_client_library_exists_and_uses_proton(name: str) -> None:
    """The allowance stays minimal: an entry that no longer imports Proton (or no longer exists) goes."""
    users = [m for m, (_, others) in MODULES.items() if _proton_allowed(m) and m.startswith(name)
             and others & set(PROTON)]
    assert users, f"{name} is allowed to import Proton but nothing in it does: remove it from PROTON_CLIENTS"
