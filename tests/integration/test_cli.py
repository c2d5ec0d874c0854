"""The meshrouter command line: check-config and config errors of run, as a real subprocess.

The last tests drive ``router.cli.main`` in-process with a stand-in ``router.launch`` module, so
the run path (logging setup, exit codes, Ctrl-C) is covered without starting a node.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from router import __version__
from router.cli import main
from router.config import NodeConfig

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "config" / "node.yaml"

GOOD = """\
node:
  id: A
listeners:
  - host: 127.0.0.1
    port: 0
"""

BAD = {
    "port.yaml": (
        "node: {id: A}\nlisteners:\n  - {host: h, port: 1}\n  - {host: h, port: 70000}\n",
        "listeners[1].port: out of range",
    ),
    "unknown.yaml": (
        "node: {id: A, colour: red}\nlisteners: [{host: h, port: 1}]\n",
        "node.colour: unknown key",
    ),
    "prefix.yaml": (
        "node: {id: A}\nlisteners: [{host: h, port: 1}]\naddresses:\n  rules:\n"
        "    - {prefix: a//b, distribution: closest}\n",
        "addresses.rules[0].prefix: bad prefix",
    ),
    "syntax.yaml": ("node:\n  id: A\n listeners: []\n", "<file>: invalid YAML at line"),
    "list.yaml": ("- node\n- listeners\n", "<root>: top level must be a mapping"),
    "nodeid.yaml": ("node: {id: a/b}\nlisteners: [{host: h, port: 1}]\n", "node.id: invalid node id"),
}


def meshrouter(*args: str | Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "router", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


@pytest.fixture
def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    files = {}
    for name, (text, expected) in BAD.items():
        path = tmp_path / name
        path.write_text(text)
        files[name] = (path, expected)
    return files


# --------------------------------------------------------------------------------- subprocess


def test_check_config_good_file(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    result = meshrouter("check-config", path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{path}: OK\n"
    assert result.stderr == ""


def test_check_config_demo_config() -> None:
    result = meshrouter("check-config", "config/node.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "config/node.yaml: OK"


@pytest.mark.parametrize("name", sorted(BAD))
def test_check_config_bad_file(bad_files: dict[str, tuple[Path, str]], name: str) -> None:
    path, expected = bad_files[name]
    result = meshrouter("check-config", path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"meshrouter: error: {path}: "), lines[0]
    assert expected in lines[0]


def test_check_config_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    result = meshrouter("check-config", path)
    assert result.returncode == 2
    expected = f"meshrouter: error: {path}: <file>: cannot read file: No such file or directory"
    assert result.stderr.strip() == expected


@pytest.mark.parametrize("name", ["port.yaml", "syntax.yaml"])
def test_run_bad_config_exits_2_without_traceback(bad_files: dict[str, tuple[Path, str]], name: str) -> None:
    path, expected = bad_files[name]
    result = meshrouter("run", path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"meshrouter: error: {path}: ")
    assert expected in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_run_missing_config(tmp_path: Path) -> None:
    result = meshrouter("run", tmp_path / "missing.yaml")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "<file>: cannot read file" in result.stderr


def test_version() -> None:
    result = meshrouter("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"meshrouter {__version__}"


@pytest.mark.parametrize("args", [(), ("frobnicate",), ("check-config",), ("run",)])
def test_usage_errors(args: tuple[str, ...]) -> None:
    result = meshrouter(*args)
    assert result.returncode == 2
    assert "usage: meshrouter" in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------- in-process


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """Install a stand-in router.launch whose run_node records its config and does ``behaviour``."""
    state = types.SimpleNamespace(configs=[], behaviour=lambda: 0)

    def run_node(config: NodeConfig) -> int:
        state.configs.append(config)
        return state.behaviour()

    module = types.ModuleType("router.launch")
    module.run_node = run_node  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "router.launch", module)
    # setup_logging() changes the root logger: put it back afterwards.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield state
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def test_run_calls_run_node_with_config(fake_server: types.SimpleNamespace) -> None:
    fake_server.behaviour = lambda: 0
    assert main(["run", str(DEMO_CONFIG)]) == 0
    [config] = fake_server.configs
    assert config.node_id == "A"
    assert config.source == str(DEMO_CONFIG)
    assert logging.getLogger().level == logging.INFO


def test_run_returns_run_node_result(fake_server: types.SimpleNamespace) -> None:
    fake_server.behaviour = lambda: 3
    assert main(["run", str(DEMO_CONFIG)]) == 3


def test_run_keyboard_interrupt_exits_0(fake_server: types.SimpleNamespace) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    fake_server.behaviour = interrupted
    assert main(["run", str(DEMO_CONFIG)]) == 0


def test_run_os_error_is_one_line(
    fake_server: types.SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    def bind_fails() -> int:
        raise OSError(98, "Address already in use")

    fake_server.behaviour = bind_fails
    assert main(["run", str(DEMO_CONFIG)]) == 1
    assert capsys.readouterr().err == "meshrouter: error: [Errno 98] Address already in use\n"


def test_run_bad_config_does_not_import_server(tmp_path: Path, fake_server: types.SimpleNamespace) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD["port.yaml"][0])
    assert main(["run", str(path)]) == 2
    assert fake_server.configs == []


def test_main_version_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"meshrouter {__version__}"
