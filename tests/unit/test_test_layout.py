"""The tests' own layout: no test module imports another test module.

Every module under tests/ may import from ``tests.support`` (and tests.support from itself), and from
nothing else under tests/: not a test module, not a conftest, not a helper module of another
directory. Fixtures are shared through conftest.py files, which pytest loads by itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = "tests.support"


def _package(path: Path) -> str:
    """The dotted package a file under tests/ belongs to."""
    return ".".join(path.relative_to(TESTS.parent).parent.parts)


def imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source`` (a module of ``package``), relative ones resolved;
    ``from P import name`` counts as an import of ``P.name`` when P is a package of the tests."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            for a in node.names:
                is_package = (TESTS.parent / module.replace(".", "/") / "__init__.py").exists()
                found.append((node.lineno, f"{module}.{a.name}" if is_package else module))
    return found


def allowed(module: str) -> bool:
    """Anything outside tests/, and tests.support."""
    return not (module == "tests" or module.startswith("tests.")) or module == SUPPORT \
        or module.startswith(SUPPORT + ".")


def test_test_modules_import_only_the_support_package():
    bad = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, module in imports(path.read_text(), _package(path)):
            if not allowed(module):
                bad.append(f"{path.relative_to(TESTS.parent)}:{line}: imports {module}")
    assert not bad, "imports of test modules (use tests/support):\n" + "\n".join(bad)


def test_the_support_package_holds_no_tests():
    support = TESTS / "support"
    assert (support / "__init__.py").is_file()
    assert sorted(p.name for p in support.glob("test_*.py")) == []


def test_the_check_catches_imports_of_test_modules():
    source = "\n".join([
        "import os",
        "from proton import Message",
        "from tests.support.clients import Client",
        "from tests.support import meshes",
        "from tests.integration.test_mesh_control import chain",     # line 5: a test module
        "from tests.system import conftest",                         # 6: a conftest, as a name
        "from . import helpers",                                     # 7: a helper of its own directory
        "import tests.oslo.rpc_server_proc",                         # 8
        "def f():",
        "    from ..conftest import x",                              # 10: nested, relative
    ])
    bad = [(line, m) for line, m in imports(source, "tests.integration") if not allowed(m)]
    assert bad == [(5, "tests.integration.test_mesh_control"), (6, "tests.system.conftest"),
                   (7, "tests.integration.helpers"), (8, "tests.oslo.rpc_server_proc"),
                   (10, "tests.conftest")]
